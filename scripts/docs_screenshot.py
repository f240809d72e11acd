"""Take the README's picture: the demo's page for one metric, as headless Chromium shows it.

    .venv/bin/python scripts/docs_screenshot.py            # writes docs/images/demo-page.png

Starts the demo (`gpu-autoscaler serve`) on free ports with a throw-away state directory, waits until
it is ready (its first forecast is served), screenshots ``/ui/gpu_headroom`` and stops the demo.
Needs the Debian package ``chromium`` (``make system-deps`` installs it).
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def start_demo(state: Path) -> tuple[subprocess.Popen[str], str]:
    """The demo process and its plain HTTP URL, read from its start-up log."""
    command = [sys.executable, "-m", "autoscaler", "serve", "--state-dir", str(state)]
    command += ["--secure-port", "0", "--http-port", "0", "--grpc-port", "off"]
    # This interpreter running this repository's own command line, no outside input.
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # noqa: S603
    log = process.stdout
    if log is None:
        raise SystemExit("no log pipe")
    for line in log:
        if found := re.search(r"probes and /metrics on (http://127\.0\.0\.1:\d+)", line):
            # Keep draining the log, so the demo never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in log], daemon=True).start()
            return process, found.group(1)
    raise SystemExit(f"the demo did not start (exit {process.wait()})")


def wait_ready(url: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=5) as answer:  # noqa: S310 (loopback URL)
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1)
    raise SystemExit(f"the demo was not ready within {timeout_s:.0f} s")


def screenshot(url: str, output: Path, profile: Path, size: str) -> None:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    command = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        f"--screenshot={output}",
        f"--window-size={size}",
        url,
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=120)  # noqa: S603 (Chromium on a loopback URL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metric", default="gpu_headroom")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "images" / "demo-page.png")
    parser.add_argument("--window-size", default="1280,1100")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        process, url = start_demo(Path(scratch) / "state")
        try:
            wait_ready(url)
            arguments.output.parent.mkdir(parents=True, exist_ok=True)
            page = f"{url}/ui/{arguments.metric}"
            screenshot(page, arguments.output, Path(scratch) / "profile", arguments.window_size)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
    print(f"wrote {arguments.output}")


if __name__ == "__main__":
    main()
