"""Exponential smoothing: damped-trend ETS, and Holt-Winters configured as PHPA does.

statsmodels estimates the smoothing parameters and initial states on the history before the
calibration window; a small additive filter then runs those fixed parameters over all the data, so
forecasts from any origin use data up to that origin only.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
from statsmodels.tools.sm_exceptions import ConvergenceWarning
from statsmodels.tsa.holtwinters import ExponentialSmoothing

from forecast.base import CalibratedModel
from forecast.history import History


def additive_filter(
    y: np.ndarray,
    alpha: float,
    beta: float,
    gamma: float,
    phi: float,
    level0: float,
    trend0: float,
    season0: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Additive (damped) Holt-Winters recursions.

    Returns ``level[t]``, ``trend[t]`` after observing ``y[t]``, and ``season`` of length
    ``len(y) + m`` where ``season[t + m]`` is the seasonal state for the phase of ``t`` after
    observing ``y[t]`` (``season[:m]`` is the initial state). ``m = 0`` means no season.
    """
    m = len(season0)
    n = len(y)
    level = np.empty(n)
    trend = np.empty(n)
    season = np.zeros(n + m)
    season[:m] = season0
    prev_level, prev_trend = level0, trend0
    for t in range(n):
        s = season[t] if m else 0.0
        new_level = alpha * (y[t] - s) + (1.0 - alpha) * (prev_level + phi * prev_trend)
        new_trend = beta * (new_level - prev_level) + (1.0 - beta) * phi * prev_trend
        if m:
            season[t + m] = gamma * (y[t] - prev_level - phi * prev_trend) + (1.0 - gamma) * s
        level[t], trend[t] = new_level, new_trend
        prev_level, prev_trend = new_level, new_trend
    return level, trend, season


States = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass
class FilterCache:
    """The last series the filter ran over (from ``start``) and its states.

    Refreshes between fits see the same series plus a few new observations: the filter resumes
    after the longest unchanged prefix instead of running over the whole history again. Resuming
    repeats the very same arithmetic from the very same state, so the states are bit-identical.
    """

    start: pd.Timestamp
    filled: np.ndarray
    states: States


