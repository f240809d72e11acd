"""GPUForecast publication at scale: object sizes and API writes per refresh for N series.

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_publication [--series 1000] [--shards 16,64]

One real refresh of the Helios Earth trace (demand and headroom, with their provenance) gives the
two served items of one series; they are cloned into ``--series`` series (``nodepool=pool-<i>``,
values spread), with their step-down pacing state, and published on the fake Kubernetes API
(tests/fakekube.py, the real client) with each shard count: the first publication (objects created),
a refresh where every value changed, and one where nothing did. Reported per shard count: requests
and wall time of each publication, the largest object, and the requests a second each costs at a
60 s refresh interval.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from tempfile import TemporaryDirectory

from adapters.kubernetes.gpuforecasts import ForecastWriter
from autoscaler.refresh.fitting import SeriesKey
from autoscaler.refresh.workers import ForecastPools
from autoscaler.replication.forecast_objects import MAX_OBJECT_BYTES, Pacing, object_bytes, shard_statuses
from autoscaler.replication.publication import Publisher, signals_of
from autoscaler.serving.provider import ServedSeries, Snapshot
from tests.autoscaler.test_publication import NAMESPACE, PLANS, Clock, refresher
from tests.fakekube import FakeKube


def cloned(template: Snapshot, count: int, shift: float) -> tuple[Snapshot, Pacing]:
    series: dict[str, list[ServedSeries]] = {name: [] for name in template.metrics}
    pacing: Pacing = {}
    for metric, (one,) in template.series.items():
        for index in range(count):
            labels = {"nodepool": f"pool-{index}"}
            value = one.value * (1 + index % 7 / 10) + shift
            series[metric].append(replace(one, labels=labels, value=value))
            key: SeriesKey = ("gpus", (("nodepool", labels["nodepool"]),))
            pacing[(metric, key)] = (value, one.timestamp)
    return Snapshot(template.created_at, template.metrics, {k: tuple(v) for k, v in series.items()}), pacing


async def one_shard_count(template: Snapshot, count: int, shards: int, workdir: Path) -> None:
    fake = FakeKube(workdir)
    await fake.start()
    api = await fake.api_client()
    try:
        publisher = Publisher(ForecastWriter(api, NAMESPACE), shards=shards, signal_of=signals_of(PLANS))
        largest = 0
        rows = []
        for label, shift in (("first (creates)", 0.0), ("all values changed", 0.5), ("nothing changed", 0.5)):
            snapshot, pacing = cloned(template, count, shift)
            statuses = shard_statuses(snapshot, signals_of(PLANS), pacing, shards)
            largest = max(object_bytes(status) for status in statuses.values())
            before = len(fake.requests_for("gpuforecasts"))
            started = time.perf_counter()
            await publisher.publish(snapshot, pacing)
            elapsed = time.perf_counter() - started
            requests = len(fake.requests_for("gpuforecasts")) - before
            rows.append((label, requests, elapsed))
        print(
            f"\n{count} series x 2 metrics, {shards} shards: largest object {largest / 1024:.0f} KiB "
            f"(bound {MAX_OBJECT_BYTES // 1024} KiB), failures {publisher.stats.failures}"
        )
        for label, requests, elapsed in rows:
            rate = requests / 60
            print(f"  {label:<20} {requests:>5} requests  {elapsed:6.2f} s  ({rate:.2f} requests/s at a 60 s refresh)")
    finally:
        await api.close()
        await fake.stop()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--shards", default="16,64")
    args = parser.parse_args()
    executor = ThreadPoolExecutor(max_workers=1)
    try:
        template = await refresher(ForecastPools([executor]), Clock()).refresh_once()
    finally:
        executor.shutdown()
    for shards in (int(s) for s in args.shards.split(",")):
        with TemporaryDirectory() as workdir:
            await one_shard_count(template, args.series, shards, Path(workdir))


if __name__ == "__main__":
    asyncio.run(main())
