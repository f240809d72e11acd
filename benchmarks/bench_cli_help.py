"""How long `gpu-autoscaler --help` (and each command's --help) takes, and what it imports.

Runs the installed entry point (``.venv/bin/gpu-autoscaler``) ``--repeat`` times per command line and
prints the median and the maximum wall time, then the slowest imports of ``--help`` from
``python -X importtime`` (cumulative microseconds). Not part of the suite (the suite checks that
``--help`` imports no heavy library: tests/autoscaler/test_cli_imports.py).

    .venv/bin/python benchmarks/bench_cli_help.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = ("", "serve", "check-config", "preflight", "backtest", "forecast", "simulate", "simulate-cold-start")


def _timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def _slowest_imports(python: str, count: int) -> list[tuple[int, str]]:
    probe = "from autoscaler.commands.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    result = subprocess.run([python, "-X", "importtime", "-c", probe], capture_output=True, text=True, check=True)
    rows = []
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = (part.strip() for part in line.removeprefix("import time:").split("|"))
        rows.append((int(cumulative), name))
    return sorted(rows, reverse=True)[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    entry = shutil.which("gpu-autoscaler", path=str(Path(sys.executable).parent))
    if entry is None:
        sys.exit("gpu-autoscaler is not installed beside this Python (make lint installs it into .venv)")
    print(f"{'command line':40} {'median s':>9} {'max s':>7}")
    for name in COMMANDS:
        command = [entry, *([name] if name else []), "--help"]
        times = [_timed(command) for _ in range(args.repeat)]
        print(f"{' '.join(['gpu-autoscaler', *command[1:]]):40} {statistics.median(times):9.2f} {max(times):7.2f}")
    print("\nslowest imports of `gpu-autoscaler --help` (cumulative ms):")
    for cumulative, name in _slowest_imports(sys.executable, 8):
        print(f"  {cumulative / 1000:8.1f}  {name}")


if __name__ == "__main__":
    main()
