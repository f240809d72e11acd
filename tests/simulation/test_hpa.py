"""HPA arithmetic against cases computed by hand from kube-controller-manager's rules."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.quantity import format_quantity, parse_quantity
from autoscaler.simulation.hpa import (
    DEFAULT_TOLERANCE,
    HPAController,
    HPASpec,
    ScalingPolicy,
    ScalingRules,
    Tolerance,
    average_value_replicas,
    milli_value,
    parse_tolerance,
    placeholder_replicas,
    value_replicas,
)

DEFAULT = Tolerance()


def test_milli_value_rounds_up_like_the_served_quantity():
    for value in (0.0, 0.1 + 0.2, 2.0001, 16.0, 7.25):
        assert milli_value(value) == round(parse_quantity(format_quantity(value)) * 1000)
    assert milli_value(0.1 + 0.2) == 301  # float noise is served, and read, as 301m
    assert milli_value(2.0001) == 2001


@pytest.mark.parametrize(
    ("usage", "current", "expected"),
    [
        (10_500, 10, 10),  # ratio 1.05: inside the 0.1 tolerance, keep
        (11_000, 10, 10),  # ratio 1.10: 1.1 <= 1 + 0.1 in float64, as isWithin reads it: keep
        (11_001, 10, 12),  # ratio 1.1001: ceil(11.001)
        (11_500, 10, 12),  # ratio 1.15: ceil(11.5)
        (9_000, 10, 10),  # ratio 0.90: |1 - 0.9| is just below 0.1: keep
        (8_900, 10, 9),  # ratio 0.89: ceil(8.9)
        (1, 0, 1),  # from zero: any usage scales to ceil(usage / target)
        (0, 0, 0),  # 0/0 is NaN, never above the tolerance: stay at zero
        (0, 5, 0),
    ],
)
def test_average_value_tolerance(usage, current, expected):
    assert average_value_replicas(usage, 1000, current, DEFAULT) == expected


@pytest.mark.parametrize(
    ("usage", "current", "tolerance", "expected"),
    [
        (10_001, 10, Tolerance(0, 0), 11),  # scaleUp 0: any rise scales, ceil(10.001)
        (10_000, 10, Tolerance(0, 0), 10),  # ratio exactly 1: within even at 0
        (9_999, 10, Tolerance(0, 0), 10),  # scaleDown 0: ceil(9.999) = 10, the same count
        (9_000, 10, Tolerance(0, 0), 9),
        (9_600, 10, Tolerance(0, 0.05), 10),  # 0.96 >= 0.95: keep
        (9_400, 10, Tolerance(0, 0.05), 10),  # 0.94 < 0.95: scale to ceil(9.4) = 10
        (9_000, 10, Tolerance(0, 0.05), 9),
        (10_500, 10, Tolerance(0, 0.05), 11),  # 1.05 > 1 + 0: scale up, where 0.1 kept 10
        (17_000, 16, Tolerance(0, 0.05), 17),  # the README's staircase: 17 served on 16 placeholders
        (15_200, 16, Tolerance(0, 0.05), 16),  # 0.95 is within down=0.05 (1 - 0.05 == 0.95 in float64)
        (15_100, 16, Tolerance(0, 0.05), 16),  # 0.94375: ceil(15.1) = 16, the same count
        (14_900, 16, Tolerance(0, 0.05), 15),
    ],
)
def test_average_value_with_separate_scale_up_and_scale_down_tolerances(usage, current, tolerance, expected):
    assert average_value_replicas(usage, 1000, current, tolerance) == expected


def test_parse_tolerance():
    assert parse_tolerance("0") == Tolerance(0.0, 0.0)
    assert parse_tolerance("0.2") == Tolerance(0.2, 0.2)
    assert parse_tolerance("up=0,down=0.05") == Tolerance(0.0, 0.05)
    assert parse_tolerance(" down=0.05 ") == Tolerance(DEFAULT_TOLERANCE, 0.05)
    assert parse_tolerance("up=0") == Tolerance(0.0, DEFAULT_TOLERANCE)
    for bad in ("", "-1", "up=-0.1", "up=0,up=0", "left=0", "nan", "inf", "up=x"):
        with pytest.raises(ValueError, match="--hpa-tolerance"):
            parse_tolerance(bad)


def test_tolerance_zero_follows_every_change_the_default_keeps_a_staircase():
    """16, 17, then 15.2 GPUs of headroom (20, 20 and 25 syncs), read from 16 placeholders: at 0.1 the
    count stays 16; at up=0,down=0.05 it follows 17 at once and comes back to 16 (15.2 / 17 = 0.89 is
    below 0.95) only when the 300 s window no longer holds a 17."""
    usage = np.r_[np.full(20, 16_000), np.full(20, 17_000), np.full(25, 15_200)].astype(np.int64)
    times = np.arange(65) * 15.0
    staircase = placeholder_replicas(times, usage, HPASpec(), initial=16)
    assert set(staircase.tolist()) == {16}
    follows = placeholder_replicas(times, usage, HPASpec(tolerance=Tolerance(0, 0.05)), initial=16)
    # The last 17 is recommended at 585 s (sync 39); at 885 s it is at the window's start, which
    # counts only recommendations after it.
    assert follows.tolist() == [16] * 20 + [17] * 39 + [16] * 6


def test_value_target_scales_ready_pods():
    # Value target 10, metric 30: ratio 3; 4 replicas of which 2 ready -> ceil(3 * 2) = 6.
    assert value_replicas(30_000, 10_000, 4, 2, DEFAULT) == 6
    assert value_replicas(10_500, 10_000, 4, 2, DEFAULT) == 4  # within tolerance
    assert value_replicas(10_500, 10_000, 4, 2, Tolerance(0, 0.1)) == 3  # up=0: ceil(1.05 * 2 ready)
    assert value_replicas(25_000, 10_000, 0, 0, DEFAULT) == 3  # from zero: ceil(ratio)


def test_scale_up_limit_is_max_of_100_percent_and_4_pods():
    hpa = HPAController()
    # 2 -> max(ceil(2 * 2), 2 + 4) = 6; 15 s later the previous event is exactly at the period's
    # cutoff and no longer counts: 6 -> max(12, 10) = 12; then 12 -> 20 (the proposal).
    assert hpa.reconcile(0.0, 2, [20]) == 6
    assert hpa.reconcile(15.0, 6, [20]) == 12
    assert hpa.reconcile(30.0, 12, [20]) == 20
    hpa = HPAController()
    assert hpa.reconcile(0.0, 10, [100]) == 20  # max(20, 14)
    hpa = HPAController()
    assert hpa.reconcile(0.0, 0, [9]) == 4  # max(ceil(0 * 2), 0 + 4)


def test_scale_up_events_within_the_period_count():
    # With a 60 s period, what was added in the last minute counts against the limit.
    rules = ScalingRules(0, (ScalingPolicy("Pods", 4, 60),))
    hpa = HPAController(HPASpec(scale_up=rules))
    assert hpa.reconcile(0.0, 0, [20]) == 4
    assert hpa.reconcile(15.0, 4, [20]) == 4  # period start 0: 0 + 4, already there
    assert hpa.reconcile(45.0, 4, [20]) == 4
    assert hpa.reconcile(60.0, 4, [20]) == 8  # the event at 0 s left the window


def test_scale_down_stabilisation_window_keeps_the_highest_recommendation():
    hpa = HPAController()
    assert hpa.reconcile(0.0, 10, [10]) == 10
    times = np.arange(15.0, 300.0, 15.0)
    for now in times:  # 15 .. 285 s: the recommendation of 10 at 0 s is inside the 300 s window
        assert hpa.reconcile(float(now), 10, [5]) == 10
    # At 300 s the record at 0 s is exactly at the cutoff (not after it): the window holds only 5s.
    assert hpa.reconcile(300.0, 10, [5]) == 5


def test_scale_down_uses_the_max_over_the_window_not_the_latest():
    hpa = HPAController()
    hpa.reconcile(0.0, 10, [10])
    hpa.reconcile(100.0, 10, [8])
    hpa.reconcile(200.0, 10, [3])
    assert hpa.reconcile(301.0, 10, [3]) == 8  # 10 left the window, 8 (at 100 s) is the highest left
    assert hpa.reconcile(401.0, 8, [3]) == 3


def test_scale_down_rate_policy():
    rules = ScalingRules(0, (ScalingPolicy("Pods", 1, 60),))
    hpa = HPAController(HPASpec(scale_down=rules))
    assert hpa.reconcile(0.0, 10, [5]) == 9
    assert hpa.reconcile(15.0, 9, [5]) == 9  # 10 at the start of the last 60 s: 10 - 1
    assert hpa.reconcile(60.0, 9, [5]) == 8
    # Default scale-down (100 % per 15 s) may go straight to the target once stabilised.
    hpa = HPAController(HPASpec(scale_down=ScalingRules(0, (ScalingPolicy("Percent", 100, 15),))))
    assert hpa.reconcile(0.0, 10, [0]) == 0


def test_max_over_metrics_and_invalid_metrics():
    hpa = HPAController()
    assert hpa.reconcile(0.0, 5, [3, 7, 5]) == 7
    # An unreadable metric blocks a scale-down (the HPA holds) but not a scale-up.
    hpa = HPAController(HPASpec(scale_down=ScalingRules(0, (ScalingPolicy("Percent", 100, 15),))))
    assert hpa.reconcile(0.0, 5, [None, 2]) == 5
    assert hpa.reconcile(15.0, 5, [None, 8]) == 8
    assert hpa.reconcile(30.0, 8, [None, None]) == 8


def test_min_and_max_replicas():
    spec = HPASpec(min_replicas=1, max_replicas=6)
    hpa = HPAController(spec)
    assert hpa.reconcile(0.0, 0, [5]) == 0  # replicas 0 with minReplicas > 0: scaling disabled
    assert hpa.reconcile(15.0, 2, [50]) == 6  # capped at maxReplicas
    assert hpa.reconcile(30.0, 9, [5]) == 6  # above maxReplicas: brought down to it


def test_placeholder_replicas_matches_step_by_step_reconcile():
    rng = np.random.default_rng(3)
    usage = (np.repeat(rng.integers(0, 40, 60), 4) * 1000 + rng.integers(0, 999, 240)).astype(np.int64)
    times = np.arange(240) * 15.0
    replicas = placeholder_replicas(times, usage, HPASpec())
    hpa, current = HPAController(), 0
    for now, value, got in zip(times, usage, replicas, strict=True):
        current = hpa.reconcile(float(now), current, [average_value_replicas(int(value), 1000, current, DEFAULT)])
        assert got == current
    # Two metrics: the maximum wins.
    both = placeholder_replicas(times, np.vstack([usage, usage // 2]), HPASpec())
    assert np.array_equal(both, replicas)


@pytest.mark.parametrize(
    "spec",
    [
        HPASpec(),
        HPASpec(tolerance=Tolerance(0, 0.05)),
        HPASpec(min_replicas=2, max_replicas=30),
        HPASpec(scale_up=ScalingRules(60, (ScalingPolicy("Pods", 2, 60),))),
    ],
)
def test_runs_of_unchanged_usage_are_filled_as_syncing_each_would(spec: HPASpec) -> None:
    """placeholder_replicas fills the rest of a run of unchanged usage once a sync holds; the counts
    must be those of reconciling at every sync (long constant stretches, steps, drops, unread)."""
    rng = np.random.default_rng(7)
    levels = rng.choice([-1, 0, 3_000, 3_500, 8_000, 40_000, 41_000], size=50)
    usage = np.repeat(levels, rng.integers(1, 60, size=50)).astype(np.int64)
    times = np.arange(len(usage)) * 15.0
    for initial in (0, 5):
        replicas = placeholder_replicas(times, usage, spec, initial=initial)
        hpa, current = HPAController(spec), initial
        for now, value, got in zip(times.tolist(), usage.tolist(), replicas.tolist(), strict=True):
            proposal = None if value < 0 else average_value_replicas(value, 1000, current, spec.tolerance)
            current = hpa.reconcile(now, current, [proposal])
            assert got == current, f"sync at {now:g} s"


class _ScanningController(HPAController):
    """The stabilisation window read as kube-controller-manager reads it: every recommendation
    recorded after the window's start, scanned at each sync."""

    def __init__(self, spec: HPASpec) -> None:
        super().__init__(spec)
        self.recorded: list[tuple[float, int]] = []

    def _stabilize(self, now: float, current: int, desired: int) -> int:
        up_cutoff = now - self.spec.scale_up.stabilization_window_seconds
        down_cutoff = now - self.spec.scale_down.stabilization_window_seconds
        up = min([desired, *(value for stamp, value in self.recorded if stamp > up_cutoff)])
        down = max([desired, *(value for stamp, value in self.recorded if stamp > down_cutoff)])
        self.recorded.append((now, desired))
        return min(max(current, up), down)


@pytest.mark.parametrize(("up_window", "down_window"), [(0, 300), (60, 300), (300, 60), (45, 0), (0, 0)])
def test_stabilisation_keeps_only_possible_extremes_and_matches_a_full_scan(up_window: int, down_window: int) -> None:
    spec = HPASpec(
        scale_up=ScalingRules(up_window, HPASpec().scale_up.policies),
        scale_down=ScalingRules(down_window, HPASpec().scale_down.policies),
    )
    rng = np.random.default_rng(up_window * 1000 + down_window)
    fast, scanning = HPAController(spec), _ScanningController(spec)
    current = 0
    # Irregular sync times (repeats included) and proposals that rise and fall in runs.
    times = np.cumsum(rng.choice([0.0, 5.0, 15.0, 15.0, 40.0], 3000))
    proposals = np.cumsum(rng.integers(-6, 7, 3000)).clip(0, None)
    for now, proposal in zip(times.tolist(), proposals.tolist(), strict=True):
        expected = scanning.reconcile(now, current, [proposal])
        assert fast.reconcile(now, current, [proposal]) == expected
        current = expected
    assert len(fast._highest) + len(fast._lowest) < 60  # not every recommendation is kept
    assert len(set(proposals.tolist())) > 20
