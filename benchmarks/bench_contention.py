"""The demo's first forecast and API latency with busy processes beside it on the same cores.

    .venv/bin/python -m benchmarks.bench_contention [--busy 0,2] [--rounds 1] [--timeout 300]
                                                    [--api-seconds 20] [--rate 20] [--repo DIR]
                                                    [--same-session]

For each round and each count of busy processes (each a ``python -c 'while True: pass'`` at normal
priority, started before the service), the demo (``gpu-autoscaler serve``, a fresh state directory,
free ports) starts; the benchmark reports:

- the time from the start of the process to the server listening (its log line; start-up alone,
  before any fit), to ``/readyz`` answering 200, and to the external metrics
  API (HTTPS, the demo's client certificate) answering values for both ``gpu_demand_forecast`` and
  ``gpu_headroom`` (bounded by ``--timeout``: a run that does not get there says so);
- the external metrics API's p50/p99 over ``--api-seconds`` after that, one connection sending
  ``--rate`` requests/s on a fixed schedule (latency from the scheduled time), from this process;
- the time to the end of the second refresh (``gpu_autoscaler_refreshes_total`` on ``/metrics``: the
  demo refreshes every minute), whose work the workers do at their lowered priority;
- fit deadlines missed: log lines naming ``TimeoutError``, ``FitTimeout`` or a replaced worker;
- the 1-minute load average before the run (other users of the machine count too).

Linux's scheduler shares the CPU between sessions first (autogroups, ``kernel.sched_autogroup_enabled``),
then between the processes of a session. The busy processes start in sessions of their own, as
programs started elsewhere (another terminal, the desktop) do; with ``--same-session`` they share the
service's session (and this benchmark's), the harder case: the service's processes then share one
session's part of the CPU with them.

``--repo`` runs another checkout's service (e.g. the code before a change) with this benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import numpy as np

REPO = Path(__file__).resolve().parent.parent
EXTERNAL_METRICS = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default"
FORECAST_METRICS = ("gpu_demand_forecast", "gpu_headroom")
MISSED_DEADLINE = re.compile(r"TimeoutError|FitTimeout|forecast worker \d+ replaced")


@dataclass
class Outcome:
    busy: int
    load_before: float
    listening_s: float | None = None
    ready_s: float | None = None
    values_s: float | None = None
    second_refresh_s: float | None = None
    second_refresh_waited_s: float = 0.0  # when the wait for it ended
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    missed_deadlines: int = 0


class Demo:
    """The demo as a child process; its log read by a thread so the pipe never fills."""

    def __init__(self, repo: Path, state: Path) -> None:
        command = [sys.executable, "-m", "autoscaler", "serve", "--state-dir", str(state)]
        command += ["--secure-port", "0", "--http-port", "0", "--grpc-port", "0"]
        self.state = state
        self.started = time.monotonic()
        self.process = subprocess.Popen(command, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.http_url = ""
        self.secure_url = ""
        self.listening_s: float | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            if found := re.search(r"external metrics API on (https://127\.0\.0\.1:\d+)", line):
                self.secure_url = found.group(1)
                self.listening_s = self.elapsed()
            if found := re.search(r"probes and /metrics on (http://127\.0\.0\.1:\d+)", line):
                self.http_url = found.group(1)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def client_tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.state / "ca.crt"))
        context.load_cert_chain(str(self.state / "client.crt"), str(self.state / "client.key"))
        return context

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=5)


async def _has_values(session: aiohttp.ClientSession, url: str) -> bool:
    async with session.get(url) as response:
        return response.status == 200 and bool((await response.json()).get("items"))


async def _wait_first_forecast(demo: Demo, outcome: Outcome, timeout_s: float) -> None:
    """Poll /readyz and the external metrics API until both forecasts have values, or the timeout."""
    while not (demo.http_url and demo.secure_url) and demo.elapsed() < timeout_s:
        if demo.process.poll() is not None:
            raise RuntimeError("the demo exited:\n" + "".join(demo.lines[-20:]))
        await asyncio.sleep(0.1)
    connector = aiohttp.TCPConnector(ssl=demo.client_tls())
    async with aiohttp.ClientSession(connector=connector) as session:
        while demo.elapsed() < timeout_s:
            if outcome.ready_s is None:
                async with session.get(f"{demo.http_url}/readyz") as response:
                    if response.status == 200:
                        outcome.ready_s = demo.elapsed()
            urls = [f"{demo.secure_url}{EXTERNAL_METRICS}/{metric}" for metric in FORECAST_METRICS]
            if all([await _has_values(session, url) for url in urls]):
                outcome.values_s = demo.elapsed()
                return
            await asyncio.sleep(0.2)


async def _measure_api(demo: Demo, outcome: Outcome, seconds: float, rate: float) -> None:
    """One connection, ``rate`` requests/s on a fixed schedule; latency from the scheduled time."""
    url = f"{demo.secure_url}{EXTERNAL_METRICS}/{FORECAST_METRICS[0]}"
    connector = aiohttp.TCPConnector(limit=1, ssl=demo.client_tls())
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.perf_counter()
        for number in range(int(seconds * rate)):
            scheduled = start + number / rate
            await asyncio.sleep(max(0.0, scheduled - time.perf_counter()))
            try:
                async with session.get(url) as response:
                    await response.read()
                    ok = response.status == 200
            except aiohttp.ClientError:
                ok = False
            outcome.latencies_ms.append((time.perf_counter() - scheduled) * 1000)
            outcome.errors += not ok


async def _wait_second_refresh(demo: Demo, outcome: Outcome, timeout_s: float) -> None:
    """Poll the ops port's /metrics until two refreshes are done, or ``timeout_s`` more have passed."""
    until = demo.elapsed() + timeout_s
    async with aiohttp.ClientSession() as session:
        while demo.elapsed() < until:
            async with session.get(f"{demo.http_url}/metrics") as response:
                text = await response.text()
            if (found := re.search(r"^gpu_autoscaler_refreshes_total (\S+)$", text, re.M)) and float(found[1]) >= 2:
                outcome.second_refresh_s = demo.elapsed()
                return
            await asyncio.sleep(0.5)
    outcome.second_refresh_waited_s = demo.elapsed()


