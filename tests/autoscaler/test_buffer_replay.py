"""Replicas track the served headroom: a real Refresher on the Helios Earth trace (replayed), its
snapshots handed to the writer, the fake API's buffer checked after every refresh."""

from __future__ import annotations

import itertools
import math
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from adapters.traces.replay import ReplaySource, read_trace
from adapters.types import Signal
from autoscaler.refresh import demo
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import ForecastPools
from autoscaler.serving.provider import MetricInfo, SnapshotProvider, empty_snapshot
from autoscaler.targets.plans import MetricPlan, RefreshInputs, RefreshSettings
from tests import fakekube
from tests.autoscaler.buffer_helpers import PLURAL, buffer_settings, running_writer, show, writes
from tests.eventually import eventually

fake_kube = fakekube.fake_kube
kube_api = fakekube.kube_api

METRICS = (MetricInfo("gpu_headroom", "headroom"),)
PLANS = (MetricPlan("gpu_headroom", "gpus", "headroom", 0.9),)
POOL = {"pool": "earth", "namespace": "gpu", "name": "earth-buffer", "gpus_per_chunk": 8, "labels": {"pool": "earth"}}


class Replay:
    """Helios Earth running GPUs replayed up to the test's clock (the refresher's ``now``)."""

    name = "gpus"

    def __init__(self) -> None:
        trace = read_trace(demo._trace("helios_earth_running_gpus_5m.csv.gz"))
        self.replay = ReplaySource("gpus", trace, {"pool": "earth"}, anchor=trace.index[0].to_pydatetime())

    async def pull(self, now: datetime) -> list[Signal]:
        return [self.replay.history(now, timedelta(days=3))]


@pytest.mark.looptime
async def test_replicas_track_the_served_headroom_refresh_after_refresh(fake_kube, kube_api):
    now = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    source = Replay()
    pool = ThreadPoolExecutor(max_workers=2)
    refresher = Refresher(
        provider=SnapshotProvider(empty_snapshot(METRICS), clock=lambda: now),
        inputs=RefreshInputs(
            metrics=METRICS,
            plans=PLANS,
            sources=[source],
            refresh=RefreshSettings(interval=timedelta(minutes=1), lead_time=timedelta(minutes=10)),
        ),
        pools=ForecastPools([pool]),
        clock=lambda: now,
    )
    seen: list[tuple[float, int]] = []
    try:
        # Staleness is judged on the replay's clock.
        async with running_writer(buffer_settings(pools=[POOL]), kube_api, clock=lambda: now) as writer:
            await eventually(lambda: writer.mode == "writing", message="the writer holds the Lease")
            for step in range(8):
                # Demand rises step by step, so the headroom (demand minus requested now) moves too.
                source.replay.values = source.replay.values * (1.0 + 0.15 * (step % 4))
                snapshot = await refresher.refresh_once()
                (served,) = snapshot.series["gpu_headroom"]
                await show(writer, snapshot)
                stored = fake_kube.get(PLURAL, "earth-buffer", "gpu")
                assert stored["spec"]["replicas"] == math.ceil(round(served.value / 8, 6)), served.value
                seen.append((served.value, stored["spec"]["replicas"]))
                now += timedelta(minutes=5)
    finally:
        pool.shutdown()
    distinct = sorted({replicas for _, replicas in seen})
    assert len(distinct) >= 3, seen  # the test would prove nothing on a flat headroom
    changes = sum(1 for (_, a), (_, b) in itertools.pairwise(seen) if a != b)
    assert writes(fake_kube, "POST") + writes(fake_kube, "PATCH") == 1 + changes  # one write per change
