"""The refresher on a real trace: values appear, failures keep the last good ones, never 0 or empty."""

from __future__ import annotations

import asyncio
import contextlib
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from adapters.traces.replay import ReplaySource, read_trace
from adapters.types import AdapterError, Signal
from autoscaler import policy
from autoscaler.refresh import demo, fitting
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import ForecastPools
from autoscaler.selectors import EVERYTHING, Selector, parse_selector
from autoscaler.serving.provider import MetricInfo, ServedSeries, Snapshot, SnapshotProvider, empty_snapshot
from autoscaler.targets.plans import MetricPlan, RefreshInputs, RefreshSettings
from tests import trace_slices
from tests.eventually import eventually

METRICS = (MetricInfo("gpu_demand_forecast", "demand"), MetricInfo("gpu_headroom", "headroom"))
PLANS = (MetricPlan("gpu_demand_forecast", "gpus", "demand", 0.9), MetricPlan("gpu_headroom", "gpus", "headroom", 0.9))


class FlakySource:
    """Helios Earth running GPUs (real trace) replayed up to the test clock; can be told to fail."""

    name = "gpus"

    def __init__(self) -> None:
        trace = read_trace(demo._trace("helios_earth_running_gpus_5m.csv.gz"))
        self.replay = ReplaySource("gpus", trace, {"pool": "earth"}, anchor=trace.index[0].to_pydatetime())
        self.failure: str | None = None

    async def pull(self, now: datetime) -> list[Signal]:
        if self.failure == "error":
            raise AdapterError("prometheus unreachable")
        if self.failure == "empty":
            return []
        return [self.replay.history(now, timedelta(days=3))]


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def parts():
    clock = Clock()
    source = FlakySource()
    provider = SnapshotProvider(empty_snapshot(METRICS), clock=clock)
    pool = ThreadPoolExecutor(max_workers=2)
    settings = RefreshSettings(
        interval=timedelta(minutes=1), lead_time=timedelta(minutes=10), reselect_every=timedelta(hours=1)
    )
    instance = Refresher(
        provider=provider,
        inputs=RefreshInputs(metrics=METRICS, plans=PLANS, sources=[source], refresh=settings),
        pools=ForecastPools([pool]),
        clock=clock,
    )
    yield instance, source, provider, clock
    pool.shutdown()


async def test_first_refresh_serves_every_planned_metric(parts):
    instance, source, provider, clock = parts
    snapshot = await instance.refresh_once()
    demand = snapshot.series["gpu_demand_forecast"][0]
    headroom = snapshot.series["gpu_headroom"][0]
    history = source.replay.history(clock.now, timedelta(days=3)).series
    assert dict(demand.labels) == {"pool": "earth"}
    # The trace is hundreds of running GPUs: a p90 forecast 10 minutes out sits near the last value.
    assert 0.8 * history.iloc[-1] < demand.value < 1.3 * history.iloc[-1]
    assert headroom.value == pytest.approx(max(0.0, demand.value - history.iloc[-1]))
    assert "lead time" in demand.explanation and demand.provenance.model
    assert provider.get_metric("default", "gpu_demand_forecast", EVERYTHING)[0].value == demand.value


@pytest.mark.parametrize("failure", ["error", "empty"])
async def test_failed_pull_keeps_last_good_values(parts, failure):
    instance, source, provider, clock = parts
    first = await instance.refresh_once()
    source.failure = failure
    clock.now += timedelta(minutes=5)
    second = await instance.refresh_once()
    assert second.series == first.series  # same values, same (old) timestamps: age shows the outage
    assert instance.stats.failures["gpus"] == 1
    assert instance.stats.last_error["gpus"]
    assert second.last_error and "gpus" in second.last_error
    served = provider.get_metric("default", "gpu_demand_forecast", EVERYTHING)
    assert served[0].value == first.series["gpu_demand_forecast"][0].value > 0
    source.failure = None
    clock.now += timedelta(minutes=5)
    third = await instance.refresh_once()
    newest = source.replay.history(clock.now, timedelta(hours=1)).newest_at()
    assert third.series["gpu_demand_forecast"][0].timestamp == newest
    assert third.last_error is None


async def test_failed_fit_keeps_last_good_values(parts, monkeypatch):
    instance, _source, _provider, clock = parts
    first = await instance.refresh_once()

    def broken(*args, **kwargs):
        raise RuntimeError("worker died")

    monkeypatch.setattr(fitting, "work_in_worker", broken)
    clock.now += timedelta(minutes=5)
    second = await instance.refresh_once()
    assert second.series == first.series
    assert "forecast failed: RuntimeError: worker died" in instance.stats.last_error["gpus"]


