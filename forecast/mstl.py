"""MSTL seasonality (daily and weekly) fit on hourly aggregates, mapped back to the serving step.

MSTL on 5-minute data with a weekly season costs about 20 s per series; on hourly means it costs a
few milliseconds and the seasonal shape is the same. The forecast is the seasonal profile plus an
exponentially smoothed level of the deseasonalised series at the serving step.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from statsmodels.tsa.seasonal import MSTL

from forecast.base import CalibratedModel
from forecast.history import History

HOURS_PER_DAY = 24
HOURS_PER_WEEK = 168
# Smoothing constants tried for the level of the deseasonalised series.
LEVEL_ALPHAS = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0)


class MSTLModel(CalibratedModel):
    name = "mstl"

    @classmethod
    def min_history(cls, steps_per_day: int) -> int:
        return 4 * steps_per_day  # two daily seasons before a two-day calibration window

    def _fit_params(self, history: History, end: int) -> None:
        per_hour = history.steps_per_hour if history.step < pd.Timedelta(hours=1) else 1
        hours = end // per_hour
        start = end - hours * per_hour  # whole hours ending at ``end``
        hourly = history.filled[start:end].reshape(hours, per_hour).mean(axis=1)
        periods = tuple(p for p in (HOURS_PER_DAY, HOURS_PER_WEEK) if hours >= 2 * p)
        if not periods:
            raise ValueError(f"mstl needs two days of history before calibration, got {hours} h")
        seasonal = np.asarray(MSTL(hourly, periods=periods).fit().seasonal, dtype=np.float64)
        seasonal = seasonal.reshape(hours, -1)
        # One profile per period, phase-aligned to hour index 0 of the hourly grid (at ``start``).
        profiles = []
        for column, period in enumerate(periods):
            last = seasonal[-period:, column]
            phase = (hours - period) % period
            profiles.append(np.roll(last, phase))
        self.periods_ = periods
        self.profiles_ = profiles
        self.per_hour_ = per_hour
        self.start_ = start
        self.alpha_ = self._choose_alpha(history.filled[:end], history)

    def _rebase(self, history: History, offset: int) -> None:
        # The hourly grid's hour 0 sits ``offset`` steps earlier in a series that starts later.
        self.start_ = self.start_ - offset

    def _seasonal(self, positions: np.ndarray) -> np.ndarray:
        """Seasonal value at serving-step positions, interpolated between hour centres."""
        hour = (positions - self.start_ + 0.5) / self.per_hour_ - 0.5
        below = np.floor(hour).astype(np.intp)
        weight = hour - below
        total = np.zeros(positions.shape, dtype=np.float64)
        for period, profile in zip(self.periods_, self.profiles_, strict=True):
            total += (1 - weight) * profile[below % period] + weight * profile[(below + 1) % period]
        return total

    def _level(self, filled: np.ndarray, alpha: float) -> np.ndarray:
        deseasonalised = filled - self._seasonal(np.arange(len(filled)))
        return pd.Series(deseasonalised).ewm(alpha=alpha, adjust=False).mean().to_numpy()

    def _choose_alpha(self, head: np.ndarray, history: History) -> float:
        """The level smoothing with the lowest error one hour ahead on the fitting data."""
        ahead = max(1, history.steps_per_hour)
        season_ahead = self._seasonal(np.arange(ahead, len(head) + ahead))
        best, best_error = LEVEL_ALPHAS[0], np.inf
        for alpha in LEVEL_ALPHAS:
            predicted = self._level(head, alpha) + season_ahead
            error = float(np.mean(np.abs(head[ahead:] - predicted[:-ahead])))
            if error < best_error:
                best, best_error = alpha, error
        return best

    def _mean_paths(self, filled: np.ndarray, origins: np.ndarray, horizon: int) -> np.ndarray:
        level = self._level(filled, self.alpha_)
        targets = origins[:, None] + np.arange(1, horizon + 1)[None, :]
        return np.asarray(level[origins][:, None] + self._seasonal(targets))
