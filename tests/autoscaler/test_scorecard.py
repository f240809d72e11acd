"""The scorecard's definitions: per-minute integration, short minutes, waits, idle, coverage, targets."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.scorecard.figures import (
    MinuteLedger,
    ServiceTarget,
    TargetError,
    coverage,
    gpu_allocation,
    idle_gpu_hours,
    integrate_per_minute,
    make_target,
    parse_fraction_target,
    short_figures,
    wait_figures,
    window_start_delay,
)


def test_a_step_function_is_integrated_exactly_per_minute() -> None:
    # 12 GPUs short from 90 s to 150 s, then 3 from 150 s to 200 s, then none.
    times = np.array([0.0, 90.0, 150.0, 200.0])
    rates = np.array([0.0, 12.0, 3.0, 0.0])
    per_minute = integrate_per_minute(times, rates, 0.0, 300.0)
    assert per_minute.tolist() == [0.0, 12 * 30.0, 12 * 30.0 + 3 * 30.0, 3 * 20.0, 0.0]


def test_integration_starts_with_the_value_in_force_and_ends_on_a_partial_minute() -> None:
    times = np.array([0.0, 30.0])
    rates = np.array([2.0, 4.0])
    # From 60 s, 4 GPUs are in force; the last minute is half long.
    assert integrate_per_minute(times, rates, 60.0, 150.0).tolist() == [240.0, 120.0]
    # Before the first change nothing is known: zero.
    assert integrate_per_minute(np.array([90.0]), np.array([1.0]), 0.0, 120.0).tolist() == [0.0, 30.0]
    assert integrate_per_minute(np.zeros(0), np.zeros(0), 0.0, 120.0).tolist() == [0.0, 0.0]


def _ledger(short: list[float], held: list[float], used: list[float]) -> MinuteLedger:
    starts = np.arange(len(short)) * 60.0
    return MinuteLedger(starts, np.array(short), np.array(held), np.array(used))


def test_a_pool_short_of_12_gpus_for_20_minutes_shows_240_gpu_minutes_and_20_minutes() -> None:
    short = [12 * 60.0] * 20 + [0.0] * 40
    ledger = _ledger(short, [64 * 60.0] * 60, [52 * 60.0] * 60)
    figures = short_figures(ledger)
    assert figures.short_gpu_minutes == 240.0
    assert figures.minutes_short == 20
    assert figures.minutes_scored == 60
    assert figures.minutes_short_fraction == pytest.approx(20 / 60)
    assert figures.short_gpu_minutes_per_day == pytest.approx(240.0 * 24)
    assert idle_gpu_hours(ledger) == pytest.approx(12.0)
    assert gpu_allocation(ledger) == pytest.approx(52 / 64)


def test_a_pool_with_enough_capacity_shows_zero() -> None:
    ledger = _ledger([0.0] * 30, [8 * 60.0] * 30, [8 * 60.0] * 30)
    figures = short_figures(ledger)
    assert (figures.short_gpu_minutes, figures.minutes_short, figures.minutes_short_fraction) == (0.0, 0, 0.0)
    assert idle_gpu_hours(ledger) == 0.0
    assert gpu_allocation(_ledger([0.0], [0.0], [0.0])) is None


def test_ledger_arrays_must_align_and_slice_by_start() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        MinuteLedger(np.zeros(2), np.zeros(3), np.zeros(2), np.zeros(2))
    ledger = _ledger([1.0, 2.0, 3.0], [0.0] * 3, [0.0] * 3)
    assert ledger.between(60.0, 180.0).short_gpu_seconds.tolist() == [2.0, 3.0]


def test_waits_and_window_delays() -> None:
    figures = wait_figures(np.array([0.0, 10.0, 20.0, 30.0, 400.0]))
    assert (figures.count, figures.p50_s, figures.max_s) == (5, 20.0, 400.0)
    assert figures.p95_s == pytest.approx(326.0)
    assert wait_figures(np.zeros(0)).p95_s is None
    # A CronJob scheduled at 1000 s whose last pod ran at 1420 s started 7 minutes late.
    assert window_start_delay(1000.0, np.array([1010.0, 1420.0])) == 420.0
    assert window_start_delay(1000.0, np.array([900.0])) == 0.0


def test_coverage_counts_only_known_rises() -> None:
    served = np.array([4.0, 4.0, 4.0, 4.0])
    realized = np.array([3.0, 4.0, 5.0, np.nan])
    assert coverage(served, realized) == (2, 3)


def test_targets_parse_as_an_operator_writes_them() -> None:
    assert parse_fraction_target("1%") == ServiceTarget("minutes_short_fraction", 0.01)
    assert parse_fraction_target(" 0.3 % ").value == pytest.approx(0.003)
    for bad in ("0%", "100%", "-1%", "1", "1e-3%", "1_0%", "abc", ""):
        with pytest.raises(TargetError, match="target"):
            parse_fraction_target(bad)
    assert make_target("short_gpu_minutes_per_day", 30).describe() == "at most 30 short GPU-minutes a day"
    with pytest.raises(TargetError, match="unknown"):
        make_target("minutes_short", 0.01)
    with pytest.raises(TargetError, match="below 100 %"):
        make_target("minutes_short_fraction", 1.0)
    with pytest.raises(TargetError, match="at least 0"):
        make_target("window_start_delay_p95_s", -5)


def test_a_target_is_judged_on_the_figure_it_names() -> None:
    ledger = _ledger([60.0] + [0.0] * 99, [60.0] * 100, [60.0] * 100)
    target = parse_fraction_target("1%")
    assert target.attained(short_figures(ledger)) == pytest.approx(0.01)
    assert target.met(short_figures(ledger)) is True
    assert parse_fraction_target("0.5%").met(short_figures(ledger)) is False
    delays = wait_figures(np.array([0.0, 600.0]))
    assert make_target("window_start_delay_p95_s", 300).met(short_figures(ledger), delays) is False
    assert make_target("window_start_delay_p95_s", 300).met(short_figures(ledger), None) is None
