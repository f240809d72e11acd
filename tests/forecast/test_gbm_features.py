"""gbm's level and burst features: causal (from values up to the origin only) and exact."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from forecast.gbm import FeatureBuilder

STEP = pd.Timedelta(minutes=5)
START = pd.Timestamp("2026-01-05 00:00")


def _builder(values: np.ndarray) -> FeatureBuilder:
    index = pd.date_range(START, periods=len(values), freq=STEP)
    return FeatureBuilder(values, index, STEP)


def test_burst_columns_on_a_small_series_by_hand() -> None:
    # 5-minute steps: an hour is 12 points, 30 minutes 6, 2 hours 24, 6 hours 72.
    values = np.zeros(100)
    values[10:20] = [5, 2, 9, 9, 4, 4, 4, 4, 4, 4]  # moves +5 -3 +7 0 -5 at 10..14, then flat
    values[20:] = 4.0
    values[90] = 1.0  # a drop at 90 (-3), back up at 91 (+3)
    origins = np.array([0, 12, 14, 21, 80, 91, 99])

    burst = _builder(values).burst(origins)

    level, rise_1h, rise_6h, range_1h, moves_30m, moves_2h = burst.T
    np.testing.assert_array_equal(level, [0, 9, 4, 4, 4, 4, 4])
    # Largest one-step rise over the 12 points up to the origin (their moves, each from its predecessor).
    np.testing.assert_array_equal(rise_1h, [0, 7, 7, 7, 0, 3, 3])
    np.testing.assert_array_equal(rise_6h, [0, 7, 7, 7, 7, 3, 3])
    # Max - min of the 12 values up to the origin; before the series its first value (0).
    np.testing.assert_array_equal(range_1h, [0, 9, 9, 7, 0, 3, 3])
    # Sum of |moves| over the 6 and 24 points up to the origin.
    np.testing.assert_array_equal(moves_30m, [0, 15, 20, 0, 0, 6, 0])
    np.testing.assert_array_equal(moves_2h, [0, 15, 20, 20, 0, 6, 6])


def test_repeated_origins_get_the_rows_of_their_origin() -> None:
    values = np.random.default_rng(1).normal(size=400).cumsum()
    builder = _builder(values)
    origins = np.array([300, 5, 300, 120, 5])
    np.testing.assert_array_equal(builder.burst(origins), np.vstack([builder.burst(np.array([o])) for o in origins]))


@pytest.mark.parametrize("origin", [0, 11, 71, 200, 498])
def test_no_feature_reads_a_value_after_its_origin(origin: int) -> None:
    rng = np.random.default_rng(origin)
    values = rng.normal(size=500).cumsum()
    changed = values.copy()
    changed[origin + 1 :] += rng.normal(scale=50.0, size=len(values) - origin - 1)
    steps = np.array([1, 3, 12, 36])
    origins = np.full(len(steps), origin)

    before = _builder(values).build(origins, steps)
    after = _builder(changed).build(origins, steps)

    # Every column, the day- and week-ago lags included (whole days back from the target: at or
    # before the origin), and the burst columns are those of the series cut at the origin.
    np.testing.assert_array_equal(before, after)
    np.testing.assert_array_equal(before[:, -6:], _builder(values[: origin + 1]).burst(np.array([origin] * len(steps))))