async def test_selection_runs_on_its_cadence_only(parts, monkeypatch):
    instance, _source, _provider, clock = parts
    asked: list[tuple[str, str | None]] = []
    done: list[str] = []
    real = fitting.work_in_worker

    def recording(request):
        asked.append((request.work, request.model))
        result = real(request)
        done.append(result.work)
        return result

    monkeypatch.setattr(fitting, "work_in_worker", recording)
    first = await instance.refresh_once()
    chosen = first.series["gpu_demand_forecast"][0].provenance.model
    clock.now += timedelta(minutes=30)
    await instance.refresh_once()
    clock.now += timedelta(minutes=31)  # reselect_every is 1 h in this fixture
    await instance.refresh_once()
    assert asked == [("select", None), ("update", chosen), ("select", None)]
    assert done == ["select", "update", "select"]

    # With a refit cadence, the chosen models are refitted (not reselected) once it has passed.
    instance.settings = replace(instance.settings, refit_every=timedelta(minutes=20))
    asked.clear()
    chosen = instance.provider.snapshot.series["gpu_demand_forecast"][0].provenance.model
    for _ in range(3):
        clock.now += timedelta(minutes=10)
        await instance.refresh_once()
    assert asked == [("update", chosen), ("refit", chosen), ("update", chosen)]


async def test_a_refresh_between_fits_forecasts_from_the_new_data_with_the_held_models(parts):
    instance, _source, _provider, clock = parts
    first = await instance.refresh_once()
    clock.now += timedelta(minutes=15)  # three new 5-minute points of the real trace
    second = await instance.refresh_once()
    served = second.series["gpu_demand_forecast"][0]
    assert served.provenance.work == "update"
    assert served.provenance.model == first.series["gpu_demand_forecast"][0].provenance.model
    assert (
        served.provenance.forecast.timestamps[0]
        > first.series["gpu_demand_forecast"][0].provenance.forecast.timestamps[0]
    )
    # Exactly what the held models say for the newest history: nothing refitted, nothing stale.
    (held,) = fitting.held_models(instance.scope).values()
    expected = held.selection.forecast(served.provenance.history, len(served.provenance.forecast.mean), (0.9,))
    np.testing.assert_allclose(served.provenance.forecast.quantile(0.9), expected.quantile(0.9))
    assert any("forecast from the newest data" in note for note in served.provenance.notes)


def test_staleness_fallbacks(parts):
    from autoscaler.serving.provider import MetricUnavailable, ServedSeries, Snapshot

    now = datetime(2026, 11, 20, tzinfo=UTC)
    series = ServedSeries("m", {"a": "b"}, 7.0, now)
    clock = Clock()
    clock.now = now + timedelta(hours=1)
    for info, expected in (
        (MetricInfo("m", "", fallback="hold", staleness_ttl=timedelta(minutes=15)), 7.0),
        (MetricInfo("m", "", fallback="static", fallback_value=3.0, staleness_ttl=timedelta(minutes=15)), 3.0),
        (MetricInfo("m", "", fallback="error", staleness_ttl=timedelta(hours=2)), 7.0),
    ):
        provider = SnapshotProvider(Snapshot(now, {"m": info}, {"m": (series,)}), clock=clock)
        assert provider.get_metric("x", "m", EVERYTHING)[0].value == expected
    # past the TTL, fallback "error" refuses to serve (the HPA then holds its replicas)
    expired = MetricInfo("m", "", fallback="error", staleness_ttl=timedelta(minutes=15))
    provider = SnapshotProvider(Snapshot(now, {"m": expired}, {"m": (series,)}), clock=clock)
    with pytest.raises(MetricUnavailable, match="stale"):
        provider.get_metric("x", "m", EVERYTHING)


class GenAISource:
    """Alibaba GenAI serving (real): summed QPS, mean GPU duty cycle and pod count per sample."""

    name = "serving"

    def __init__(self) -> None:
        data = trace_slices.frame("genai_serving_per_sample")  # a committed slice (tests/data/traces)
        # The samples are 57 s apart in anonymised time; lay them on a 1-minute grid ending now.
        self.data = data.reset_index(drop=True)

    async def pull(self, now: datetime) -> list[Signal]:
        index = pd.date_range(end=pd.Timestamp(now).floor("min"), periods=len(self.data), freq="min")
        labels = {"service": "sd"}
        step = pd.Timedelta(minutes=1)
        return [
            Signal("rate", labels, pd.Series(self.data["qps"].to_numpy(), index=index), step),
            Signal("util", labels, pd.Series(self.data["utilization"].to_numpy(), index=index), step),
            Signal("replicas", labels, pd.Series(self.data["pods"].to_numpy(dtype=float), index=index), step),
        ]


