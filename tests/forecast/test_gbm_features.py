"""gbm's features: exact on a small series, and causal (from values up to the origin only)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from forecast.gbm import FeatureBuilder

STEP = pd.Timedelta(minutes=5)
START = pd.Timestamp("2026-01-05 00:00")  # a Monday
PER_HOUR, PER_DAY = 12, 288


def _builder(values: np.ndarray) -> FeatureBuilder:
    index = pd.date_range(START, periods=len(values), freq=STEP)
    return FeatureBuilder(values, index, STEP)


def _expected_row(values: np.ndarray, origin: int, step: int) -> list[float]:
    """The row written out from the definitions, one slice per feature."""
    now = values[origin]
    target = origin + step
    day_ago = target - PER_DAY * math.ceil(step / PER_DAY)
    calendar = START + target * STEP
    moves = np.abs(np.diff(values[: origin + 1]))
    return [
        float(step),
        now - values[max(origin - 1, 0)],
        now - values[max(origin - 3, 0)],  # a quarter of an hour: 3 steps
        now - values[max(origin - PER_HOUR, 0)],
        now - values[max(origin - PER_HOUR + 1, 0) : origin + 1].mean(),
        now - values[max(origin - PER_DAY + 1, 0) : origin + 1].mean(),
        # mean absolute move over 4 hours, the first point counting a move of 0
        np.concatenate([[0.0], moves])[max(origin - 4 * PER_HOUR + 1, 0) : origin + 1].mean(),
        values[day_ago] - now if day_ago >= 0 else np.nan,
        np.nan,  # a week ago: before this 2-day series
        float(calendar.hour * 60 + calendar.minute),
        float(calendar.day_of_week),
    ]


def test_every_column_on_a_small_series_by_definition() -> None:
    values = np.random.default_rng(3).integers(0, 40, size=2 * PER_DAY + 30).astype(np.float64)
    origins = np.array([0, 2, 11, 12, 100, 287, 300, 400, 550, 575])
    steps = np.array([1, 3, 36, 2, 288, 12, 1, 200, 24, 1])

    rows = _builder(values).build(origins, steps)

    expected = np.array([_expected_row(values, int(o), int(s)) for o, s in zip(origins, steps, strict=True)])
    np.testing.assert_allclose(rows, expected, rtol=0, atol=1e-12)


def test_steps_beyond_training_are_capped_in_the_step_column() -> None:
    values = np.arange(400, dtype=np.float64)
    rows = _builder(values).build(np.array([300, 300]), np.array([2, 50]), max_step=36)
    np.testing.assert_array_equal(rows[:, 0], [2, 36])
    np.testing.assert_array_equal(rows[0, 1:7], rows[1, 1:7])  # the origin's own columns
    np.testing.assert_array_equal(rows[:, 7], [values[302 - 288] - 300, values[350 - 288] - 300])  # the target's


@pytest.mark.parametrize("origin", [0, 11, 71, 200, 498])
def test_no_feature_reads_a_value_after_its_origin(origin: int) -> None:
    rng = np.random.default_rng(origin)
    values = rng.normal(size=500).cumsum()
    changed = values.copy()
    changed[origin + 1 :] += rng.normal(scale=50.0, size=len(values) - origin - 1)
    steps = np.array([1, 3, 12, 36, 288, 300])
    origins = np.full(len(steps), origin)

    before = _builder(values).build(origins, steps)
    after = _builder(changed).build(origins, steps)

    # Every column, the day- and week-ago lags included (whole days back from the target: at or
    # before the origin), and the series cut at the origin gives the same rows.
    np.testing.assert_array_equal(before, after)
    np.testing.assert_array_equal(before, _builder(values[: origin + 1]).build(origins, steps))
