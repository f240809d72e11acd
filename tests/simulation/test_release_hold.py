"""The release hold: H chosen per series by replaying the policy's own served targets (no look-ahead).

Hand-made series at one-minute steps with five-minute bins and a 6.5-minute lead (the service's
5 minutes plus its 90 s margin): a bursty series whose demand drops and comes back within minutes,
where holding pays; a smooth one the forecast follows, where it only adds idle GPUs.
"""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.simulation.release_hold import HOLD_GRID_S, HoldPlan, apply_release_hold, bin_holds, cost_ratio

STEP_S = 60.0
PLAN = HoldPlan(bin_step_s=300.0, lead_s=390.0, lookback_s=86400.0, reselect_every_s=6 * 3600.0)
LEAD_STEPS = 7  # round(390 / 60)
DAY = 1440


def _bursty(days: int = 2) -> np.ndarray:
    """8 GPUs for 10 minutes, none for the next 10, and again: on and off all day."""
    minutes = np.arange(days * DAY)
    return np.where((minutes // 10) % 2 == 0, 8.0, 0.0)


def _smooth(days: int = 2) -> np.ndarray:
    """A daily wave between 20 and 60 GPUs."""
    minutes = np.arange(days * DAY)
    return 40.0 + 20.0 * np.sin(2 * np.pi * minutes / DAY)


def _reactive_headroom(observed: np.ndarray) -> np.ndarray:
    """A forecast that sees nothing coming: no headroom above the last complete bin."""
    return np.zeros(len(observed))


def _perfect_headroom(observed: np.ndarray) -> np.ndarray:
    """A forecast that knows the demand a lead time ahead: target = that demand."""
    base, _ = bin_holds(observed, STEP_S, PLAN)
    ahead = np.concatenate([observed[LEAD_STEPS:], np.full(LEAD_STEPS, observed[-1])])
    return np.maximum(ahead - base, 0.0)


def test_newsvendor_ratio():
    assert cost_ratio(0.9) == pytest.approx(9.0)
    assert cost_ratio(0.5) == pytest.approx(1.0)
    assert cost_ratio(0.99) == pytest.approx(99.0)


def test_holds_read_complete_bins_only():
    observed = np.array([1.0, 5, 2, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0] + [0.0] * 15 + [9.0] * 10)
    plan = HoldPlan(bin_step_s=300.0, lead_s=390.0, lookback_s=3600.0, reselect_every_s=3600.0, grid_s=(0.0, 900.0))
    base, (no_hold, fifteen) = bin_holds(observed, STEP_S, plan)
    # Before the first bin ends nothing is known; then the last complete bin's peak.
    assert base[:5].tolist() == [0.0] * 5
    assert base[5:10].tolist() == [5.0] * 5  # bin 0 (minutes 0-4) peaked at 5
    assert base[10:15].tolist() == [3.0] * 5  # bin 1
    assert no_hold.tolist() == base.tolist()  # H = 0 holds nothing beyond the last bin
    # 15 minutes hold the last four bins: bin 0's 5 until bin 4 is the newest, at minute 25.
    assert fifteen[10:25].tolist() == [5.0] * 15
    assert fifteen[25:30].tolist() == [3.0] * 5
    assert fifteen[35].tolist() == 9.0  # the burst at minute 30 is seen when its bin ends


def test_bursts_are_held_and_a_smooth_series_is_not():
    bursty = _bursty()
    held = apply_release_hold(_reactive_headroom(bursty), bursty, STEP_S, PLAN, 0, 0.9)
    assert held.chosen_s[0] == 0.0  # nothing served yet: no hold
    # Demand comes back 10 minutes after it drops: 15 minutes of bins cover every gap.
    assert set(held.chosen_s[1:]) == {900.0}
    base, holds = bin_holds(bursty, STEP_S, PLAN)
    later = slice(6 * 60, None)
    assert np.array_equal(held.values[later], holds[HOLD_GRID_S.index(900.0)][later] - base[later])

    smooth = _smooth()
    headroom = _perfect_headroom(smooth)
    held = apply_release_hold(headroom, smooth, STEP_S, PLAN, 0, 0.9)
    assert set(held.chosen_s) == {0.0}  # the forecast already covers the demand: a hold only idles
    assert np.array_equal(held.values, headroom)


def test_the_cost_ratio_decides_between_idle_and_short():
    # Bursts of 8 GPUs for 5 minutes every 2 hours: holding through the long gap idles far more than
    # the few short minutes it saves, unless a short minute costs almost a hundred idle ones.
    minutes = np.arange(2 * DAY)
    sparse = np.where((minutes % 120) < 5, 8.0, 0.0) + np.where((minutes % 120 >= 60) & (minutes % 120 < 65), 8.0, 0.0)
    low = apply_release_hold(_reactive_headroom(sparse), sparse, STEP_S, PLAN, 0, 0.6)
    high = apply_release_hold(_reactive_headroom(sparse), sparse, STEP_S, PLAN, 0, 0.995)
    assert set(low.chosen_s[1:]) == {0.0}
    assert set(high.chosen_s[1:]) == {60 * 60.0}  # the hold that bridges the hourly gap


def test_a_choice_sees_nothing_after_its_reselection():
    bursty = _bursty(3)
    first_step = 60  # the run starts an hour in: nothing served before it is replayed
    held = apply_release_hold(_reactive_headroom(bursty), bursty, STEP_S, PLAN, first_step, 0.9)
    changed = bursty.copy()
    reselection = first_step + 4 * 360  # the fifth period starts here
    changed[reselection:] = 0.0  # demand after the reselection does not move its choice
    again = apply_release_hold(_reactive_headroom(changed), changed, STEP_S, PLAN, first_step, 0.9)
    assert again.chosen_s[:5] == held.chosen_s[:5]
    assert len(held.chosen_s) == len(range(first_step, 3 * DAY, 360))
    assert np.array_equal(held.values[:first_step], np.zeros(first_step))  # before the run: untouched