async def test_replicas_forecast_from_learned_capacity():
    metrics = (MetricInfo("replicas_forecast", ""), MetricInfo("request_rate_forecast", ""))
    plans = (
        MetricPlan(
            "replicas_forecast",
            "rate",
            "replicas",
            utilization_signal="util",
            replicas_signal="replicas",
            target_utilization=20,
        ),
        MetricPlan("request_rate_forecast", "rate", "rate"),
    )
    now = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    provider = SnapshotProvider(empty_snapshot(metrics), clock=lambda: now)
    with ThreadPoolExecutor(max_workers=1) as pool:
        refresher = Refresher(
            provider=provider,
            inputs=RefreshInputs(
                metrics=metrics,
                plans=plans,
                sources=[GenAISource()],
                refresh=RefreshSettings(interval=timedelta(minutes=1), lead_time=timedelta(minutes=5)),
            ),
            pools=ForecastPools([pool]),
            clock=lambda: now,
        )
        snapshot = await refresher.refresh_once()
    (replicas,) = snapshot.series["replicas_forecast"]
    (rate,) = snapshot.series["request_rate_forecast"]
    data = GenAISource().data
    capacity = policy.learn_replica_capacity(data["utilization"], data["qps"] / data["pods"], 20.0)
    assert capacity is not None
    assert replicas.value == math.ceil(rate.value / capacity.requests_per_second)
    assert f"Huber fit on {capacity.samples} points" in replicas.explanation
    # Only the served signal is forecast; utilisation and replica counts only feed the fit.
    assert set(refresher.schedule.selected) == {("rate", (("service", "sd"),))}


async def test_step_down_is_paced_across_refreshes(parts):
    instance, source, _provider, clock = parts
    instance.plans = [replace(plan, max_decrease_per_minute=0.1) for plan in instance.plans]
    first = await instance.refresh_once()
    before = first.series["gpu_demand_forecast"][0].value
    # Demand halves: unpaced, the served value would fall by hundreds of GPUs at once.
    source.replay.values = source.replay.values * 0.5
    clock.now += timedelta(minutes=5)
    second = await instance.refresh_once()
    paced = second.series["gpu_demand_forecast"][0]
    assert paced.value == pytest.approx(before - 0.5)
    assert f"stepping down from {before:.2f} by at most 0.1 per minute" in paced.explanation


def test_label_index_finds_the_same_series_as_a_scan():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from autoscaler.selectors import format_selector
    from autoscaler.serving.provider import ServedSeries, Snapshot
    from tests.autoscaler.test_selectors import requirements

    now = datetime(2026, 11, 20, tzinfo=UTC)
    pools = ["a100", "h100", "l4", ""]

    def labels_of(i: int) -> dict[str, str]:
        return {"nodepool": pools[i % 4], "zone": f"z{i % 3}", **({"extra": "x"} if i % 5 == 0 else {})}

    series = tuple(ServedSeries("m", labels_of(i), i, now) for i in range(60))
    snapshot = Snapshot(now, {"m": MetricInfo("m", "")}, {"m": series})
    pool_selectors = st.builds(
        lambda keys, values: ",".join(f"{k} in ({','.join(values)})" for k in keys),
        st.lists(st.sampled_from(["nodepool", "zone", "extra", "missing"]), min_size=1, max_size=2, unique=True),
        st.lists(st.sampled_from(["a100", "h100", "z0", "z2", "x", "nope"]), min_size=1, max_size=3, unique=True),
    )

    generic_selectors = st.lists(requirements, min_size=1, max_size=3).map(
        lambda r: format_selector(Selector(tuple(r)))
    )

    @settings(max_examples=200, deadline=None)
    @given(st.one_of(pool_selectors, generic_selectors))
    def check(text):
        selector = parse_selector(text)
        scanned = [s for s in series if selector.matches(s.labels)]
        indexed = [s for s in snapshot.candidates("m", selector) if selector.matches(s.labels)]
        assert indexed == scanned

    check()


