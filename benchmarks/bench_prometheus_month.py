"""The read-only trial against a month of a GPU pool in a real Prometheus (issue 37; the data from
``benchmarks.cluster_history``; docs/benchmarks/query-cost.md).

    PYTHONPATH=. .venv/bin/python -m benchmarks.cluster_history --out DIR
    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_prometheus_month --blocks DIR/blocks [--days 1,3,7,14,30]
        [--report-since 30d] [--skip-growth] [--skip-report] [--skip-serve]

Starts Debian's Prometheus on the blocks with a user's defaults (``--query.timeout=2m``), then:

1. growth: the GPU history as ``report`` and ``serve`` pull it (``gpus_requested`` at the 5-minute step, a
   day per request, 4 at a time), raw and through the recording rule, for each of ``--days``: wall seconds;
2. report: ``gpu-autoscaler report --since 30d --save-series`` as a process (wall seconds), then the same
   points in one query_range for the whole range through the recording rule, as the report read them (no
   day chunks; on a second Prometheus whose query timeout is 30 minutes, as the default 2 minutes does not
   hold it): the points must be equal, and the ``simulate`` command the report prints must give the same
   figures on both series;
3. serve: ``gpu-autoscaler serve --prometheus-url`` as a process: seconds until ``/readyz`` answers 200
   and until every configured metric has a value for every pool in ``/api/v1/forecasts``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pandas as pd

from adapters.prometheus import presets
from adapters.prometheus.client import PrometheusClientSettings, PrometheusSource
from adapters.types import NODEPOOL_LABEL
from autoscaler.commands.report import write_series
from tests.prometheus_fixture import PrometheusServer, binaries_or_skip

STEP = timedelta(minutes=5)
USER_QUERY_TIMEOUT = "2m"  # Prometheus's default --query.timeout, and kube-prometheus-stack's
SINGLE_QUERY_TIMEOUT = "30m"
METRICS = ("gpu_demand_forecast", "gpu_headroom", "gpu_utilization_forecast")


def prometheus(blocks: Path, query_timeout: str) -> PrometheusServer:
    now = pd.Timestamp.now(tz="UTC").floor("min")
    server = PrometheusServer(
        binary=binaries_or_skip()[0], data_dir=blocks, trace=None, probe_at=now,
        extra_args=(f"--query.timeout={query_timeout}",),
    )  # fmt: skip
    server.start(timeout_s=300)
    return server


async def pulled(
    url: str, recorded: bool, start: pd.Timestamp, end: pd.Timestamp, chunk: timedelta
) -> tuple[float, dict[str, pd.Series]]:
    """Wall seconds of the GPU history's pull as the service sends it (``chunk`` a request), and the series by pool."""
    query = replace(presets.gpus_requested(step=STEP, recorded=recorded), liveness=None)
    settings = PrometheusClientSettings(url=url, timeout_s=1800.0, chunk=chunk)
    async with PrometheusSource(settings) as source:
        began = time.perf_counter()
        signals = await source.backfill(query, start.to_pydatetime(), end.to_pydatetime())
        took = time.perf_counter() - began
    return took, {signal.labels.get(NODEPOOL_LABEL, ""): signal.series for signal in signals}


def growth(url: str, day_counts: list[int]) -> None:
    print("days | raw s | recorded s | raw / recorded | raw and recorded equal", flush=True)
    end = pd.Timestamp.now(tz="UTC").floor("min")
    for days in day_counts:
        start = end - pd.Timedelta(days=days)
        raw_s, raw = asyncio.run(pulled(url, False, start, end, timedelta(days=1)))
        recorded_s, recorded = asyncio.run(pulled(url, True, start, end, timedelta(days=1)))
        same = raw.keys() == recorded.keys() and all(raw[pool].equals(recorded[pool]) for pool in raw)
        print(f"{days} | {raw_s:.1f} | {recorded_s:.1f} | {raw_s / recorded_s:.1f}x | {same}", flush=True)


def _environment(work: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path.cwd()), "KUBECONFIG": str(work / "none")}


def report(url: str, since: str, work: Path) -> tuple[Path, list[str]]:
    """Run the report (timed); the saved series' directory and the simulate commands it printed."""
    saved = work / "series"
    saved.mkdir()
    command = [sys.executable, "-m", "autoscaler", "report", "--prometheus-url", url, "--since", since,
               "--output", str(work / "report.html"), "--save-series", str(saved)]  # fmt: skip
    began = time.perf_counter()
    finished = subprocess.run(command, capture_output=True, text=True, env=_environment(work), check=False)
    took = time.perf_counter() - began
    print(f"report --since {since}: exit {finished.returncode} in {took:.0f} s; {finished.stdout.strip()}", flush=True)
    if finished.returncode != 0:
        raise SystemExit(finished.stderr[-3000:])
    html = (work / "report.html").read_text(encoding="utf-8")
    commands = sorted(set(re.findall(r"gpu-autoscaler simulate [^<\n]+", html)))
    return saved, [command.replace("&#x27;", "'").replace("&quot;", '"') for command in commands]