def _busy_processes(count: int, own_sessions: bool) -> list[subprocess.Popen[bytes]]:
    command = [sys.executable, "-c", "while True: pass"]
    return [subprocess.Popen(command, start_new_session=own_sessions) for _ in range(count)]


def run_once(busy: int, args: argparse.Namespace) -> Outcome:
    outcome = Outcome(busy, os.getloadavg()[0])
    spinners = _busy_processes(busy, own_sessions=not args.same_session)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-contention-") as state:
            demo = Demo(args.repo, Path(state))
            try:
                asyncio.run(_wait_first_forecast(demo, outcome, args.timeout))
                if outcome.values_s is not None:
                    asyncio.run(_measure_api(demo, outcome, args.api_seconds, args.rate))
                    asyncio.run(_wait_second_refresh(demo, outcome, args.timeout))
            finally:
                demo.stop()
            outcome.listening_s = demo.listening_s
            outcome.missed_deadlines = sum(bool(MISSED_DEADLINE.search(line)) for line in demo.lines)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    return outcome


def _seconds(value: float | None, timeout_s: float) -> str:
    return f"{value:.1f}" if value is not None else f"> {timeout_s:.0f}"


COLUMNS = (
    "busy processes", "load (1 min) before", "listening (s)", "/readyz 200 (s)", "both forecasts served (s)",
    "x idle", "API p50 (ms)", "API p99 (ms)", "requests", "errors", "second refresh done (s)", "deadlines missed",
)  # fmt: skip


def report(outcomes: list[Outcome], timeout_s: float) -> None:
    idle = [o.values_s for o in outcomes if o.busy == 0 and o.values_s is not None]
    idle_s = float(np.median(idle)) if idle else None
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for o in outcomes:
        ratio = f"{o.values_s / idle_s:.2f}" if o.values_s is not None and idle_s else "-"
        p50, p99 = (f"{np.percentile(o.latencies_ms, q):.1f}" for q in (50, 99)) if o.latencies_ms else ("-", "-")
        second = _seconds(o.second_refresh_s, o.second_refresh_waited_s) if o.values_s is not None else "-"
        times = (_seconds(value, timeout_s) for value in (o.listening_s, o.ready_s, o.values_s))
        cells = (o.busy, f"{o.load_before:.2f}", *times, ratio, p50, p99, len(o.latencies_ms), o.errors, second)
        print("| " + " | ".join(str(cell) for cell in (*cells, o.missed_deadlines)) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", default="0,2", help="busy processes beside the service, per run")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the first forecast")
    parser.add_argument("--api-seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=20.0, help="API requests per second")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout whose service runs")
    parser.add_argument("--same-session", action="store_true", help="busy processes in the service's session")
    args = parser.parse_args()
    sessions = "the service's session" if args.same_session else "sessions of their own"
    print(f"{os.cpu_count()} CPUs; service from {args.repo}; busy processes in {sessions}", flush=True)
    outcomes = []
    for _ in range(args.rounds):
        for busy in (int(count) for count in args.busy.split(",")):
            outcome = run_once(busy, args)
            print(f"busy {busy}: forecasts served at {_seconds(outcome.values_s, args.timeout)} s", flush=True)
            outcomes.append(outcome)
    report(outcomes, args.timeout)


if __name__ == "__main__":
    main()
