"""A validated, regular history: the one shape of input every model works on."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

DAY = pd.Timedelta(days=1)
WEEK = pd.Timedelta(days=7)


@dataclass(frozen=True)
class History:
    """``values`` keeps gaps as NaN (never scored); ``filled`` interpolates them for fitting."""

    index: pd.DatetimeIndex
    values: np.ndarray
    filled: np.ndarray
    step: pd.Timedelta
    # Future indexes by horizon: every model of a selection, and every policy quantile, forecasts
    # from the same prepared history (the simulator does so at every forecast step), and pandas
    # builds an index in about as long as a model takes to forecast a few steps.
    _futures: dict[int, pd.DatetimeIndex] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.values)

    @property
    def steps_per_day(self) -> int:
        return max(1, int(DAY // self.step))

    @property
    def steps_per_hour(self) -> int:
        return max(1, int(pd.Timedelta(hours=1) // self.step))

    @cached_property
    def nonnegative(self) -> bool:
        """Demand that never went negative is clipped at zero in forecasts (read at every forecast
        from a fitted model: computed once, the values never change)."""
        return bool(np.nanmin(self.values) >= 0)

    @property
    def gap_share(self) -> float:
        return float(np.isnan(self.values).mean())

    def future_index(self, horizon: int) -> pd.DatetimeIndex:
        """The ``horizon`` timestamps after the last one (an immutable index, shared by the callers)."""
        if horizon not in self._futures:
            self._futures[horizon] = pd.DatetimeIndex(self.index[-1] + self.step * np.arange(1, horizon + 1))
        return self._futures[horizon]


def infer_step(index: pd.DatetimeIndex) -> pd.Timedelta:
    """The most common spacing (the shortest on ties): robust to a few missing samples."""
    # Integer arithmetic in the index's own unit: the simulator prepares a history at every forecast
    # step, and pandas' timedelta mode cost as much as the rest of ``prepare``.
    spacings, counts = np.unique(np.diff(index.asi8), return_counts=True)
    return pd.Timedelta(np.timedelta64(int(spacings[np.argmax(counts)]), index.unit))


def prepare(y: pd.Series, max_span: pd.Timedelta | None = None) -> History:
    """Validate ``y`` (float, tz-aware DatetimeIndex, regular step) and fill gaps for fitting."""
    if not isinstance(y.index, pd.DatetimeIndex):
        raise TypeError("the series needs a DatetimeIndex")
    if y.index.tz is None:
        raise ValueError("the series index must be tz-aware (UTC)")
    return _prepare_regular(y, max_span) or _prepare_any(y, max_span)


def _prepare_regular(y: pd.Series, max_span: pd.Timedelta | None) -> History | None:
    """:func:`prepare` for what it is mostly given, or None: float values on an evenly spaced,
    increasing index whose first and last values are observed.

    Such a series needs no sorting, trimming or reindexing, so the result is :func:`_prepare_any`'s
    (a test compares them) without pandas' general machinery, which cost about 0.7 ms a call: the
    simulator prepares a history at every forecast step.
    """
    if y.dtype != np.float64 or len(y) < 2:
        return None
    index = pd.DatetimeIndex(y.index).tz_convert("UTC")
    spacings = np.diff(index.asi8)
    raw = y.to_numpy()
    if spacings[0] <= 0 or not (spacings == spacings[0]).all() or np.isnan(raw[0]) or np.isnan(raw[-1]):
        return None
    step = pd.Timedelta(np.timedelta64(int(spacings[0]), index.unit))
    if max_span is not None and len(raw) > max_span // step:
        keep = int(max_span // step)
        index, raw = index[-keep:], raw[-keep:]
    values: np.ndarray = np.array(raw, dtype=np.float64, copy=True)
    filled = values
    if np.isnan(values).any():
        gaps = pd.Series(values, index=index)
        filled = gaps.interpolate(method="linear", limit_direction="both").to_numpy(dtype=np.float64)
    return History(index=index, values=values, filled=filled, step=step)


def _prepare_any(y: pd.Series, max_span: pd.Timedelta | None) -> History:
    """:func:`prepare` for any series with a tz-aware DatetimeIndex."""
    y = y.astype(np.float64)
    y.index = pd.DatetimeIndex(y.index).tz_convert("UTC")
    if not y.index.is_monotonic_increasing:
        y = y.sort_index()
    if y.index.has_duplicates:
        raise ValueError("the series index has duplicate timestamps")
    # Leading and trailing NaN carry no information about the level.
    valid = np.flatnonzero(~np.isnan(y.to_numpy()))
    if len(valid) < 2:
        raise ValueError("the series needs at least two observed values")
    y = y.iloc[valid[0] : valid[-1] + 1]
    step = infer_step(pd.DatetimeIndex(y.index))
    grid = pd.date_range(y.index[0], y.index[-1], freq=step)
    if len(grid) != len(y) or not grid.equals(y.index):
        y = y.reindex(grid)
    if max_span is not None and len(y) > max_span // step:
        y = y.iloc[-int(max_span // step) :]
    values = y.to_numpy(dtype=np.float64, copy=True)
    filled = values
    if np.isnan(values).any():
        filled = y.interpolate(method="linear", limit_direction="both").to_numpy(dtype=np.float64)
    return History(index=pd.DatetimeIndex(y.index), values=values, filled=filled, step=step)


def future_matrix(values: np.ndarray, origins: np.ndarray, horizon: int) -> np.ndarray:
    """``out[i, h-1] = values[origins[i] + h]``; NaN past the end of the data."""
    padded = np.concatenate([values, np.full(horizon, np.nan)])
    positions = origins[:, None] + np.arange(1, horizon + 1)[None, :]
    return padded[positions]


def nanquantile_rows(matrix: np.ndarray, level: float) -> np.ndarray:
    """Row-wise quantile (linear interpolation) ignoring NaN; NaN for rows with no data.

    Vectorised sort-and-index: much faster than ``np.nanquantile`` on 2-D input.
    """
    if not np.isnan(matrix).any():
        return np.asarray(np.quantile(matrix, level, axis=1), dtype=np.float64)
    ordered = np.sort(matrix, axis=1)  # NaN sorts last
    counts = np.sum(~np.isnan(matrix), axis=1)
    position = level * np.maximum(counts - 1, 0)
    below = np.floor(position).astype(np.intp)
    above = np.minimum(below + 1, np.maximum(counts - 1, 0))
    low = np.take_along_axis(ordered, below[:, None], axis=1)[:, 0]
    high = np.take_along_axis(ordered, above[:, None], axis=1)[:, 0]
    out = low + (high - low) * (position - below)
    out[counts == 0] = np.nan
    return np.asarray(out, dtype=np.float64)
