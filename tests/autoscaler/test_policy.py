"""Policy: pure functions of (forecast, windows, now) -> served values with their reasons."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from adapters.types import QUEUED_SOURCE, ScheduledWindow
from autoscaler import policy
from autoscaler.config.settings import WindowSettings
from autoscaler.policy import Cap, Decision
from autoscaler.refresh.kube_inputs import declared_windows
from forecast.types import Forecast
from tests import trace_slices


def flat_forecast(start: datetime, upper: list[float], step=timedelta(minutes=5)) -> Forecast:
    stamps = pd.date_range(pd.Timestamp(start) + step, periods=len(upper), freq=step)
    values = np.array(upper, dtype=float)
    return Forecast("test", stamps, values - 1, {0.9: values})


NOW = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)


def test_demand_is_the_peak_of_the_upper_quantile_within_the_lead_time():
    forecast = flat_forecast(NOW, [10, 14, 12, 40])  # 09:05, 09:10, 09:15, 09:20
    decision = policy.forecast_demand(forecast, quantile=0.9, now=NOW, lead_time=timedelta(minutes=15))
    assert decision.value == 14
    assert "peaks at 14.00 at 09:10 UTC within the 15 min lead time" in decision.explanation


def test_steps_that_ended_before_now_no_longer_count():
    # A forecast kept through an outage: made at 09:00, read at 09:12. The 09:05 step is over.
    forecast = flat_forecast(NOW, [50, 10, 12, 11])  # 09:05, 09:10, 09:15, 09:20
    later = NOW + timedelta(minutes=12)
    assert policy.forecast_demand(forecast, quantile=0.9, now=later, lead_time=timedelta(minutes=5)).value == 12
    # Past the forecast's end, its last step stands.
    assert (
        policy.forecast_demand(
            forecast, quantile=0.9, now=NOW + timedelta(hours=2), lead_time=timedelta(minutes=5)
        ).value
        == 11
    )


def test_the_first_step_counts_even_with_a_short_lead_time():
    forecast = flat_forecast(NOW, [7, 9])
    assert policy.forecast_demand(forecast, quantile=0.9, now=NOW, lead_time=timedelta(minutes=1)).value == 7


def test_windows_opening_within_the_lead_time_are_added():
    forecast = flat_forecast(NOW, [10, 10, 10])
    window = declared_windows(
        [WindowSettings(name="train", cron="10 9 * * *", gpus=16, duration=timedelta(hours=1))], NOW, timedelta(hours=1)
    )
    assert [(w.start.hour, w.start.minute) for w in window] == [(9, 10)]
    later = policy.forecast_demand(forecast, quantile=0.9, now=NOW, lead_time=timedelta(minutes=5), windows=window)
    ahead = policy.forecast_demand(forecast, quantile=0.9, now=NOW, lead_time=timedelta(minutes=10), windows=window)
    assert later.value == 10  # opens after now + lead time: not yet
    assert ahead.value == 26
    assert "plus scheduled windows /train (16 GPUs)" in ahead.explanation


def test_a_window_s_pool_choice_is_part_of_the_explanation():
    forecast = flat_forecast(NOW, [10, 10, 10])
    (window,) = declared_windows(
        [WindowSettings(name="train", cron="0 9 * * *", gpus=8, duration=timedelta(hours=1))], NOW, timedelta(hours=1)
    )
    choice = "NodePools reserved (weight 80), spot (weight 0) fit; Karpenter tries reserved first"
    placed = replace(window, namespace="ml", placement=choice)
    demand = policy.forecast_demand(forecast, quantile=0.9, now=NOW, lead_time=timedelta(minutes=5), windows=[placed])
    assert f"plus scheduled windows ml/train (8 GPUs; {choice})" in demand.explanation


def test_demand_queued_now_is_added_and_named_apart_from_scheduled_windows():
    forecast = flat_forecast(NOW, [10, 10, 10])
    (dated,) = declared_windows(
        [WindowSettings(name="nightly", cron="0 9 * * *", gpus=8, duration=timedelta(hours=1))], NOW, timedelta(hours=1)
    )
    queued = ScheduledWindow(
        QUEUED_SOURCE,
        "ml",
        "train",
        NOW,
        NOW + timedelta(hours=1),
        16,
        placement="Kueue Workload pending in ClusterQueue gpu",
    )
    lead = timedelta(minutes=5)
    demand = policy.forecast_demand(forecast, quantile=0.9, now=NOW, lead_time=lead, windows=[dated, queued])
    assert demand.value == 10 + 8 + 16
    assert demand.explanation.endswith(
        "; plus scheduled windows /nightly (8 GPUs); plus queued ml/train (16 GPUs; Kueue Workload pending in "
        "ClusterQueue gpu)"
    )
    # A buffer above the GPUs requested now holds the windows due, and what is queued now (no pod requests it).
    assert policy.windows_due([dated, queued], NOW, lead) == [queued]
    situation = policy.Situation(forecast=forecast, now=NOW, lead_time=policy.LeadTime(lead, "x"), windows=[queued])
    assert policy.buffer_demand(4, situation).value == 4 + 16


def test_headroom_names_what_requested_now_holds():
    assert (
        "minus 12.00 requested now (4 of them Pending pods) = 8.00"
        in policy.headroom(Decision(20.0, "x"), 12, "4 of them Pending pods").explanation
    )


def test_headroom_is_demand_minus_requested_never_negative():
    demand = Decision(20.0, "x")
    assert policy.headroom(demand, 12.5).value == 7.5
    assert policy.headroom(demand, 30).value == 0
    assert policy.headroom(demand, math.nan).value == 20


@pytest.mark.parametrize(
    ("day", "expected_starts"),
    [
        # Spring forward in Berlin: 02:30 does not exist on 2026-03-29, so no run and no window.
        (datetime(2026, 3, 29, tzinfo=UTC), []),
        # Fall back on 2026-10-25: 02:30 happens twice (CEST, then CET), so two runs.
        (
            datetime(2026, 10, 25, tzinfo=UTC),
            [datetime(2026, 10, 25, 0, 30, tzinfo=UTC), datetime(2026, 10, 25, 1, 30, tzinfo=UTC)],
        ),
        (datetime(2026, 11, 20, tzinfo=UTC), [datetime(2026, 11, 20, 1, 30, tzinfo=UTC)]),
    ],
)
def test_windows_follow_the_time_zone_across_dst(day, expected_starts):
    spec = WindowSettings(
        name="train", cron="30 2 * * *", timezone="Europe/Berlin", gpus=8, duration=timedelta(minutes=30)
    )
    windows = declared_windows([spec], day - timedelta(hours=2), timedelta(hours=6))
    assert [w.start for w in windows if w.start.date() == day.date()] == expected_starts
    for start in expected_starts:
        now = start - timedelta(minutes=5)
        forecast = flat_forecast(now, [3, 3, 3])
        served = policy.forecast_demand(
            forecast, quantile=0.9, now=now, lead_time=timedelta(minutes=5), windows=windows
        )
        assert served.value == 3 + 8  # the window's GPUs are there one lead time before it opens


def test_tightest_cap_applies_and_is_named():
    decision = Decision(30.0, "demand")
    capped = policy.apply_caps(
        decision, [Cap(24, "ResourceQuota gpu-placeholders/gpu (hard 24)"), Cap(40, "NodePool a100 limit")]
    )
    assert capped.value == 24
    assert capped.explanation == "demand; capped at 24 by ResourceQuota gpu-placeholders/gpu (hard 24)"
    assert policy.apply_caps(decision, [Cap(64, "NodePool a100 limit")]) is decision
    assert policy.apply_caps(decision, [Cap(-3, "NodePool over its limit")]).value == 0


def test_clamps():
    assert policy.clamp(Decision(5, "d"), 8, None).value == 8
    assert policy.clamp(Decision(50, "d"), None, 32).explanation == "d; clamped to the maximum 32"
    assert policy.clamp(Decision(5, "d"), 1, 10).value == 5


def test_step_down_is_paced_and_rises_pass_at_once():
    previous = (40.0, NOW)
    later = NOW + timedelta(minutes=3)
    paced = policy.limit_step_down(Decision(10, "window closed"), previous, later, max_decrease_per_minute=4)
    assert paced.value == 28
    assert "stepping down from 40.00 by at most 4 per minute (target 10.00)" in paced.explanation
    assert policy.limit_step_down(Decision(50, "up"), previous, later, 4).value == 50
    assert policy.limit_step_down(Decision(10, "d"), previous, NOW + timedelta(hours=1), 4).value == 10
    assert policy.limit_step_down(Decision(10, "d"), None, later, 4).value == 10
    assert policy.limit_step_down(Decision(10, "d"), previous, later, None).value == 10


def test_replica_capacity_learned_on_real_serving_data_predicts_held_out_utilization():
    # Alibaba GenAI Stable-Diffusion serving: per sample, mean GPU duty cycle over pods and QPS per pod.
    data = trace_slices.frame("genai_serving_per_sample")
    train, test = data.iloc[: len(data) // 2], data.iloc[len(data) // 2 :]
    capacity = policy.learn_replica_capacity(train["utilization"], train["qps_per_pod"], target_utilization=20.0)
    assert capacity is not None and capacity.slope > 0
    predicted = capacity.intercept + capacity.slope * test["qps_per_pod"]
    model_error = (predicted - test["utilization"]).abs().mean()
    constant_error = (train["utilization"].mean() - test["utilization"]).abs().mean()
    assert model_error < 0.6 * constant_error, (model_error, constant_error)
    # At the capacity the fit says a pod reaches the 20 % target.
    assert capacity.intercept + capacity.slope * capacity.requests_per_second == pytest.approx(20.0)
    decision = policy.replicas_for(Decision(9.6, "peak"), capacity, 20.0)
    assert decision is not None
    assert decision.value == math.ceil(9.6 / capacity.requests_per_second)


def test_replica_capacity_refuses_what_history_cannot_say():
    index = pd.date_range("2026-01-01", periods=50, freq="min", tz="UTC")
    flat_load = pd.Series(1.0, index=index)
    assert policy.learn_replica_capacity(pd.Series(np.linspace(5, 50, 50), index=index), flat_load, 60) is None
    falling = pd.Series(np.linspace(50, 5, 50), index=index)
    assert policy.learn_replica_capacity(falling, pd.Series(np.linspace(1, 10, 50), index=index), 60) is None
    assert policy.replicas_for(Decision(3, "r"), None, 60) is None


def test_a_residue_of_a_gpu_is_served_as_zero_but_a_slice_is_not():
    now = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)
    situation = policy.Situation(
        forecast=flat_forecast(now, [1 / 288, 4.4e-16]),
        now=now,
        lead_time=policy.LeadTime(timedelta(minutes=5), "configured"),
        requested_now=0.0,
    )
    for kind in ("demand", "headroom"):
        decision = policy.decide(policy.Rule(kind), situation)
        assert decision is not None and decision.value == 0.0, kind
        assert [adjustment.kind for adjustment in decision.adjustments] == ["residue"]
        assert "forecast residue, served as 0" in decision.explanation
    rate = policy.decide(policy.Rule("rate"), situation)  # requests per second may well be that small
    assert rate is not None and rate.value == pytest.approx(1 / 288)
    one_slice = policy.Situation(**{**situation.__dict__, "forecast": flat_forecast(now, [1 / 16, 1 / 16])})
    assert policy.decide(policy.Rule("demand"), one_slice).value == pytest.approx(1 / 16)  # a time-sliced 16th
