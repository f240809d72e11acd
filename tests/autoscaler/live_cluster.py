"""The cluster the live-demand tests run on (``tests.cluster_scenario`` in a real Prometheus), and a
refresher on it whose clock the test moves (the whole scenario lies in the past, so Prometheus answers
for any moment of it at once).

Pools: ``a100`` trains every night for 3 hours (two 8-GPU pods; Karpenter-like nodes that come before
the window and go 15 minutes after it); ``h100`` serves steadily (4 GPUs) beside two placeholder pods;
``v100`` ran two 8-GPU pods for four days and has been empty for the last three hours before ``repro``,
its nodes still there (the issue's reproduction); ``mig`` runs MIG and time-sliced pods; ``t4`` had a
node and a pod in the first hours only. kube-state-metrics stops at ``ksm_down``, dcgm-exporter at
``dcgm_down``, and Prometheus keeps answering to the end.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from autoscaler.config.settings import Settings
from autoscaler.refresh.pipeline import Pipeline, open_pipeline
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import ForecastPools
from autoscaler.selectors import parse_selector
from autoscaler.serving.provider import ServedSeries, Snapshot, SnapshotProvider, empty_snapshot
from autoscaler.targets.plans import RefreshInputs
from tests.cluster_scenario import Node, Pod, Scenario, start_prometheus
from tests.prometheus_fixture import PrometheusServer

HOUR, MINUTE, DAY = pd.Timedelta(hours=1), pd.Timedelta(minutes=1), pd.Timedelta(days=1)
STEP = pd.Timedelta(minutes=5)
PLACEHOLDERS = "gpu-placeholders"
# nvidia.com/mig-1g.10gb x 7 + mig-3g.40gb x 1 + the A30's mig-2g.12gb x 2 + gpu.shared x 4 (4 replicas).
MIG_POOL_GPUS = 1 + 3 / 7 + 1 + 1
GPUS_REQUESTED = {"by": ["nodepool"], "step": "5m", "exclude_namespaces": [PLACEHOLDERS]}


@dataclass(frozen=True)
class LiveCluster:
    scenario: Scenario
    server: PrometheusServer
    last_window_end: pd.Timestamp  # a100's last training window ends here
    repro: pd.Timestamp  # v100 has been empty for 3 hours
    ksm_down: pd.Timestamp
    dcgm_down: pd.Timestamp
    t4_gone: pd.Timestamp  # t4's node is removed


def nightly(end: pd.Timestamp, nights: int, gpus_per_pod: float = 8) -> tuple[list[Node], list[Pod]]:
    """Pool a100: a 3-hour window ending at ``end`` and at the same time on each night before."""
    nodes, pods = [], []
    for night in range(nights):
        window_end = end - night * DAY
        window_start = window_end - 3 * HOUR
        for i in range(2):
            name = f"a100-{night}-{i}"
            nodes.append(Node(name, "a100", start=window_start - 10 * MINUTE, end=window_end + 15 * MINUTE))
            pods.append(
                Pod(
                    "training",
                    f"train-{night}-{i}",
                    name,
                    window_start,
                    window_end,
                    gpus_per_pod,
                    deleted=window_end + STEP,
                )
            )
    return nodes, pods


def live_scenario(last_window_end: pd.Timestamp) -> tuple[Scenario, dict[str, pd.Timestamp]]:
    end = last_window_end + 3 * HOUR + 30 * MINUTE
    start = last_window_end - 5 * DAY - 3 * HOUR
    moments = {
        "repro": last_window_end + HOUR + 45 * MINUTE,
        "ksm_down": last_window_end + 2 * HOUR,
        "dcgm_down": last_window_end + 2 * HOUR + 30 * MINUTE,
        "t4_gone": start + 6 * HOUR,
    }
    nodes, pods = nightly(last_window_end, nights=5)
    nodes += [Node("h100-1", "h100", model="NVIDIA H100 80GB HBM3"), Node("v100-0", "v100"), Node("v100-1", "v100")]
    pods.append(Pod("inference", "serve-0", "h100-1", start, end, gpus=4))
    pods += [Pod(PLACEHOLDERS, f"gpu-placeholder-{i}", "h100-1", start, end) for i in range(2)]
    emptied = moments["repro"] - 3 * HOUR
    pods += [Pod("research", f"long-{i}", f"v100-{i}", start, emptied, gpus=8) for i in range(2)]
    nodes += [Node("mig-1", "mig"), Node("a30-1", "mig", gpus=1, model="NVIDIA A30")]
    pods += [
        Pod("research", "mig-small", "mig-1", start, end, gpus=7, resource="nvidia.com/mig-1g.10gb"),
        Pod("research", "mig-large", "mig-1", start, end, gpus=1, resource="nvidia.com/mig-3g.40gb"),
        Pod("research", "mig-a30", "a30-1", start, end, gpus=2, resource="nvidia.com/mig-2g.12gb"),
        Pod("research", "shared", "mig-1", start, end, gpus=4, resource="nvidia.com/gpu.shared"),
    ]
    nodes.append(Node("t4-1", "t4", gpus=1, model="Tesla T4", end=moments["t4_gone"]))
    pods.append(Pod("batch", "t4-job", "t4-1", start + HOUR, start + 3 * HOUR))
    outages = {"ksm_down": ((moments["ksm_down"], end),), "dcgm_down": ((moments["dcgm_down"], end),)}
    return Scenario(start, end, nodes, pods, **outages), moments


@contextlib.contextmanager
def live_cluster(work_dir: Path) -> Iterator[LiveCluster]:
    # Everything in the past: the refresher's clock is moved through it, Prometheus answers at once.
    last_window_end = pd.Timestamp.now(tz="UTC").floor("h") - 6 * HOUR
    scenario, moments = live_scenario(last_window_end)
    server = start_prometheus(scenario, work_dir)
    try:
        yield LiveCluster(scenario, server, last_window_end, **moments)
    finally:
        server.stop()


def service_settings(url: str, *, lookback: str = "4d", **signal: Any) -> Settings:
    """Prometheus only (no Kubernetes inputs): GPUs requested per pool (placeholders left out), demand
    and headroom; ``signal`` replaces fields of the signal."""
    return Settings.model_validate(
        {
            "server": {"bind_address": "127.0.0.1"},
            "auth": {"mode": "none"},
            "prometheus": {"url": url, "timeout": "30s", "retries": 1, "backoff_initial": "50ms"},
            "signals": [{"name": "gpus_requested", "preset": "gpus_requested", **GPUS_REQUESTED, **signal}],
            "metrics": {
                "gpu_demand_forecast": {"signal": "gpus_requested", "kind": "demand", "fallback": "error"},
                "gpu_headroom": {"signal": "gpus_requested", "kind": "headroom", "fallback": "hold"},
            },
            "forecast": {"lookback": lookback, "interval": "1m", "default_lead_time": "10m", "reselect_every": "1d"},
        }
    )


class Clock:
    def __init__(self) -> None:
        self.now = pd.Timestamp(0, tz="UTC")

    def __call__(self) -> datetime:
        return self.now.to_pydatetime()


@dataclass
class Service:
    """The refresher and what it serves, at the clock's moment."""

    refresher: Refresher
    provider: SnapshotProvider
    pipeline: Pipeline
    clock: Clock

    async def at(self, moment: pd.Timestamp | datetime) -> Snapshot:
        self.clock.now = pd.Timestamp(moment)
        return await self.refresher.refresh_once()

    def served(self, metric: str, pool: str) -> ServedSeries:
        """As the external metrics API serves it now (staleness applied); raises its errors."""
        (series,) = self.provider.get_metric("default", metric, parse_selector(f"nodepool={pool}"))
        return series


@contextlib.asynccontextmanager
async def running_service(settings: Settings) -> AsyncIterator[Service]:
    clock = Clock()
    async with open_pipeline(settings, None) as pipeline:
        with ThreadPoolExecutor(max_workers=2) as pool:
            provider = SnapshotProvider(empty_snapshot(pipeline.metrics), clock=clock)
            inputs = RefreshInputs(
                metrics=pipeline.metrics, plans=pipeline.plans, sources=pipeline.sources, refresh=pipeline.refresh
            )
            refresher = Refresher(provider=provider, inputs=inputs, pools=ForecastPools([pool]), clock=clock)
            yield Service(refresher, provider, pipeline, clock)
