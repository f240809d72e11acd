"""auto-slo against each tuned heuristic at the same attained level, not only at the same target.

    PYTHONPATH=. .venv/bin/python -m benchmarks.slo_frontier --out /tmp/slo-frontier [--traces helios] [--targets 1%]
        [--hpa-tolerance up=0,down=0.05]

A tuned heuristic that met the target less well (more minutes short) can cost a little less than
auto-slo, at a level auto-slo was not asked to stop at. This asks what each heuristic costs when it is
tuned to do at least as well as auto-slo did: ``simulate`` runs ``auto-slo:T`` and each tuned
heuristic at T and at looser and tighter targets (``--ladder``, shares of T), with the traces and
settings of ``benchmarks/slo_attainment.py``. Prints every run (attained, GPU-hours) and, per
heuristic, the cheapest of its runs that attained auto-slo's level or better, and the GPU-hours of
its efficient runs (no other both attained better and cost less) interpolated to auto-slo's level.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.slo_attainment import simulate_arguments

HEURISTICS = ("static_buffer@", "scheduled_buffer@", "reactive_max@")


def percent(value: float) -> str:
    return f"{value * 100:.4g}%"


def run(trace: str, out: Path, policies: list[str], name: str, hpa_tolerance: str | None = None) -> dict[str, Any]:
    command = [sys.executable, "-m", "autoscaler", *simulate_arguments(trace, out, ",".join(policies), hpa_tolerance)]
    print("$", " ".join(command), file=sys.stderr)
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise SystemExit(f"{trace}: simulate failed: {completed.stderr[-2000:]}")
    (out / f"{name}.json").write_text(completed.stdout)
    report: dict[str, Any] = json.loads(completed.stdout)["policies"]
    return report


def frontier_hours(points: list[tuple[float, float]], level: float) -> float | None:
    """The GPU-hours of a heuristic's efficient runs (none both attains better and costs less) at
    ``level``, linear between the two that bracket it; None outside their range."""
    efficient = [
        (attained, hours)
        for attained, hours in points
        if not any(other <= attained and cost < hours for other, cost in points if (other, cost) != (attained, hours))
    ]
    efficient.sort()
    for (better, dearer), (worse, cheaper) in itertools.pairwise(efficient):
        if better <= level <= worse:
            share = 0.0 if worse == better else (level - better) / (worse - better)
            return dearer + share * (cheaper - dearer)
    exact = [hours for attained, hours in efficient if attained == level]
    return exact[0] if exact else None


def policies_for(target_text: str, ladder: list[str]) -> list[str]:
    target = float(target_text.rstrip("%")) / 100
    levels = [percent(target * float(share)) for share in ladder]
    return [f"auto-slo:{target_text}"] + [f"{name}{level}" for name in HEURISTICS for level in levels]


def compare(trace: str, target_text: str, policies: list[str], report: dict[str, Any]) -> list[str]:
    """One trace and target: every run, then each heuristic at auto-slo's attained level."""
    slo = report[f"auto-slo:{target_text}"]
    lines = [f"### {trace}, target {target_text}", "", "| policy | attained | provisioned GPU-hours |", "|---|---|---|"]
    for text in policies:
        lines.append(f"| `{text}` | {report[text]['attained']:.3%} | {report[text]['provisioned_gpu_hours']:,.0f} |")
    lines += ["", f"auto-slo attained {slo['attained']:.3%} at {slo['provisioned_gpu_hours']:,.0f} GPU-hours:"]
    hours = slo["provisioned_gpu_hours"]
    for name in HEURISTICS:
        runs = [
            (report[text]["attained"], report[text]["provisioned_gpu_hours"])
            for text in policies
            if text.startswith(name)
        ]
        cheapest = min((cost for attained, cost in runs if attained <= slo["attained"]), default=None)
        at_level = frontier_hours(runs, slo["attained"])
        said = (
            "no run as good"
            if cheapest is None
            else f"cheapest run as good {cheapest:,.0f} (auto-slo {1 - hours / cheapest:+.2%} fewer)"
        )
        if at_level is not None:
            said += f"; its efficient runs at that level {at_level:,.0f} (auto-slo {1 - hours / at_level:+.2%} fewer)"
        lines.append(f"- `{name}`: {said}")
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--traces", default="helios")
    parser.add_argument("--targets", default="1%")
    parser.add_argument(
        "--ladder", default="1.25,1.1,1,0.95,0.9,0.85,0.8", help="shares of the target to tune heuristics to"
    )
    parser.add_argument(
        "--hpa-tolerance", help="simulate's --hpa-tolerance (default: the controller's 0.1; shipped: up=0,down=0.05)"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ladder = args.ladder.split(",")
    for trace in args.traces.split(","):
        # One simulate per trace: auto-slo's forecasts are made once for every target.
        per_target = {target: policies_for(target, ladder) for target in args.targets.split(",")}
        every = [text for texts in per_target.values() for text in texts]
        report = run(trace, args.out, every, trace, args.hpa_tolerance)
        for target, policies in per_target.items():
            print("\n".join(compare(trace, target, policies, report)), flush=True)


if __name__ == "__main__":
    main()