async def test_held_models_that_no_longer_fit_the_signal_are_replaced_by_a_new_selection(parts):
    instance, source, _provider, clock = parts
    await instance.refresh_once()
    real_pull = source.pull

    async def hourly(now):  # the signal's step changes (e.g. a new Prometheus step): 5 min -> 1 h
        return [
            Signal(s.name, s.labels, s.series.resample("1h").mean(), pd.Timedelta(hours=1))
            for s in await real_pull(now)
        ]

    source.pull = hourly
    clock.now += timedelta(minutes=5)
    second = await instance.refresh_once()
    served = second.series["gpu_demand_forecast"][0]
    assert instance.stats.last_error == {}
    # As old as its newest point, the hour's, not the refresh time.
    assert served.timestamp == pd.Timestamp(clock.now).floor("1h")
    assert served.provenance.work == "select"
    assert any("held models could not forecast (ValueError" in note for note in served.provenance.notes)


def test_restored_values_pass_the_checks_and_limits_of_computed_ones(parts, caplog):
    instance, _source, provider, clock = parts
    instance.plans = [replace(plan, max_value=40.0) for plan in instance.plans]
    instance.inputs = replace(
        instance.inputs,
        caps=lambda plan, labels, requested: [policy.Cap(30.0 - requested, "NodePool earth limit 30 GPUs")],
    )
    saved = {
        "gpu_demand_forecast": (
            ServedSeries("gpu_demand_forecast", {"pool": "earth"}, 55.0, clock.now, explanation="p90"),
            ServedSeries("gpu_demand_forecast", {"pool": "broken"}, 1e308, clock.now),
        ),
        "gpu_headroom": (
            ServedSeries("gpu_headroom", {"pool": "earth"}, 35.0, clock.now, explanation="p90 minus requested"),
            ServedSeries("gpu_headroom", {"pool": "broken"}, -5.0, clock.now),
        ),
    }
    instance.restore(Snapshot(clock.now, instance.metrics, saved))
    served = provider.snapshot.series
    assert [(dict(s.labels), s.value) for s in served["gpu_demand_forecast"]] == [({"pool": "earth"}, 40.0)]
    assert served["gpu_demand_forecast"][0].explanation == "p90; clamped to the maximum 40"
    # Headroom is capped first (GPUs requested now are unknown after a restart: the whole limit).
    assert [(dict(s.labels), s.value) for s in served["gpu_headroom"]] == [({"pool": "earth"}, 30.0)]
    assert served["gpu_headroom"][0].explanation == "p90 minus requested; capped at 30 by NodePool earth limit 30 GPUs"
    dropped = sorted(r.getMessage() for r in caplog.records if "dropping the saved value" in r.getMessage())
    assert dropped == [
        "dropping the saved value of gpu_demand_forecast{'pool': 'broken'}: 1e+308 is above 1e+09, more than any "
        "cluster has",
        "dropping the saved value of gpu_headroom{'pool': 'broken'}: -5 is negative",
    ]


async def test_a_computed_value_that_must_not_be_served_keeps_the_last_good_one(parts, monkeypatch, caplog):
    instance, _source, _provider, clock = parts
    first = await instance.refresh_once()
    real = fitting.work_in_worker

    def diverged(request):
        result = real(request)
        forecast = result.engine.forecast
        exploded = replace(forecast, quantiles={q: values + math.inf for q, values in forecast.quantiles.items()})
        return replace(result, engine=replace(result.engine, forecast=exploded))

    monkeypatch.setattr(fitting, "work_in_worker", diverged)
    clock.now += timedelta(minutes=5)
    second = await instance.refresh_once()
    # A forecast with no finite value is not 0 demand: the last good values stay, with their age.
    assert second.series == first.series
    assert "gpu_demand_forecast{'pool': 'earth'}: not served (nan is not a finite number)" in caplog.text


@pytest.mark.looptime
async def test_run_refreshes_at_once_when_woken_else_once_an_interval(parts):
    instance, _source, _provider, _clock = parts
    loop = asyncio.get_running_loop()
    started = loop.time()
    task = asyncio.create_task(instance.run())
    try:
        await eventually(lambda: instance.stats.refreshes == 1, message="first refresh")
        await asyncio.sleep(20)
        assert instance.stats.refreshes == 1  # the interval is 1 min
        instance.wake()  # a shard was taken over: its series are fitted now, not in 40 s
        await eventually(lambda: instance.stats.refreshes == 2, timeout=5, message="woken refresh")
        assert loop.time() - started < 30
        await eventually(lambda: instance.stats.refreshes == 3, timeout=65, message="next interval")
        assert loop.time() - started >= 20 + 60  # the interval counts again from the woken refresh
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
