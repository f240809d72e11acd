"""The refresher with its real process pool: killed workers, fits past their deadline, long queues."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from dataclasses import replace
from datetime import timedelta

import pandas as pd
import pytest

from adapters.types import Signal
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import FitTimeout, ForecastPools, deadline, forecast_pool, forecast_pools
from autoscaler.serving.provider import SnapshotProvider, empty_snapshot
from autoscaler.targets.plans import RefreshInputs, RefreshSettings
from tests.autoscaler.test_refresher import METRICS, PLANS, Clock, FlakySource


class ManyPools(FlakySource):
    """The same real trace as ``count`` node pools (each slice a day apart)."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count

    async def pull(self, now):
        signals = []
        for number in range(self.count):
            signal_ = self.replay.history(now - timedelta(days=number), timedelta(days=3))
            signals.append(Signal("gpus", {"pool": f"p{number}"}, signal_.series, signal_.step))
        return signals


def _worker_pids(pool) -> list[int]:
    return list(pool._processes or {})


@pytest.fixture
def make_refresher():
    made = []

    def make(source, settings: RefreshSettings, workers: int = 1) -> Refresher:
        clock = Clock()
        provider = SnapshotProvider(empty_snapshot(METRICS), clock=clock)
        instance = Refresher(
            provider=provider,
            inputs=RefreshInputs(
                metrics=METRICS,
                plans=PLANS,
                sources=[source],
                refresh=settings,
            ),
            pools=ForecastPools(forecast_pools(workers), new_pool=lambda: forecast_pool(1)),
            clock=clock,
        )
        made.append(instance)
        return instance

    yield make
    for instance in made:
        instance.pools.shutdown()


SETTINGS = RefreshSettings(interval=timedelta(minutes=1), lead_time=timedelta(minutes=10))


async def test_a_killed_worker_costs_one_refresh_and_the_pool_is_replaced(make_refresher):
    instance = make_refresher(FlakySource(), SETTINGS)
    first = await instance.refresh_once()
    served = first.series["gpu_demand_forecast"][0]
    old_pool = instance.pools.pools[0]
    for pid in _worker_pids(old_pool):
        os.kill(pid, signal.SIGKILL)  # what the OOM killer does
    await asyncio.sleep(0.5)

    instance.clock.now += timedelta(minutes=1)
    second = await instance.refresh_once()
    assert "BrokenProcessPool" in instance.stats.last_error["gpus"]
    assert second.series["gpu_demand_forecast"][0].value == served.value  # last good value kept
    assert instance.pools.pools[0] is not old_pool

    instance.clock.now += timedelta(minutes=1)
    third = await instance.refresh_once()
    assert "gpus" not in instance.stats.last_error
    assert instance.stats.last_success["gpus"] == instance.clock.now
    # Stamped with the newest point of the 5-minute trace, not the refresh time.
    assert third.series["gpu_demand_forecast"][0].timestamp == pd.Timestamp(instance.clock.now).floor("5min")
    # The new worker holds no fitted models: it refitted the selected one instead of forecasting from
    # none (and instead of a whole selection again).
    assert third.series["gpu_demand_forecast"][0].provenance.work == "refit"
    assert third.series["gpu_demand_forecast"][0].provenance.model == served.provenance.model


async def test_a_fit_past_its_deadline_stops_in_the_worker_which_stays(make_refresher):
    instance = make_refresher(FlakySource(), SETTINGS)
    first = await instance.refresh_once()
    pool, pids = instance.pools.pools[0], _worker_pids(instance.pools.pools[0])

    instance.settings = replace(SETTINGS, fit_timeout=timedelta(milliseconds=20))
    instance.schedule.selected.clear()  # a full selection: far longer than 20 ms
    instance.clock.now += timedelta(minutes=1)
    second = await instance.refresh_once()
    assert "FitTimeout: the fit took longer than 0.02 s" in instance.stats.last_error["gpus"]
    assert second.series["gpu_demand_forecast"][0].value == first.series["gpu_demand_forecast"][0].value
    # The worker interrupted itself: same pool, same process, ready for the next fit.
    assert instance.pools.pools[0] is pool
    assert _worker_pids(pool) == pids

    instance.settings = SETTINGS
    instance.clock.now += timedelta(minutes=1)
    await instance.refresh_once()
    assert "gpus" not in instance.stats.last_error


async def test_fit_timeout_bounds_each_fit_not_its_wait_in_the_queue(make_refresher):
    # Twelve full selections on one worker take several times the timeout in all, each far less.
    settings = replace(SETTINGS, fit_timeout=timedelta(seconds=6))
    instance = make_refresher(ManyPools(12), settings)
    await instance.refresh_once()
    assert instance.stats.last_error == {}
    snapshot = instance.provider.snapshot
    assert len(snapshot.series["gpu_demand_forecast"]) == 12


async def test_each_series_returns_to_the_worker_that_holds_its_models(make_refresher):
    instance = make_refresher(ManyPools(6), SETTINGS, workers=2)
    first = await instance.refresh_once()
    assert {series.provenance.work for series in first.series["gpu_demand_forecast"]} == {"select"}
    instance.clock.now += timedelta(minutes=5)
    second = await instance.refresh_once()
    # Two worker processes, six series: every one was routed to the process that fitted it.
    assert [series.provenance.work for series in second.series["gpu_demand_forecast"]] == ["update"] * 6
    assert all(len(_worker_pids(pool)) == 1 for pool in instance.pools.pools)


def test_a_deadline_holds_when_the_fit_swallows_its_interrupt():
    """A library's bare ``except`` can catch the deadline's interrupt and carry on; the fit still ends
    as past its deadline when it returns (in the main thread, as a worker runs it)."""

    def swallowing_fit() -> str:
        with contextlib.suppress(BaseException):  # what such a library does
            while True:  # the deadline counts CPU time: it comes while the fit computes
                pass
        return "fitted anyway"

    with pytest.raises(FitTimeout, match=re.escape("the fit took longer than 0.01 s")), deadline(0.01):
        swallowing_fit()
    with deadline(5.0):
        within = sum(range(10))  # a fit well within its deadline raises nothing
    assert within == 45
