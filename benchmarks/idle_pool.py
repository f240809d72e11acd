"""Idle GPU-hours after a pool's last job ends: the service replayed on a real Prometheus, its served
``gpu_headroom`` driving the simulator's placeholder HPA and Karpenter-like node pool.

    PYTHONPATH=. .venv/bin/python benchmarks/idle_pool.py
    git archive dba5e2f | tar -x -C /tmp/before && git archive 015dfbb | tar -x -C /tmp/bench
    cd /tmp/bench && PYTHONPATH=/tmp/before python benchmarks/idle_pool.py

The last two lines measure the same scenario with the service as it was before issue #15 (``PYTHONPATH``
chooses the service's code; the scenario helpers always come from the script's tree). They run the
script as first committed, since this one imports modules that dba5e2f does not have. The scenario
(``tests.cluster_scenario``): pool ``a100`` trains every night for about three hours, two or three
8-GPU pods whose starts and ends are staggered (a Karpenter node per pod, from 5 minutes before it
to 10 minutes after it); kube-state-metrics reports throughout. The service (Prometheus only,
``gpus_requested`` by nodepool at 5-minute steps, 7 days of history, 5-minute lead time) refreshes
every minute from 4 hours before the last job ends to 6 hours after it. The simulator's HPA
(``AverageValue`` 1, scale-to-zero as with ``HPAScaleToZero``, default behaviour) scales placeholders
on the served headroom; its node pool (8 GPUs a node, 5-minute launches, ``consolidateAfter`` 10
minutes) holds the real pods and the placeholders. Printed: the idle GPU-hours (provisioned minus
used) from the last job's end on, and when the pool had no node left (goal: within
``consolidateAfter`` plus one lead time).
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def _tests_of_this_tree() -> None:
    """Import ``tests`` from this tree even when PYTHONPATH points the service's code elsewhere."""
    spec = importlib.util.spec_from_file_location(
        "tests", ROOT / "tests" / "__init__.py", submodule_search_locations=[str(ROOT / "tests")]
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["tests"] = module
    spec.loader.exec_module(module)


_tests_of_this_tree()

import autoscaler  # noqa: E402 - after the tests package is pinned to this tree
from autoscaler.config.settings import Settings  # noqa: E402
from autoscaler.refresh.pipeline import open_pipeline  # noqa: E402
from autoscaler.refresh.refresher import Refresher  # noqa: E402
from autoscaler.refresh.workers import ForecastPools  # noqa: E402
from autoscaler.selectors import parse_selector  # noqa: E402
from autoscaler.serving.provider import ProviderError, SnapshotProvider, empty_snapshot  # noqa: E402
from autoscaler.simulation.actuation import Actuation  # noqa: E402
from autoscaler.simulation.engine import Period, run_policy  # noqa: E402
from autoscaler.simulation.hpa import HPASpec  # noqa: E402
from autoscaler.simulation.inputs import Pods, make_workload  # noqa: E402
from autoscaler.simulation.lead_times import LeadTimeDistribution  # noqa: E402
from autoscaler.simulation.provisioner import PoolConfig  # noqa: E402
from autoscaler.targets.plans import RefreshInputs  # noqa: E402
from tests.cluster_scenario import Node, Pod, Scenario, start_prometheus  # noqa: E402

if TYPE_CHECKING:
    from autoscaler.targets.plans import WindowsFunction

MINUTE, HOUR, DAY = pd.Timedelta(minutes=1), pd.Timedelta(hours=1), pd.Timedelta(days=1)
NIGHTS = 8
BEFORE, AFTER = 4 * HOUR, 6 * HOUR  # the replay, around the end of the last job
LEAD_TIME_S, CONSOLIDATE_AFTER_S, GPUS_PER_NODE = 300.0, 600.0, 8


def nightly_pool(last_end: pd.Timestamp) -> tuple[list[Node], list[Pod]]:
    """Nights of two or three 8-GPU pods, staggered by 15 minutes; the last one ends at ``last_end``."""
    nodes, pods = [], []
    for night in range(NIGHTS):
        count = 3 if night % 3 != 1 else 2
        window_end = last_end - night * DAY
        for i in range(count):
            start = window_end - 3 * HOUR + 15 * i * MINUTE
            end = window_end - 10 * (count - 1 - i) * MINUTE
            name = f"a100-{night}-{i}"
            nodes.append(Node(name, "a100", start=start - 5 * MINUTE, end=end + 10 * MINUTE))
            pods.append(Pod("training", f"train-{night}-{i}", name, start, end, gpus=8, deleted=end + 5 * MINUTE))
    return nodes, pods


def settings(url: str, lead_time: str = "5m") -> Settings:
    # Only fields both versions of the service know.
    return Settings.model_validate(
        {
            "prometheus": {"url": url, "timeout": "60s"},
            "signals": [{"name": "gpus_requested", "preset": "gpus_requested", "by": ["nodepool"], "step": "5m"}],
            "metrics": {
                "gpu_demand_forecast": {"signal": "gpus_requested", "kind": "demand"},
                "gpu_headroom": {"signal": "gpus_requested", "kind": "headroom"},
            },
            "forecast": {"lookback": "7d", "interval": "1m", "default_lead_time": lead_time, "reselect_every": "1d"},
        }
    )


async def served_headroom(
    url: str, moments: pd.DatetimeIndex, windows: WindowsFunction | None = None, lead_time: str = "5m"
) -> tuple[np.ndarray, str]:
    """gpu_headroom{nodepool=a100} as the API serves it at each moment (NaN: unreadable), and what
    demand and headroom are at the last one; ``windows``: the scheduled windows the refresher knows."""
    now = {"moment": moments[0]}

    def clock() -> datetime:
        return now["moment"].to_pydatetime()

    values = np.full(len(moments), np.nan)
    async with open_pipeline(settings(url, lead_time), None) as pipeline:
        with ThreadPoolExecutor(max_workers=2) as pool:
            provider = SnapshotProvider(empty_snapshot(pipeline.metrics), clock=clock)
            inputs = RefreshInputs(
                metrics=pipeline.metrics,
                plans=pipeline.plans,
                sources=pipeline.sources,
                refresh=pipeline.refresh,
                windows=windows,
            )
            refresher = Refresher(provider=provider, inputs=inputs, pools=ForecastPools([pool]), clock=clock)
            for position, moment in enumerate(moments):
                now["moment"] = moment
                await refresher.refresh_once()
                values[position] = read(provider, "gpu_headroom")
            demand = read(provider, "gpu_demand_forecast")
    return values, f"demand {demand:g}, headroom {values[-1]:g} GPUs"


def read(provider: SnapshotProvider, metric: str) -> float:
    try:
        (series,) = provider.get_metric("default", metric, parse_selector("nodepool=a100"))
    except ProviderError:
        return math.nan
    return series.value


def simulate(
    scenario: Scenario, origin: pd.Timestamp, headroom: np.ndarray, last_end: pd.Timestamp
) -> dict[str, float | str]:
    """Idle GPU-hours from ``last_end`` on, and when the pool had no node left after it."""
    pods = [pod for pod in scenario.pods if pod.start >= origin]
    arrival = np.array([(pod.start - origin).total_seconds() for pod in pods])
    duration = np.array([(pod.end - pod.start).total_seconds() for pod in pods])
    gpus = np.array([int(pod.gpus) for pod in pods], dtype=np.int64)
    real = Pods(arrival, duration, gpus, np.zeros(len(pods), dtype=bool))
    workload = make_workload("idle-pool", origin, 60.0, np.zeros(len(headroom)), real, ())
    pool = PoolConfig(GPUS_PER_NODE, LeadTimeDistribution("fixed", LEAD_TIME_S), CONSOLIDATE_AFTER_S)
    scored_from = (last_end - origin).total_seconds()
    period = Period(start=0.0, scored_from=scored_from, end=len(headroom) * 60.0)
    outcome = run_policy(workload, headroom, period, pool, Actuation(hpa=HPASpec(min_replicas=0)))
    idle_hours = (outcome.totals.provisioned - outcome.totals.used) / 3600
    after = outcome.capacity_times >= scored_from
    empty = np.flatnonzero(after & (outcome.capacity_values == 0))
    still = outcome.capacity_values[-1]
    released = "never" if still else f"{(outcome.capacity_times[empty[0]] - scored_from) / 60:.0f} min"
    return {"idle GPU-hours": round(idle_hours, 1), "pool empty after": released, "GPUs at the end": int(still)}


def main() -> None:
    last_end = pd.Timestamp.now(tz="UTC").floor("h") - 12 * HOUR
    nodes, pods = nightly_pool(last_end)
    start = last_end - NIGHTS * DAY
    scenario = Scenario(start, last_end + AFTER, nodes, pods)
    moments = pd.date_range(last_end - BEFORE, last_end + AFTER, freq=MINUTE, inclusive="left")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        server = start_prometheus(scenario, Path(work))
        try:
            headroom, at_end = asyncio.run(served_headroom(server.url, moments))
        finally:
            server.stop()
    figures = simulate(scenario, moments[0], headroom, last_end)
    print(f"service code: {Path(autoscaler.__file__).parent}")
    print(f"served {AFTER.total_seconds() / 3600:g} h after the last job ended: {at_end}")
    print(f"after the last job ended ({AFTER.total_seconds() / 3600:g} h scored): {figures}")
    goal = (CONSOLIDATE_AFTER_S + LEAD_TIME_S) / 60
    print(f"goal: pool empty within consolidateAfter + lead time = {goal:g} min")
    print(f"wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
