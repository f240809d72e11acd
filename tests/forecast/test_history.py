"""Preparing a history: the shortcut for regular series gives what the general path gives."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
import pytest

from forecast.base import MAX_HISTORY
from forecast.history import History, _prepare_any, _prepare_regular, prepare


def _assert_same(first: History, second: History) -> None:
    assert first.index.equals(second.index)
    assert first.index.dtype == second.index.dtype  # unit and time zone
    assert first.index.freq == second.index.freq
    assert first.step == second.step
    assert first.values.dtype == second.values.dtype == np.float64
    np.testing.assert_array_equal(first.values, second.values)  # NaN where the gaps are, in both
    np.testing.assert_array_equal(first.filled, second.filled)


Unit = Literal["s", "ms", "us", "ns"]


def _series(unit: Unit, periods: int, freq: str = "5min", tz: str = "UTC") -> pd.Series:
    index = pd.date_range("2020-05-01", periods=periods, freq=freq, tz="UTC").as_unit(unit).tz_convert(tz)
    values = np.random.default_rng(periods).integers(0, 900, periods).astype(np.float64)
    return pd.Series(values, index=index, name="gpus_requested")


@pytest.mark.parametrize("unit", ["s", "us", "ns"])
@pytest.mark.parametrize("periods", [2, 300, 9000])
@pytest.mark.parametrize("max_span", [None, MAX_HISTORY, pd.Timedelta(hours=5)])
def test_regular_series_take_the_shortcut_to_the_same_history(
    unit: Unit, periods: int, max_span: pd.Timedelta | None
) -> None:
    series = _series(unit, periods)
    shortcut = _prepare_regular(series, max_span)
    assert shortcut is not None
    _assert_same(shortcut, _prepare_any(series, max_span))
    _assert_same(prepare(series, max_span), shortcut)


def test_shortcut_fills_inner_gaps_and_converts_to_utc_as_the_general_path_does() -> None:
    series = _series("us", 600, tz="Europe/Berlin")
    series.iloc[[5, 6, 7, 300]] = np.nan
    stamps = pd.DatetimeIndex(series.index).asi8.view("M8[us]")
    series.index = pd.DatetimeIndex(stamps).tz_localize("UTC").tz_convert("Europe/Berlin")  # no freq
    assert series.index.freq is None
    shortcut = _prepare_regular(series, None)
    assert shortcut is not None
    assert str(shortcut.index.tz) == "UTC"
    assert np.isnan(shortcut.values).sum() == 4
    assert not np.isnan(shortcut.filled).any()
    _assert_same(shortcut, _prepare_any(series, None))


def test_other_series_take_the_general_path() -> None:
    regular = _series("us", 300)
    leading_gap = regular.copy()
    leading_gap.iloc[0] = np.nan
    missing_sample = regular.drop(regular.index[100])
    unsorted = regular.iloc[::-1]
    integers = regular.astype(np.int64)
    for series in (leading_gap, missing_sample, unsorted, integers):
        assert _prepare_regular(series, None) is None
        _assert_same(prepare(series, None), _prepare_any(series, None))
    assert len(prepare(leading_gap)) == 299  # the leading NaN is trimmed
    assert len(prepare(missing_sample)) == 300  # the missing step is put back as a gap
    assert np.isnan(prepare(missing_sample).values).sum() == 1
    assert prepare(unsorted).index.is_monotonic_increasing


def test_duplicate_timestamps_are_still_refused() -> None:
    regular = _series("us", 10)
    duplicated = pd.concat([regular.iloc[:5], regular.iloc[4:]])
    with pytest.raises(ValueError, match="duplicate timestamps"):
        prepare(duplicated)


def test_future_index_is_built_once_per_horizon_with_the_same_timestamps() -> None:
    history = prepare(_series("us", 300))
    first = history.future_index(7)
    expected = pd.DatetimeIndex(history.index[-1] + history.step * np.arange(1, 8))
    assert first.equals(expected)
    assert first.dtype == expected.dtype
    assert history.future_index(7) is first
    assert history.future_index(2).equals(expected[:2])