class ExponentialSmoothingModel(CalibratedModel):
    """Additive-error exponential smoothing; subclasses choose trend damping and season."""

    name = "ets"
    damped: ClassVar[bool] = True
    seasonal: ClassVar[bool] = False

    @classmethod
    def min_history(cls, steps_per_day: int) -> int:
        # Holt-Winters needs two full seasons before the calibration window (published lesson).
        return 4 * steps_per_day if cls.seasonal else max(24, steps_per_day // 6)

    def _fit_params(self, history: History, end: int) -> None:
        period = history.steps_per_day if self.seasonal else None
        model = ExponentialSmoothing(
            history.filled[:end],
            trend="add",
            damped_trend=self.damped,
            seasonal="add" if self.seasonal else None,
            seasonal_periods=period,
            # Heuristic start values: estimating 288 seasonal states by optimisation costs seconds.
            initialization_method="heuristic" if self.seasonal else "estimated",
        )
        # A history the model fits exactly (e.g. a pool idle at 0 GPUs) has a sum of squared errors
        # of 0, and statsmodels takes its log for AIC/BIC, which this model never reads.
        with warnings.catch_warnings(), np.errstate(divide="ignore"):
            # The optimiser often stops at a bound (e.g. alpha = 1 on random-walk demand): the fit is
            # still usable, and its quality is judged by the calibration backtest, not this warning.
            warnings.simplefilter("ignore", ConvergenceWarning)
            # No brute-force grid of starting values: it costs ~1 s per fit and rarely changes the optimum.
            result = model.fit(use_brute=False)
        params = result.params
        self.alpha_ = float(params["smoothing_level"])
        self.beta_ = float(np.nan_to_num(params.get("smoothing_trend", 0.0)))
        self.gamma_ = float(np.nan_to_num(params.get("smoothing_seasonal", 0.0))) if self.seasonal else 0.0
        self.phi_ = float(np.nan_to_num(params.get("damping_trend", 1.0), nan=1.0)) if self.damped else 1.0
        self.level0_ = float(params["initial_level"])
        self.trend0_ = float(np.nan_to_num(params.get("initial_trend", 0.0)))
        self.season0_ = np.asarray(params["initial_seasons"], dtype=np.float64) if self.seasonal else np.zeros(0)
        self.states_: States | None = self._filter(history.filled)
        # Shared (not copied) by the rebased copies forecast_from makes, so each refresh resumes
        # where the previous one stopped.
        self.filter_cache_ = FilterCache(history.index[0], history.filled, self.states_)

    def _slim(self, quantiles: Sequence[float]) -> None:
        # Nothing of the fitted history: the first forecast filters the newer series from the start
        # (as one starting later would anyway), later ones resume from its cached states.
        self.states_ = None
        self.filter_cache_ = FilterCache(self._grid().start, np.empty(0), (np.empty(0), np.empty(0), np.empty(0)))

    def _filter(self, filled: np.ndarray) -> States:
        return additive_filter(
            filled, self.alpha_, self.beta_, self.gamma_, self.phi_, self.level0_, self.trend0_, self.season0_
        )

    def _rebase(self, history: History, offset: int) -> None:
        if len(self.season0_):
            # season0_[j] is the initial state of the fitted history's phase j; the new series'
            # position j has the phase of fitted position j + offset.
            self.season0_ = np.roll(self.season0_, -offset)
        self.states_ = self._resume(history)

    def _resume(self, history: History) -> States:
        """The filter over ``history.filled``, resumed after the prefix it shares with the cache."""
        filled, cache = history.filled, self.filter_cache_
        same = 0
        if cache.start == history.index[0]:
            common = min(len(filled), len(cache.filled))
            differ = np.flatnonzero(cache.filled[:common] != filled[:common])
            same = int(differ[0]) if len(differ) else common
        if same == 0:
            states = self._filter(filled)
        else:
            m = len(self.season0_)
            level, trend, season = cache.states
            # States after observing filled[same - 1], and the seasonal states the next m steps use.
            more = additive_filter(
                filled[same:],
                self.alpha_,
                self.beta_,
                self.gamma_,
                self.phi_,
                float(level[same - 1]),
                float(trend[same - 1]),
                season[same : same + m],
            )
            states = (
                np.concatenate([level[:same], more[0]]),
                np.concatenate([trend[:same], more[1]]),
                np.concatenate([season[:same], more[2]]),
            )
        self.filter_cache_.start, self.filter_cache_.filled, self.filter_cache_.states = (
            history.index[0],
            filled,
            states,
        )
        return states

    def _mean_paths(self, filled: np.ndarray, origins: np.ndarray, horizon: int) -> np.ndarray:
        states = self.states_
        if states is None or len(states[0]) != len(filled):
            states = self._filter(filled)
        level, trend, season = states
        steps = np.arange(1, horizon + 1)
        # Sum of phi^1..phi^h: the damped trend's cumulative contribution.
        damp = np.cumsum(self.phi_**steps) if self.damped else steps.astype(np.float64)
        paths = level[origins][:, None] + trend[origins][:, None] * damp[None, :]
        m = len(self.season0_)
        if m:
            # Latest seasonal state for the target's phase: observed at target - k*m <= origin.
            lag = m * np.ceil(steps / m).astype(np.intp)
            paths += season[origins[:, None] + steps[None, :] - lag[None, :] + m]
        return np.asarray(paths)


class HoltWinters(ExponentialSmoothingModel):
    """Holt-Winters as PHPA configures it: additive trend and additive daily season, no damping."""

    name = "holt_winters"
    damped = False
    seasonal = True
