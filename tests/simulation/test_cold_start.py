"""Scale-to-zero and cold start, on cases computed by hand (15 s syncs, 4 per minute)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from autoscaler.simulation.cold_start import (
    ColdStartConfig,
    observed_rate,
    outcome,
    rate_bins,
    ready_replicas,
    simulate_wakers,
)

ORIGIN = pd.Timestamp("2026-11-01", tz="UTC")


def _minutes(counts: list[float]) -> pd.Series:
    return pd.Series(counts, index=pd.date_range(ORIGIN, periods=len(counts), freq="1min"), dtype=float)


def test_a_pod_is_ready_after_the_cold_start_and_the_newest_go_first():
    replicas = np.array([0, 1, 1, 2, 2, 2, 1, 1, 0, 0])
    # 30 s of cold start: two slots. Pod A from slot 1 (Ready at 3), pod B from slot 3 (Ready at 5);
    # the scale-down at slot 6 removes B, the newest; A goes at slot 8.
    existing, ready = ready_replicas(replicas, 30.0)
    assert existing.tolist() == [0, 1, 1, 2, 2, 2, 1, 1, 0, 0]
    assert ready.tolist() == [0, 0, 0, 1, 1, 2, 1, 1, 0, 0]
    # A cold start off the 15 s grid is Ready from the next slot: 20 s -> 2 slots.
    assert ready_replicas(replicas, 20.0)[1].tolist() == ready.tolist()


def test_requests_spread_over_their_minute():
    per_minute = np.array([0.0, 8.0, 4.0])
    # One replica created at slot 5 (1 min 15 s), Ready at slot 5 + 4 (60 s of cold start) = slot 9.
    replicas = np.r_[np.zeros(5), np.ones(7)].astype(np.int64)
    result = outcome(per_minute, replicas, 60.0, first_minute=0)
    # Minute 1 (slots 4-7) has no Ready replica: 8; minute 2 (slots 8-11) is Ready from slot 9: 4 / 4.
    assert result.requests == 12
    assert result.requests_while_none_ready == pytest.approx(8 + 1)
    assert result.fraction_while_none_ready == pytest.approx(9 / 12)
    assert result.wakes == 1
    assert result.replica_hours == pytest.approx(7 * 15 / 3600)
    assert result.hours_none_ready == pytest.approx(9 * 15 / 3600)


def test_observed_rate_is_the_last_complete_minute():
    assert observed_rate(np.array([60.0, 0.0, 120.0])).tolist() == [0.0] * 4 + [1.0] * 4 + [0.0] * 4


def test_rate_bins_are_mean_requests_per_second_by_step_start():
    bins = rate_bins(_minutes([60, 0, 0, 0, 0, 120, 120, 120, 120, 120]), 300.0)
    assert bins.tolist() == [0.2, 2.0]
    assert list(bins.index) == [ORIGIN, ORIGIN + pd.Timedelta(minutes=5)]


def test_a_forecast_wakes_the_deployment_before_its_requests():
    """A burst of 30 requests in minute 20 after 20 quiet minutes; 3 minutes of cold start.

    Reactive: the observed rate is read from minute 21 (slot 84); Ready at slot 84 + 12 = minute 24:
    all 30 requests arrive with no replica. Forecast: a rate served from minute 15 wakes one replica at
    slot 60, Ready at slot 72 (minute 18): none is missed.
    """
    counts = [0.0] * 20 + [30.0] + [0.0] * 19
    per_minute = _minutes(counts)
    forecast = np.zeros(len(counts))
    forecast[15:22] = 0.5  # requests/s within the lead time
    config = ColdStartConfig(cold_start_s=180.0, warmup_s=0.0)
    results = simulate_wakers(per_minute, config, forecast=forecast)
    reactive, woken, both = results["reactive"], results["forecast"], results["forecast+observed"]
    assert reactive.requests == woken.requests == 30
    assert reactive.requests_while_none_ready == 30
    assert woken.requests_while_none_ready == 0 and both.requests_while_none_ready == 0
    assert reactive.wakes == woken.wakes == both.wakes == 1
    # Reactive: up from slot 84 (observed 0.5/s in minute 21) until the 300 s window after the
    # last positive reading (slot 87) has passed: down at slot 87 + 20 = 107.
    assert reactive.replica_hours == pytest.approx((107 - 84) * 15 / 3600)
    # Forecast: up from slot 60 to the last positive slot 87 (minute 21), down at 107 as well.
    assert woken.replica_hours == pytest.approx((107 - 60) * 15 / 3600)


def test_a_forecast_that_misses_leaves_the_requests_unserved_unless_observed_too():
    counts = [0.0] * 10 + [12.0] + [0.0] * 9
    results = simulate_wakers(_minutes(counts), ColdStartConfig(warmup_s=0.0), forecast=np.zeros(len(counts)))
    assert results["forecast"].requests_while_none_ready == 12
    assert results["forecast"].wakes == 0
    assert results["forecast+observed"].requests_while_none_ready == results["reactive"].requests_while_none_ready
    assert results["forecast+observed"].wakes == 1


def test_an_activation_value_lets_a_low_forecast_sleep():
    """The forecast 0.02/s all along (the HPA's rule keeps one replica up throughout) and 0.5/s around
    the burst: with activation 0.05 only the latter wakes it, as in the burst test above."""
    counts = [0.0] * 20 + [30.0] + [0.0] * 19
    forecast = np.full(len(counts), 0.02)
    forecast[15:22] = 0.5
    always = simulate_wakers(_minutes(counts), ColdStartConfig(warmup_s=0.0), forecast=forecast)["forecast"]
    assert always.replica_hours == pytest.approx(40 * 4 * 15 / 3600)  # from the first sync to the end
    config = ColdStartConfig(warmup_s=0.0, activation=0.05)
    gated = simulate_wakers(_minutes(counts), config, forecast=forecast)["forecast"]
    assert gated.requests_while_none_ready == 0 and gated.wakes == 1
    assert gated.replica_hours == pytest.approx((107 - 60) * 15 / 3600)


def test_warmup_minutes_are_not_scored_and_may_not_cover_everything():
    counts = [5.0] * 10 + [0.0] * 10
    config = ColdStartConfig(warmup_s=600.0)
    results = simulate_wakers(_minutes(counts), config, forecast=np.full(20, math.nan))
    assert results["reactive"].requests == 0
    with pytest.raises(ValueError, match="warm-up covers the whole"):
        simulate_wakers(_minutes(counts), ColdStartConfig(warmup_s=1200.0), forecast=np.zeros(20))
