"""The demo's replayed pool: the headroom it is served decides what the live scorecard finds in it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd

from adapters.traces.replay import ReplaySource
from autoscaler.refresh.demo_cluster import DemoCluster
from autoscaler.scorecard.live import LiveScorecard
from autoscaler.serving.provider import ServedSeries, Snapshot
from autoscaler.simulation.replay import replay_ledgers

START = datetime(2026, 12, 1, tzinfo=UTC)
RISE = START + timedelta(hours=3)


def demand_source() -> ReplaySource:
    """40 GPUs, then 80 from ``RISE`` on: a surge a 10-minute launch cannot follow without headroom."""
    index = pd.date_range(START - timedelta(days=1), periods=12 * 24 * 2, freq="5min", tz="UTC")
    values = np.where(index >= pd.Timestamp(RISE), 80.0, 40.0)
    return ReplaySource("gpus_requested", pd.Series(values, index=index), {"nodepool": "a100"}, anchor=index[0])


def snapshot(at: datetime, headroom: float, pool: str = "a100") -> Snapshot:
    series = ServedSeries("gpu_headroom", {"nodepool": pool}, headroom, at)
    return Snapshot(at, {}, {"gpu_headroom": (series,)})


async def run(headroom: float, minutes: int) -> tuple[LiveScorecard, list[tuple[float, float, float]]]:
    """The pool served ``headroom`` from two hours before the rise, scored each minute."""
    cluster = DemoCluster(demand_source(), "gpu_headroom", "a100", timedelta(minutes=10), replay_ledgers)
    scorecard = LiveScorecard(headroom_metrics=["gpu_headroom"], short_gpus=cluster.short_gpus, capacity=cluster)
    samples = []
    for minute in range(minutes):
        at = RISE - timedelta(hours=2) + timedelta(minutes=minute)
        cluster.observe(snapshot(at, headroom))
        await scorecard.collect(at)
        held, used = await cluster.read(at)
        samples.append((cluster.short_gpus()["a100"], held["a100"], used["a100"]))
    return scorecard, samples


async def test_without_headroom_the_surge_waits_for_nodes_and_the_scorecard_counts_it():
    scorecard, samples = await run(headroom=0.0, minutes=150)
    before, after = samples[:120], samples[120:]
    # Before the surge the pool holds the 40 GPUs used, on whole 8-GPU nodes, and nothing waits.
    assert all(short == 0.0 and held == 40.0 and used == 40.0 for short, held, used in before[5:])
    # The surge's 40 GPUs wait for the launch: short, then served once the nodes are Ready.
    shorts = [short for short, _, _ in after]
    assert shorts[1] == 40.0 and shorts[-1] == 0.0
    short_minutes = sum(1 for short in shorts if short > 0)
    assert 9 <= short_minutes <= 11, shorts
    figures = scorecard.figures(RISE + timedelta(minutes=30))["a100"]["1h"]
    assert figures["minutes_short"] == short_minutes
    assert figures["short_gpu_minutes"] >= 40.0 * (short_minutes - 1)


async def test_headroom_served_ahead_of_the_surge_holds_idle_gpus_and_no_minute_is_short():
    scorecard, samples = await run(headroom=40.0, minutes=150)
    assert all(short == 0.0 for short, _, _ in samples[20:])
    # Placeholders hold 40 GPUs beside the 40 used before the surge; after it the same nodes run it.
    assert samples[100][1:] == (80.0, 40.0)
    assert samples[140][1:] == (80.0 + 40.0, 80.0)
    figures = scorecard.figures(RISE + timedelta(minutes=30))["a100"]["1h"]
    assert figures["minutes_short"] == 0 and figures["idle_gpu_hours"] > 0


async def test_nothing_is_sampled_before_a_value_is_served_for_the_pool():
    cluster = DemoCluster(demand_source(), "gpu_headroom", "a100", timedelta(minutes=10), replay_ledgers)
    cluster.observe(snapshot(RISE, 8.0, pool="another"))
    assert cluster.short_gpus() == {}
    assert await cluster.read(RISE) == ({}, {})
