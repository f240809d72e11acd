"""Forecast refresh cost for 10, 100 and 1,000 series, and the API's latency while it runs.

    .venv/bin/python -m benchmarks.bench_refresh [--series 10,100,1000] [--days 14] [--workers 2] [--rate 1000]

Series are slices of real traces (Helios Earth per-VC running GPUs, 5-minute means, shifted so that
no two series are identical). For each count: wall time of the first refresh (full model selection
by backtest), of a steady refresh (the held models forecast from the newest data), CPU seconds of the workers and of
the service, peak RSS of the service and of one worker, and the external metrics API's p50/p99 idle
versus during the refresh. The load generator is a separate process on loopback (8 connections, TLS
with a client certificate) sending ``--rate`` requests/s on a fixed schedule (open loop, latency from
the scheduled time): the load an HPA fleet makes is a rate, and a closed loop would saturate the
cores and measure the generator's share of them. Fitting runs in the process pool, so the API's p99
should barely move.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timedelta
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import pandas as pd

from adapters.types import Signal
from autoscaler.app.access import build_access, client_ca_pems
from autoscaler.app.factory import create_app
from autoscaler.app.serving import running
from autoscaler.config.settings import Settings
from autoscaler.refresh.pipeline import Pipeline
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import ForecastPools, default_workers, forecast_pools
from autoscaler.serving.provider import MetricInfo, SnapshotProvider, empty_snapshot
from autoscaler.targets.plans import MetricPlan, RefreshInputs, RefreshSettings
from autoscaler.web.security.tls import ServerTLS, ServingFiles
from autoscaler.web.shared.readiness import Readiness
from benchmarks.bench_api import PATH, Result, load_in_this_process
from tests.pki import make_pki
from tests.service_replicas import real_series

METRICS = (MetricInfo("gpu_demand_forecast", "bench"),)
PLANS = (MetricPlan("gpu_demand_forecast", "gpus", "demand"),)


class BenchSource:
    name = "gpus"

    def __init__(self, series: list[pd.Series]) -> None:
        self.signals = [
            Signal("gpus", {"nodepool": f"pool-{i}"}, s, pd.Timedelta(minutes=5)) for i, s in enumerate(series)
        ]

    async def pull(self, now: datetime) -> list[Signal]:
        return self.signals


def workers_cpu(pools: list[ProcessPoolExecutor]) -> float:
    """CPU seconds of the live workers (getrusage only counts children that have exited)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in [pid for pool in pools for pid in pool._processes or {}]:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


def workers_peak_rss_mb(pools: list[ProcessPoolExecutor]) -> float:
    peaks = []
    for pid in [pid for pool in pools for pid in pool._processes or {}]:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peaks.append(int(line.split()[1]) / 1024)
    return max(peaks, default=0.0)


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure(count: int, days: int, workers: int, pki_dir: Path, rate: float) -> dict[str, float]:
    settings = Settings.model_validate(
        {
            "server": {"bind_address": "127.0.0.1", "secure_port": 0, "http_port": None},
            "auth": {
                "mode": "files",
                "client_ca_file": str(pki_dir / "client-ca.crt"),
                "authorization": "allow-authenticated",
            },
        }
    )
    provider = SnapshotProvider(empty_snapshot(METRICS))
    access = await build_access(settings)
    pipeline = Pipeline(METRICS, PLANS, (), RefreshSettings(timedelta(minutes=1), timedelta(minutes=10)))
    api_app, ops_app = create_app(
        settings, pipeline=pipeline, access=access, provider=provider, readiness=Readiness(ready=True)
    )
    tls = ServerTLS(ServingFiles(pki_dir / "serving.crt", pki_dir / "serving.key"), client_ca_pems(access))
    series = real_series(count, days)
    pools = forecast_pools(workers)
    refresher = Refresher(
        provider=provider,
        inputs=RefreshInputs(
            metrics=METRICS,
            plans=PLANS,
            sources=[BenchSource(series)],
            refresh=RefreshSettings(timedelta(minutes=1), timedelta(minutes=10), fit_timeout=timedelta(hours=1)),
        ),
        pools=ForecastPools(pools),
    )
    result: dict[str, float] = {"series": count}
    generator = ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn"))
    loop = asyncio.get_running_loop()

    async def load(url: str) -> Result:
        return await loop.run_in_executor(generator, load_in_this_process, url, pki_dir, 8, 3.0, 100_000, rate)

    async with running(settings, api_app=api_app, ops_app=ops_app, tls=tls) as listening:
        url = f"https://127.0.0.1:{listening.secure_port}{PATH}"
        await refresher.refresh_once()  # warm the workers (imports) and give the API something to serve
        refresher.pools.lower_priority()  # as the service does once its first forecast is served
        idle = await load(url)
        cpu_workers, cpu_self = workers_cpu(pools), self_cpu()
        started = time.perf_counter()
        refresher.schedule.selected.clear()  # a full model selection, as at start or on the reselect cadence
        busy_task = asyncio.create_task(refresher.refresh_once())
        busy = await load(url)
        await busy_task
        result["first_refresh_s"] = time.perf_counter() - started
        started = time.perf_counter()
        await refresher.refresh_once()
        result["steady_refresh_s"] = time.perf_counter() - started
        result["worker_cpu_s"] = workers_cpu(pools) - cpu_workers
        result["largest_worker_peak_rss_mb"] = workers_peak_rss_mb(pools)
        result["service_cpu_s"] = self_cpu() - cpu_self
        result["idle_p50_ms"], result["idle_p99_ms"] = (float(np.percentile(idle.latencies_ms, q)) for q in (50, 99))
        result["busy_p50_ms"], result["busy_p99_ms"] = (float(np.percentile(busy.latencies_ms, q)) for q in (50, 99))
        result["errors"] = idle.errors + busy.errors
    for pool in pools:
        pool.shutdown()
    generator.shutdown()
    result["service_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--series", default="10,100,1000")
    parser.add_argument("--days", type=int, default=14)
    parser.add_argument("--workers", type=int, default=None, help="default: the service's (CPUs - 1, at least 1)")
    parser.add_argument("--rate", type=float, default=1000.0, help="API requests/s offered during the measurement")
    args = parser.parse_args()
    args.workers = args.workers or default_workers()
    with tempfile.TemporaryDirectory() as temporary:
        pki = make_pki(Path(temporary))
        print(
            f"{args.days} days of 5-minute history per series; {args.workers} worker processes; "
            f"API load {args.rate:g} req/s open loop over 8 connections; {os.cpu_count()} cores"
        )
        header = (
            "series",
            "first_refresh_s",
            "steady_refresh_s",
            "worker_cpu_s",
            "service_cpu_s",
            "service_peak_rss_mb",
            "largest_worker_peak_rss_mb",
            "idle_p99_ms",
            "busy_p99_ms",
            "errors",
        )
        print(" ".join(f"{h:>14}" for h in header))
        for count in [int(n) for n in args.series.split(",")]:
            row = asyncio.run(measure(count, args.days, args.workers, pki.directory, args.rate))
            print(
                " ".join(f"{row[h]:>14.2f}" if isinstance(row[h], float) else f"{row[h]:>14}" for h in header),
                flush=True,
            )


if __name__ == "__main__":
    main()
