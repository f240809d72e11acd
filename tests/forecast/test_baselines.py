"""naive_empirical's change windows: computed only where read, the same values as over the whole series."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from forecast.baselines import REFRESH, _change_windows
from forecast.registry import make_model


def _whole_series_windows(values: np.ndarray, h: int, length: int, rows: np.ndarray) -> np.ndarray:
    """The windows as computed before: every change of the series, NaN-padded, then the rows."""
    changes = values[h:] - values[:-h]
    padded = np.concatenate([np.full(length - 1, np.nan), changes])
    return np.asarray(sliding_window_view(padded, length)[rows])


@pytest.mark.parametrize("h", [1, 2, 7])
@pytest.mark.parametrize("length", [1, 5, 40, 500])
def test_change_windows_equal_the_whole_series_computation(h: int, length: int) -> None:
    rng = np.random.default_rng(h * 1000 + length)
    values = rng.normal(300.0, 40.0, 600)
    values[rng.choice(600, 30, replace=False)] = np.nan  # gaps: a change across one is NaN
    last_row = len(values) - h - 1
    for rows in (np.array([last_row]), np.array([0]), np.arange(0, last_row + 1, 13), np.array([3, 3, 250, 590 - h])):
        expected = _whole_series_windows(values, h, length, rows)
        np.testing.assert_array_equal(_change_windows(values, h, length, rows), expected)


def test_one_origin_reads_the_same_quantile_as_among_many(helios_10d: pd.Series) -> None:
    """A forecast from the newest origin reads one narrow window per step (the simulator's case);
    the calibration origins read many at once: an origin gets the same quantile either way."""
    model = make_model("naive_empirical", max_horizon=3).fit(helios_10d)
    filled, origins = model.history_.filled, model.origins_
    many = model._raw_quantile_paths(filled, origins, 3, 0.9)
    for position in (0, REFRESH, len(origins) - len(origins) % REFRESH - REFRESH):
        one = model._raw_quantile_paths(filled, origins[position : position + 1], 3, 0.9)
        np.testing.assert_array_equal(one[0], many[position])
    assert not np.array_equal(many[0], many[-1])  # the windows differ between the first and last origins
