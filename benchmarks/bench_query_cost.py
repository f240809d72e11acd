"""What the gpus_requested history costs Prometheus, as the cluster and the lookback grow, read raw and
through the shipped recording rule (manifests/monitoring/prometheusrule.yaml).

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_query_cost [--pods 100,200,400] [--days 1,2,4]
        [--pools 4] [--repeat 3]

For each pod count, a real Prometheus (Debian's, on loopback) is backfilled with ``max(--days)`` days at
1-minute samples of what kube-state-metrics exports for that many GPU pods spread over ``--pools`` node
pools (each pod a request, a phase and its node's pool label; a pod's GPUs follow a daily wave), and with
the recording rule's series for the same pods, as if the rule had run all along. For each lookback, the
preset's range query at the service's 5-minute step, as the service sends it (the step's peak, in day
chunks, at most 4 at a time), is timed raw and recorded: the median of ``--repeat`` wall times. Prints
one row per case.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from adapters.prometheus import presets
from adapters.prometheus.client import PrometheusClientSettings, PrometheusSource
from adapters.prometheus.promql import SignalQuery
from tests.prometheus_fixture import BackfillSeries, PrometheusServer, binaries_or_skip, write_blocks

STEP = timedelta(minutes=5)


def backfill(pods: int, pools: int, days: int, end: pd.Timestamp) -> list[BackfillSeries]:
    times = np.arange(int(end.timestamp()) - 60 * (days * 1440 - 1), int(end.timestamp()) + 1, 60)
    wave = 1 + np.round(np.sin(2 * np.pi * (times % 86400) / 86400) + 1)  # 1 to 3 GPUs a day

    def series(family: str, labels: dict[str, str], values: np.ndarray) -> BackfillSeries:
        return BackfillSeries(family, labels, times, [f"{value:g}" for value in values])

    out = [series("up", {"job": "kube-state-metrics", "instance": "ksm:8080"}, np.ones(len(times)))]
    for pool in range(pools):
        labels = {"node": f"node-{pool}", "label_karpenter_sh_nodepool": f"pool-{pool}"}
        out.append(series("kube_node_labels", labels, np.ones(len(times))))
    for pod in range(pods):
        # Each pod in a namespace of its own, so that the first N pods are selected by namespace.
        identity = {"namespace": f"team-{pod:04d}", "pod": f"train-{pod}", "node": f"node-{pod % pools}"}
        gpus = np.roll(wave, pod * 37)
        request = identity | {"container": "main", "resource": "nvidia_com_gpu", "unit": "integer"}
        out.append(series("kube_pod_container_resource_requests", request, gpus))
        phase = {"namespace": identity["namespace"], "pod": identity["pod"], "phase": "Running"}
        out.append(series("kube_pod_status_phase", phase, np.ones(len(times))))
        out.append(series(presets.RECORDED_GPUS_REQUESTED, identity, gpus))
    return out


async def timed(url: str, query: SignalQuery, start: pd.Timestamp, end: pd.Timestamp, repeat: int) -> float:
    async with PrometheusSource(PrometheusClientSettings(url=url, timeout_s=600.0)) as prometheus:
        seconds = []
        for _ in range(repeat):
            began = time.perf_counter()
            await prometheus.backfill(query, start.to_pydatetime(), end.to_pydatetime())
            seconds.append(time.perf_counter() - began)
    return statistics.median(seconds)


def one_cluster(pods: int, day_counts: list[int], pools: int, repeat: int) -> None:
    end = pd.Timestamp.now(tz="UTC").floor("min")
    binary, promtool = binaries_or_skip()
    with tempfile.TemporaryDirectory(prefix="bench-query-cost-") as work:
        began = time.perf_counter()
        blocks = write_blocks(backfill(pods, pools, max(day_counts), end), promtool, Path(work))
        backfilled_s = time.perf_counter() - began
        server = PrometheusServer(binary=binary, data_dir=blocks, trace=None, probe_at=end)
        server.start()
        try:
            for days in day_counts:
                start = end - pd.Timedelta(days=days)
                raw, recorded = (presets.gpus_requested(step=STEP, recorded=choice) for choice in (False, True))
                raw_s = asyncio.run(timed(server.url, replace(raw, liveness=None), start, end, repeat))
                recorded_s = asyncio.run(timed(server.url, replace(recorded, liveness=None), start, end, repeat))
                print(f"{pods} | {days} | {raw_s:.2f} | {recorded_s:.2f} | {raw_s / recorded_s:.1f}x", flush=True)
        finally:
            server.stop()
    print(f"({pods} pods: backfilled in {backfilled_s:.0f} s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", default="100,200,400")
    parser.add_argument("--days", default="1,2,4")
    parser.add_argument("--pools", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("pods | days | raw s | recorded s | raw / recorded")
    for pods in (int(text) for text in args.pods.split(",")):
        one_cluster(pods, [int(text) for text in args.days.split(",")], args.pools, args.repeat)


if __name__ == "__main__":
    main()