def single_query_matches(url: str, saved: Path, commands: list[str], work: Path) -> None:
    """The report's saved points against one query_range over the same grid points, then its figures."""
    files = sorted(saved.glob("nodepool-*.csv"))
    frames = {path.name: pd.read_csv(path, index_col="timestamp", parse_dates=True)["value"] for path in files}
    first = min(frame.index[0] for frame in frames.values())
    last = max(frame.index[-1] for frame in frames.values())
    # Through the rule, as the report read it here. The raw series in one 30-day query grew Prometheus past
    # 22 GB within a minute (docs/benchmarks/query-cost.md): never on a shared machine.
    for recorded in (True,):
        # A peak point is labelled by its step's start and evaluated at its end: ask for the ends.
        took, single = asyncio.run(pulled(url, recorded, first + STEP, last + STEP, timedelta(days=40)))
        what = "recorded" if recorded else "raw"
        print(f"one query_range, {what}, {first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M}: {took:.0f} s", flush=True)
        again = work / f"single-{what}"
        again.mkdir()
        for pool, values in single.items():
            if values.notna().any():
                write_series(values, again / f"nodepool-{pool or '(none)'}.csv")
        for path in files:
            mine = pd.read_csv(again / path.name, index_col="timestamp", parse_dates=True)["value"]
            equal = mine.equals(frames[path.name])
            print(f"{path.name}: {len(mine)} points, equal to the report's: {equal}", flush=True)
        for command in commands:
            saved_file = next(part for part in shlex.split(command) if part.endswith(".csv"))
            single_file = str(again / Path(saved_file).name)
            figures = [_simulate(command), _simulate(command.replace(saved_file, single_file))]
            print(f"{Path(saved_file).name}: simulate's figures equal: {figures[0] == figures[1]}", flush=True)
            print(figures[1], flush=True)


def _simulate(command: str) -> str:
    arguments = shlex.split(command)[1:]  # gpu-autoscaler simulate ...
    finished = subprocess.run([sys.executable, "-m", "autoscaler", *arguments], capture_output=True, text=True,
                              check=True, env={**os.environ, "PYTHONPATH": str(Path.cwd())})  # fmt: skip
    # The figures table's rows: the header names the file and the fits' lines their seconds.
    return "\n".join(line for line in finished.stdout.splitlines() if line.startswith("│"))


def serve(url: str, work: Path, timeout_s: float) -> None:
    """Seconds until ready, and until every metric has a value for every pool."""
    command = [sys.executable, "-m", "autoscaler", "serve", "--prometheus-url", url, "--http-port", "0",
               "--state-dir", str(work / "state")]  # fmt: skip
    began = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=_environment(work), start_new_session=True)  # fmt: skip
    log: list[str] = []
    try:
        page = _page_url(process, log)
        ready_s, served_s, served = _poll(page, began, timeout_s)
        print(f"serve: ready after {ready_s:.0f} s, every metric served after {served_s:.0f} s: {served}", flush=True)
    finally:
        os.killpg(process.pid, signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
        log.append(rest)
    print("".join(line for line in "".join(log).splitlines(keepends=True) if "signal " in line or "ready" in line))


def _page_url(process: subprocess.Popen[str], log: list[str]) -> str:
    assert process.stdout is not None
    for line in process.stdout:
        log.append(line)
        if found := re.search(r"forecasts on (http://127\.0\.0\.1:\d+)/", line):
            return found.group(1)
    raise SystemExit("serve did not start:\n" + "".join(log))


def _poll(page: str, began: float, timeout_s: float) -> tuple[float, float, dict[str, dict[str, float]]]:
    ready_s = None
    while time.monotonic() - began < timeout_s:
        if ready_s is None and _status(f"{page}/readyz") == 200:
            ready_s = time.monotonic() - began
        with urllib.request.urlopen(f"{page}/api/v1/forecasts", timeout=30) as answer:  # noqa: S310 (loopback)
            document = json.load(answer)
        served = {metric["metric"]: {s["labels"].get("nodepool", ""): s["value"] for s in metric["series"]}
                  for metric in document["metrics"]}  # fmt: skip
        if ready_s is not None and all(served.get(metric) for metric in METRICS):
            return ready_s, time.monotonic() - began, served
        time.sleep(1.0)
    raise SystemExit(f"not every metric served within {timeout_s:.0f} s")


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:  # noqa: S310 (loopback)
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=Path, required=True)
    parser.add_argument("--days", default="1,3,7,14,30")
    parser.add_argument("--report-since", default="30d")
    parser.add_argument("--serve-timeout", type=float, default=1800.0)
    for part in ("growth", "report", "serve"):
        parser.add_argument(f"--skip-{part}", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-month-") as scratch:
        work = Path(scratch)
        server = prometheus(args.blocks, USER_QUERY_TIMEOUT)
        print(f"Prometheus on {server.url}, --query.timeout={USER_QUERY_TIMEOUT}", flush=True)
        try:
            if not args.skip_growth:
                growth(server.url, [int(text) for text in args.days.split(",")])
            if not args.skip_report:
                saved, commands = report(server.url, args.report_since, work)
            if not args.skip_serve:
                serve(server.url, work, args.serve_timeout)
        finally:
            server.stop()
        if not args.skip_report:
            generous = prometheus(args.blocks, SINGLE_QUERY_TIMEOUT)
            try:
                single_query_matches(generous.url, saved, commands, work)
            finally:
                generous.stop()


if __name__ == "__main__":
    main()
