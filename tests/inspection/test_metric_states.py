"""Each metric's /readyz?verbose line, from what the refresher records: what runs, what failed, what it
served; a source that yields several signals (the demo's) speaks for them."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from autoscaler.serving.provider import MetricInfo, ServedSeries, Snapshot, empty_snapshot
from autoscaler.targets.plans import MetricPlan, RefreshStats
from autoscaler.web.shared.readiness import MetricState, Readiness, metric_states

NOW = datetime(2026, 12, 6, 8, 30, tzinfo=UTC)
PLANS = (
    MetricPlan("gpu_demand_forecast", "gpus_requested", "demand"),
    MetricPlan("gpu_headroom", "gpus_requested", "headroom"),
    MetricPlan("request_rate_forecast", "request_rate", "demand"),
)


def lines(stats: RefreshStats | None, served: tuple[str, ...] = ()) -> list[str]:
    snapshot = Snapshot(
        created_at=NOW,
        metrics={plan.metric: MetricInfo(plan.metric, "") for plan in PLANS},
        series={m: (ServedSeries(m, {"nodepool": "a100"}, 2.0, NOW),) for m in served},
    )
    return [state.line() for state in metric_states(PLANS, snapshot, stats)]


def test_before_any_refresh_and_before_the_first() -> None:
    assert lines(None) == [
        f"[-]metric {metric} failed: no value yet: no refresh has run in this process"
        for metric in ("gpu_demand_forecast", "gpu_headroom", "request_rate_forecast")
    ]
    assert (
        lines(RefreshStats())[0] == "[-]metric gpu_demand_forecast failed: no value yet: waiting for the first refresh"
    )


async def test_what_runs_shows_until_the_last_series_of_a_signal_is_done() -> None:
    stats = RefreshStats()
    first, second = asyncio.Event(), asyncio.Event()

    async def fit(done: asyncio.Event) -> None:
        with stats.working("gpus_requested", "forecast", NOW):
            await done.wait()

    fits = [asyncio.create_task(fit(first)), asyncio.create_task(fit(second))]
    await asyncio.sleep(0)
    running = "[-]metric gpu_headroom failed: no value yet: signal gpus_requested: forecast running since "
    running += "2026-12-06T08:30:00Z"
    assert lines(stats)[1] == running
    first.set()
    await asyncio.sleep(0)
    assert lines(stats)[1] == running  # one of the pool's two series is still being fitted
    second.set()
    await asyncio.gather(*fits)
    assert stats.running == {}
    assert lines(stats)[1] == "[-]metric gpu_headroom failed: no value yet: waiting for the first refresh"


def test_errors_served_nothing_and_a_source_that_speaks_for_its_signals() -> None:
    stats = RefreshStats(
        last_error={"gpus_requested": "forecast failed: TimeoutError", "demo": "pull returned no series"},
        last_success={"request_rate": NOW},
    )
    assert lines(stats, served=("gpu_demand_forecast",)) == [
        "[+]metric gpu_demand_forecast ok (1 series)",
        "[-]metric gpu_headroom failed: no value yet: signal gpus_requested: forecast failed: TimeoutError",
        "[-]metric request_rate_forecast failed: no value: source demo: pull returned no series",
    ]
    del stats.last_error["demo"]
    assert lines(stats)[2] == (
        "[-]metric request_rate_forecast failed: no value yet: signal request_rate: "
        "forecast at 2026-12-06T08:30:00Z served nothing (see the log)"
    )
    stats.running["demo"] = ("query", NOW)
    assert lines(stats)[2] == (
        "[-]metric request_rate_forecast failed: no value yet: source demo: query running since 2026-12-06T08:30:00Z"
    )


def test_the_verdict_is_what_is_served_not_the_metric_lines() -> None:
    readiness = Readiness(ready=True, reason="forecasts served")
    readiness.metrics = lambda: metric_states(PLANS, empty_snapshot([], NOW), RefreshStats())
    assert readiness.state() == (True, "forecasts served")
    assert readiness.verbose().splitlines()[-2:] == [
        "[-]metric request_rate_forecast failed: no value yet: waiting for the first refresh",
        "readyz check passed",
    ]


def test_what_is_logged_first_forecast_then_each_metric_s_first_value() -> None:
    served: list[str] = []
    readiness = Readiness()
    readiness.metrics = lambda: [MetricState(m, 1) if m in served else MetricState(m, 0, "no value yet") for m in "abc"]
    served.append("a")
    assert readiness.forecast_served() == "first forecast served; ready; no value yet: b, c (see /readyz?verbose)"
    assert readiness.state() == (True, "forecasts served")
    assert readiness.forecast_served() is None  # nothing new
    served.append("c")
    assert readiness.forecast_served() == "first values of c; no value yet: b (see /readyz?verbose)"
    served.append("b")
    assert readiness.forecast_served() == "first values of b; every metric has a value now"


def test_values_restored_before_the_first_forecast_log_no_first_forecast() -> None:
    readiness = Readiness(ready=True, reason="serving values saved at ...")
    readiness.metrics = lambda: [MetricState("a", 1)]
    assert readiness.forecast_served() is None
    assert readiness.state() == (True, "forecasts served")
