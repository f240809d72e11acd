"""A target's replay runs the pool its NodeClaims taught, live (issue #36, item 2): NodeClaims in the
fake Kubernetes API (validated against the vendored Karpenter CRDs), demand in a real Prometheus,
the service's own pipeline and refresher, its clock moved through the scenario.

Pool ``a100`` runs 40 GPUs and rises by 16 for an hour twice a day. Its NodeClaims launch in 9
minutes, against a configured lead time of 5: replayed on 9 minutes, the rises leave 20 minutes a
day short without a buffer (over the 1 % target), on 5 minutes 12 (within it). So the service
serves more headroom than in the same scenario whose NodeClaims launch in 5 minutes.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pandas as pd
import pytest

from autoscaler.config.settings import Settings
from autoscaler.refresh.pipeline import open_pipeline
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import ForecastPools
from autoscaler.selectors import parse_selector
from autoscaler.serving.provider import SnapshotProvider, empty_snapshot
from autoscaler.simulation.replay import replay_levels
from autoscaler.targets.plans import RefreshInputs
from autoscaler.targets.service_levels import ReplayRequest
from tests.autoscaler.live_cluster import DAY, HOUR, MINUTE, Clock
from tests.autoscaler.test_launch_outcomes import become_ready
from tests.cluster_scenario import Node, Pod, Scenario, start_prometheus
from tests.eventually import eventually
from tests.prometheus_fixture import PrometheusServer

pytestmark = pytest.mark.prometheus
INTERVAL = 30 * MINUTE  # the refresh interval: the replay's step


def rising_pool(start: pd.Timestamp, end: pd.Timestamp) -> Scenario:
    """a100: five 8-GPU pods throughout, two more for an hour at 09:00 and 21:00."""
    nodes = [Node(f"a100-{index}", "a100") for index in range(7)]
    pods = [Pod("inference", f"serve-{index}", f"a100-{index}", start, end, gpus=8) for index in range(5)]
    rise = start.normalize() + 9 * HOUR
    while rise < end:
        for index in (5, 6):
            pods.append(Pod("training", f"rise-{rise:%d%H}-{index}", f"a100-{index}", rise, rise + HOUR, gpus=8))
        rise += 12 * HOUR
    return Scenario(start, end, nodes, pods)


@dataclass(frozen=True)
class RisingCluster:
    server: PrometheusServer
    start: pd.Timestamp  # the first refresh


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RisingCluster]:
    # Everything in the past: the refresher's clock is moved through it, Prometheus answers at once.
    end = pd.Timestamp.now(tz="UTC").floor("h") - HOUR
    start = end - 2 * DAY - 6 * HOUR
    server = start_prometheus(rising_pool(start, end), tmp_path_factory.mktemp("rising-pool"))
    try:
        yield RisingCluster(server, start + 3 * HOUR)
    finally:
        server.stop()


def settings(url: str) -> Settings:
    return Settings.model_validate(
        {
            "server": {"bind_address": "127.0.0.1"},
            "auth": {"mode": "none"},
            "prometheus": {"url": url, "timeout": "30s", "retries": 1, "backoff_initial": "50ms"},
            "signals": [{"name": "gpus_requested", "preset": "gpus_requested", "by": ["nodepool"], "step": "5m"}],
            "metrics": {
                "gpu_headroom": {
                    "signal": "gpus_requested",
                    "kind": "headroom",
                    "fallback": "hold",
                    "target": {"minutes_short": "1%", "gpus_per_node": 8},
                }
            },
            "forecast": {"lookback": "1d", "interval": "30m", "default_lead_time": "5m", "reselect_every": "1d"},
            "inputs": {"cronjobs": False, "nodepools": False, "pending_pods": False, "nodeclaims": True},
        }
    )


@dataclass
class Served:
    headroom: float
    reason: str
    request: ReplayRequest


@contextlib.asynccontextmanager
async def service(url: str, kube_api: Any, learned: int) -> AsyncIterator[tuple[Refresher, Clock, list[ReplayRequest]]]:
    """The pipeline on the fake API and Prometheus (once it learned ``learned`` launches), a
    refresher whose replays are kept."""
    clock, requests = Clock(), []

    def replay(request: ReplayRequest) -> Any:
        requests.append(request)
        return replay_levels(request)

    async with open_pipeline(settings(url), kube_api) as pipeline:
        history = pipeline.lead_times
        assert history is not None
        await eventually(lambda: len(history.samples("a100")) == learned, message=f"{learned} launches learned")
        with ThreadPoolExecutor(max_workers=2) as pool:
            inputs = RefreshInputs(
                metrics=pipeline.metrics, plans=pipeline.plans, sources=pipeline.sources, refresh=pipeline.refresh,
                lead_time=pipeline.lead_time, replay=replay, learned_launches=pipeline.learned_launches,
            )  # fmt: skip
            provider = SnapshotProvider(empty_snapshot(pipeline.metrics), clock=clock)
            refresher = Refresher(provider=provider, inputs=inputs, pools=ForecastPools([pool]), clock=clock)
            yield refresher, clock, requests


async def served_after_the_first_choice(cluster: RisingCluster, kube_api: Any, learned: int = 4) -> Served:
    async with service(cluster.server.url, kube_api, learned) as (refresher, clock, requests):
        moment = cluster.start
        while not requests:
            clock.now = moment
            await refresher.refresh_once()
            moment += INTERVAL
        clock.now = moment
        await refresher.refresh_once()  # the choice served
        (series,) = refresher.provider.get_metric("default", "gpu_headroom", parse_selector("nodepool=a100"))
        (tuner,) = refresher.levels._tuners.values()
        return Served(series.value, tuner.reason, requests[0])


def launches(fake_kube: Any, prefix: str, minutes: float, before: pd.Timestamp) -> None:
    """Four NodeClaims of a100, each Ready ``minutes`` after its creation, a day before ``before``."""
    for index in range(4):
        created = (before - DAY + index * HOUR).to_pydatetime()
        become_ready(fake_kube, f"{prefix}-{index}", "a100", created, created + timedelta(minutes=minutes))


def consolidated(fake_kube: Any, prefix: str) -> None:
    for index in range(4):
        fake_kube.delete("nodeclaims", f"{prefix}-{index}")


async def test_nodeclaims_that_launch_in_9_minutes_are_replayed_and_raise_the_headroom(
    cluster: RisingCluster, fake_kube: Any, kube_api: Any
) -> None:
    launches(fake_kube, "nine", 9, cluster.start)
    at_nine = await served_after_the_first_choice(cluster, kube_api)
    consolidated(fake_kube, "nine")
    launches(fake_kube, "five", 5, cluster.start)
    at_five = await served_after_the_first_choice(cluster, kube_api)
    consolidated(fake_kube, "five")
    configured = await served_after_the_first_choice(cluster, kube_api, learned=0)
    # The replay draws the 9 minutes measured, not the lead time served (p90 plus the 90 s margin).
    learned = at_nine.request.launches
    assert learned is not None and (learned.lead_times_s, learned.failure_rate) == ((540.0,) * 4, 0.0)
    assert at_nine.request.lead_time_s == 630.0
    assert at_nine.reason.endswith(
        "; replayed with the pool's 4 learned launches: lead time p50 9m, p95 9m, 0 % failed"
    )
    assert at_five.reason.endswith(
        "; replayed with the pool's 4 learned launches: lead time p50 5m, p95 5m, 0 % failed"
    )
    assert configured.request.launches is None and configured.request.lead_time_s == 300.0
    assert configured.reason.endswith(
        "; replayed with a fixed lead time of 5m (the lead time served: no launch learned yet)"
    )
    # A day of record at the 30-minute interval; two rises: 20 minutes short at 9 minutes (1.4 %),
    # 12 at 5 (0.83 %, within 1 %). A ninth GPU of buffer makes a seventh node, which holds a rise.
    assert len(at_nine.request.requested) == 49
    assert "a buffer of 9 GPUs plus the windows due met the level asked" in at_nine.reason
    assert "a buffer of 0 GPUs plus the windows due met the level asked" in at_five.reason
    assert "with 0.83 % of minutes short" in at_five.reason
    assert (at_nine.headroom, at_five.headroom, configured.headroom) == (9.0, 0.0, 0.0)
