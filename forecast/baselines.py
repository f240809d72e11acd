"""Baselines every report shows: naive, seasonal naive and the empirical-change naive."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from forecast.base import CalibratedModel
from forecast.history import History, nanquantile_rows

REFRESH = 4


class Naive(CalibratedModel):
    """Last value (what a reactive autoscaler does); quantiles from its own residuals."""

    name = "naive"

    def _fit_params(self, history: History, end: int) -> None:
        pass  # nothing to estimate

    def _mean_paths(self, filled: np.ndarray, origins: np.ndarray, horizon: int) -> np.ndarray:
        return np.repeat(filled[origins][:, None], horizon, axis=1)


class SeasonalNaive(CalibratedModel):
    """The value one season (default a day) before each target step."""

    name = "seasonal_naive"
    season_days: ClassVar[int] = 1
    # A season to copy from plus a calibration window (two days for the daily season).
    min_history_days: ClassVar[int] = 2

    @classmethod
    def min_history(cls, steps_per_day: int) -> int:
        return cls.min_history_days * steps_per_day

    def _fit_params(self, history: History, end: int) -> None:
        self.period_ = self.season_days * history.steps_per_day

    def _mean_paths(self, filled: np.ndarray, origins: np.ndarray, horizon: int) -> np.ndarray:
        steps = np.arange(1, horizon + 1)
        lag = self.period_ * np.ceil(steps / self.period_).astype(np.intp)
        positions = np.clip(origins[:, None] + steps[None, :] - lag[None, :], 0, None)
        return np.asarray(filled[positions])


class SeasonalNaiveWeekly(SeasonalNaive):
    """Seasonal naive with a one-week season, used when the history holds more than a week."""

    name = "seasonal_naive_weekly"
    season_days = 7
    min_history_days = 9


class NaiveEmpirical(CalibratedModel):
    """Last value plus the q-quantile of the past window's h-step changes (the baseline to beat).

    The quantile is computed at each origin from data before it, so it needs no conformal shift.
    """

    name = "naive_empirical"
    conformal = False

    def __init__(
        self, *, window_days: float = 7.0, max_horizon: int = 36, calibration_days: float = 2.0, seed: int = 0
    ) -> None:
        super().__init__(max_horizon=max_horizon, calibration_days=calibration_days, seed=seed)
        self.window_days = window_days

    @classmethod
    def min_history(cls, steps_per_day: int) -> int:
        return max(8, steps_per_day // 12)

    def _fit_params(self, history: History, end: int) -> None:
        self.window_ = max(2, round(self.window_days * history.steps_per_day))

    def _mean_paths(self, filled: np.ndarray, origins: np.ndarray, horizon: int) -> np.ndarray:
        return np.repeat(filled[origins][:, None], horizon, axis=1)

    def _raw_quantile_paths(self, filled: np.ndarray, origins: np.ndarray, horizon: int, level: float) -> np.ndarray:
        values = self._fitted().values  # gaps stay NaN: a change across a gap is not a change
        out = np.repeat(filled[origins][:, None], horizon, axis=1)
        # A week-long window barely moves between neighbouring origins: compute the quantile at every
        # REFRESH-th origin and reuse it for the following ones (still only past data).
        sampled = np.arange(0, len(origins), REFRESH)
        reuse = np.repeat(np.arange(len(sampled)), REFRESH)[: len(origins)]
        origins = origins[sampled]
        if not len(origins):
            return out
        for h in range(1, min(horizon + 1, len(values))):
            length = max(self.window_ - h, 1)
            ends = origins - h  # last change fully observed by the origin
            windows = _change_windows(values, h, length, np.clip(ends, 0, len(values) - h - 1))
            shift = nanquantile_rows(windows, level)
            shift[ends < 0] = np.nan
            out[:, h - 1] += np.nan_to_num(shift)[reuse]
        return out


def _change_windows(values: np.ndarray, h: int, length: int, rows: np.ndarray) -> np.ndarray:
    """For each ``r`` in ``rows``, the ``length`` changes ``y[s + h] - y[s]`` for ``s`` up to ``r``,
    NaN before the first change: rows of a sliding window over the NaN-padded changes.

    Only the changes the rows read are computed: a forecast from newer data reads one window, and
    the whole series' changes cost as much as its quantile.
    """
    first, last = int(rows.min()), int(rows.max())
    lo = first - (length - 1)  # the change the first window starts at (negative: padding)
    start = max(lo, 0)
    changes = values[start + h : last + 1 + h] - values[start : last + 1]
    segment = np.concatenate([np.full(start - lo, np.nan), changes])
    return np.asarray(sliding_window_view(segment, length)[rows - first])
