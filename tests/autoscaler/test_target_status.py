"""A headroom's target observed (``scorecard.target_status``): live attainment over the tune window and
1 h, 6 h and 24 h, the error budget left, and the gauges ``/metrics`` exports from them."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.scorecard.figures import MinuteLedger, ServiceTarget
from autoscaler.scorecard.pools import PoolScorecard
from autoscaler.scorecard.target_status import attained, budget_remaining, statuses, target_status
from autoscaler.serving.provenance import TargetChoice
from autoscaler.serving.provider import MetricInfo, ServedSeries, Snapshot
from autoscaler.web.ops.target_metrics import TargetMetrics
from tests.inspection.conftest import TARGET, build_real_forecast

T0 = 1_780_000_020.0 - 1_780_000_020.0 % 60  # a whole minute
MINUTES = 2 * 1440  # two days scored, minute by minute
NOW_S = T0 + MINUTES * 60
# Short minutes (by index from T0): 3 in the last hour, 6 more in the last 6 h, 12 more in the last
# 24 h and 24 more before.
SHORT = (
    [MINUTES - 10 - k for k in range(3)]
    + [MINUTES - 120 - k for k in range(6)]
    + [MINUTES - 600 - k for k in range(12)]
    + [100 + k for k in range(24)]
)


def choice(kind: str = "minutes_short_fraction", value: float = 0.02, pool: str = "a100") -> TargetChoice:
    return TargetChoice(kind, value, pool, 2 * 86400.0, "p97", None, "no choice yet", None)


def two_days() -> PoolScorecard:
    card = PoolScorecard()
    short = set(SHORT)
    for minute in range(MINUTES + 1):  # the last sample closes the last minute
        card.sample(T0 + 60 * minute, 2.0 if minute in short else 0.0, 8.0, 6.0)
    return card


def test_the_live_attainment_is_the_share_of_minutes_short_over_each_window() -> None:
    status = target_status(choice(), two_days(), NOW_S)
    assert status.live == {
        "tune": pytest.approx(45 / MINUTES),
        "1h": pytest.approx(3 / 60),
        "6h": pytest.approx(9 / 360),
        "24h": pytest.approx(21 / 1440),
    }
    # 45 minutes short of 2,880 is 1.5625 %, 78.125 % of the 2 % allowed: 21.875 % of the budget left.
    assert status.budget_remaining == pytest.approx(1 - (45 / MINUTES) / 0.02)
    assert status.budget_remaining == pytest.approx(0.21875)


def test_short_gpu_minutes_have_a_budget_and_a_window_start_delay_none() -> None:
    card = two_days()
    per_day = target_status(choice("short_gpu_minutes_per_day", 60.0), card, NOW_S)
    # 45 minutes of 2 GPUs short over 2 days: 45 short GPU-minutes a day, 75 % of the 60 allowed.
    assert per_day.live["tune"] == pytest.approx(45.0)
    assert per_day.budget_remaining == pytest.approx(0.25)
    card.record_window_delay(NOW_S - 2 * 3600, 420.0)
    card.record_window_delay(NOW_S - 30 * 3600, 60.0)
    delay = target_status(choice("window_start_delay_p95_s", 300.0), card, NOW_S)
    assert delay.live == {"tune": pytest.approx(60 + 0.95 * 360), "1h": None, "6h": 420.0, "24h": 420.0}
    assert delay.budget_remaining is None
    assert budget_remaining(ServiceTarget("short_gpu_minutes_per_day", 0.0), 3.0) is None  # nothing allowed


def test_an_unscored_pool_or_a_minute_whose_gpus_short_are_unknown_is_not_judged() -> None:
    assert target_status(choice(), None, NOW_S).live == {"tune": None, "1h": None, "6h": None, "24h": None}
    assert target_status(choice(), None, NOW_S).budget_remaining is None
    # Three minutes: one short, one unknown (no Pending-pod watch), one not short: half of those scored.
    ledger = MinuteLedger(np.array([0.0, 60.0, 120.0]), np.array([30.0, math.nan, 0.0]), np.ones(3), np.ones(3))
    target = ServiceTarget("minutes_short_fraction", 0.01)
    assert attained(target, ledger, np.zeros((0, 2)), 0.0, 180.0) == 0.5
    assert attained(target, ledger, np.zeros((0, 2)), 60.0, 120.0) is None  # only the unknown minute


def test_the_snapshot_carries_each_pools_target_and_the_gauges_read_it() -> None:
    forecast = build_real_forecast()  # its headroom (pool a100) is served to the conftest's TARGET
    assert forecast.headroom.provenance is not None
    delay_choice = choice("window_start_delay_p95_s", 300.0, pool="l4")
    delay_series = ServedSeries(
        "gpu_headroom_l4",
        {"nodepool": "l4"},
        1.0,
        datetime.fromtimestamp(NOW_S, UTC),
        provenance=replace(forecast.headroom.provenance, target=delay_choice),
    )
    snapshot = Snapshot(
        created_at=datetime.fromtimestamp(NOW_S, UTC),
        metrics={**forecast.snapshot.metrics, "gpu_headroom_l4": MetricInfo("gpu_headroom_l4", "")},
        series={**forecast.snapshot.series, "gpu_headroom_l4": (delay_series,)},
    )
    cards = {"a100": two_days()}
    observed = statuses(snapshot, cards, NOW_S)
    assert sorted(observed) == [("a100", "gpu_headroom"), ("l4", "gpu_headroom_l4")]
    assert observed["a100", "gpu_headroom"].choice == TARGET
    registry = CollectorRegistry()
    registry.register(TargetMetrics(lambda: observed))
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
    }
    a100 = (("metric", "gpu_headroom"), ("nodepool", "a100"))
    tune = 45 / MINUTES  # TARGET's tune window is 7 days: the card's two days
    assert samples == {
        ("gpu_autoscaler_target_attained_ratio", (*a100, ("window", "tune"))): pytest.approx(tune),
        ("gpu_autoscaler_target_attained_ratio", (*a100, ("window", "1h"))): pytest.approx(3 / 60),
        ("gpu_autoscaler_target_attained_ratio", (*a100, ("window", "6h"))): pytest.approx(9 / 360),
        ("gpu_autoscaler_target_attained_ratio", (*a100, ("window", "24h"))): pytest.approx(21 / 1440),
        ("gpu_autoscaler_target_ratio", a100): 0.01,
        ("gpu_autoscaler_error_budget_remaining_ratio", a100): pytest.approx(1 - tune / 0.01),
        # l4's target is a window start delay: no ratio, no budget, and its pool is not scored.
    }
