"""The estimator contract, and the conformal calibration that gives every model quantiles.

Each model fits its parameters on the history *before* a recent calibration window, then forecasts
from every origin inside that window with those fixed parameters (state and features use data up to
the origin only). The errors per horizon step are the model's own backtest residuals: quantiles are
the point forecast plus the residual quantile for that step (split conformal), so point models and
quantile models alike yield calibrated upper quantiles. The same out-of-sample forecasts are what
model selection scores.

Because parameters never depend on the origin, a fitted model also forecasts exactly from newer data
(:meth:`CalibratedModel.forecast_from`): the same parameters and conformal offsets, with state and
features computed from the new series. That is what a refresh between two fits does.
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, Self

import numpy as np
import pandas as pd

from forecast.history import History, future_matrix, nanquantile_rows, prepare
from forecast.types import Forecast

# At most this many calibration origins: more adds cost, not information (they overlap heavily).
MAX_CALIBRATION_ORIGINS = 300
# Never calibrate on less than this share of the history, so that parameters have data to fit.
MAX_CALIBRATION_SHARE = 0.4
# Longest history a model looks at (bounds fit cost and memory for long-lived series).
MAX_HISTORY = pd.Timedelta(days=28)


def model_history(y: pd.Series) -> History:
    """``y`` prepared the way every model prepares its input (validated, regular, the newest
    ``MAX_HISTORY`` only)."""
    return prepare(y, max_span=MAX_HISTORY)


class Estimator(Protocol):
    """What the engine and the backtest need from a model."""

    @property
    def name(self) -> str: ...

    def fit(self, y: pd.Series) -> Self: ...

    def predict(self, horizon: int, quantiles: Sequence[float]) -> Forecast: ...


@dataclass(frozen=True)
class FittedGrid:
    """What forecasting from a newer series needs of the fitted one: where its steps start (seasonal
    phases and calendars count from there), their length, and whether demand was never negative."""

    start: pd.Timestamp
    step: pd.Timedelta
    nonnegative: bool


@dataclass(frozen=True)
class Holdout:
    """Out-of-sample forecasts over the calibration window, as selection scores them.

    Arrays are ``[origin, step]``; ``actual`` is NaN where no observation exists.
    """

    actual: np.ndarray
    mean: np.ndarray
    upper: np.ndarray


def finalize(
    mean: np.ndarray, paths: dict[float, np.ndarray], nonnegative: bool
) -> tuple[np.ndarray, dict[float, np.ndarray]]:
    """Enforce the shape every consumer relies on: non-negative demand, ordered quantiles,
    upper quantiles never below the mean and lower ones never above it."""
    if nonnegative:
        mean = np.maximum(mean, 0.0)
    ordered: dict[float, np.ndarray] = {}
    previous: np.ndarray | None = None
    for level in sorted(paths):
        values = np.maximum(paths[level], 0.0) if nonnegative else paths[level].copy()
        values = np.maximum(values, mean) if level >= 0.5 else np.minimum(values, mean)
        if previous is not None:
            values = np.maximum(values, previous)
        ordered[level] = values
        previous = values
    return mean, ordered


def calibration_length(n: int, steps_per_day: int, calibration_days: float) -> int:
    wanted = round(calibration_days * steps_per_day)
    return max(1, min(wanted, int(n * MAX_CALIBRATION_SHARE)))


class CalibratedModel(ABC):
    """Base of every model. Subclasses supply parameter fitting and mean paths from origins.

    ``__init__`` stores parameters only; fitted state lives in attributes ending in ``_``.
    """

    name: ClassVar[str]
    #: False for models whose quantiles are already empirical and causal (no conformal shift).
    conformal: ClassVar[bool] = True

    def __init__(self, *, max_horizon: int = 36, calibration_days: float = 2.0, seed: int = 0) -> None:
        self.max_horizon = max_horizon
        self.calibration_days = calibration_days
        self.seed = seed

    # ---- what a subclass provides ----------------------------------------------------------

    @classmethod
    def min_history(cls, steps_per_day: int) -> int:
        """Fewest observations the model needs (including the calibration window)."""
        return 8

    @abstractmethod
    def _fit_params(self, history: History, end: int) -> None:
        """Estimate parameters from ``history.filled[:end]`` only."""

    @abstractmethod
    def _mean_paths(self, filled: np.ndarray, origins: np.ndarray, horizon: int) -> np.ndarray:
        """``[origin, step]`` point forecasts from each origin, using data up to that origin only."""

    def _raw_quantile_paths(self, filled: np.ndarray, origins: np.ndarray, horizon: int, level: float) -> np.ndarray:
        """The model's own quantile before conformal correction; point models return the mean."""
        return self._mean_paths(filled, origins, horizon)

    def for_quantiles(self, quantiles: Sequence[float]) -> CalibratedModel:
        """This fitted model as if built with ``make_model(..., quantiles=quantiles)``.

        Quantile models trained for more levels (to serve several policy quantiles from one fit)
        answer with only the levels a separate fit would have trained; point models are unaffected.
        """
        return self

    def _rebase(self, history: History, offset: int) -> None:
        """Point state that depends on positions at ``history`` (called on a shallow copy).

        ``offset`` is how many steps after the fitted history's start ``history`` starts (negative
        when earlier): seasonal phases and calendars indexed from the start shift by it. Models
        whose ``_mean_paths`` read everything from ``filled`` need nothing.
        """
        return  # the default: nothing positional

    # ---- the estimator contract ------------------------------------------------------------

    def fit(self, y: pd.Series) -> Self:
        return self.fit_history(model_history(y))

    def fit_history(self, history: History) -> Self:
        """:meth:`fit` for a series already prepared with :func:`model_history`: candidates fitted
        on one series share one preparation (and the memory the fitted models hold of it)."""
        n = len(history)
        needed = self.min_history(history.steps_per_day)
        if n < needed:
            raise ValueError(f"{self.name} needs at least {needed} observations, got {n}")
        calibration = calibration_length(n, history.steps_per_day, self.calibration_days)
        end = n - calibration
        self._fit_params(history, end)
        stride = max(1, math.ceil(calibration / MAX_CALIBRATION_ORIGINS))
        origins = np.arange(n - 2, end - 2, -stride)[::-1]
        self.history_: History | None = history
        self.grid_ = FittedGrid(history.index[0], history.step, history.nonnegative)
        # The calibration arrays: selection scores them, the conformal offsets come from them.
        self.origins_: np.ndarray | None = origins
        self.actual_: np.ndarray | None = future_matrix(history.values, origins, self.max_horizon)
        self.mean_paths_: np.ndarray | None = self._mean_paths(history.filled, origins, self.max_horizon)
        self.raw_paths_: dict[float, np.ndarray] = {}
        self.offsets_: dict[float, np.ndarray | None] = {}
        return self

    def predict(self, horizon: int, quantiles: Sequence[float]) -> Forecast:
        return self._forecast(self._fitted(), self, horizon, quantiles)

    def forecast_from(self, y: pd.Series, horizon: int, quantiles: Sequence[float]) -> Forecast:
        """Forecast from the last observation of ``y`` with the fitted parameters and offsets.

        ``y`` is prepared exactly as :meth:`fit` prepares its input and must have the fitted step.
        Nothing is re-estimated: state (levels, lags, calendar features) comes from ``y``, so this
        is what the model forecasts at a later refresh without refitting, and
        ``forecast_from(<the fitted series>)`` equals :meth:`predict`.
        """
        return self.forecast_history(model_history(y), horizon, quantiles)

    def forecast_history(self, history: History, horizon: int, quantiles: Sequence[float]) -> Forecast:
        """:meth:`forecast_from` for a series already prepared with :func:`model_history` (lets
        several models share one preparation)."""
        grid = self._grid()
        if history.step != grid.step:
            raise ValueError(
                f"{self.name} was fitted on a step of {grid.step}, the series has a step of {history.step}"
            )
        return self._forecast(history, self._on(history), horizon, quantiles)

    def _on(self, history: History) -> CalibratedModel:
        """This model with its positional state pointed at ``history`` (itself for the fitted data)."""
        fitted, grid = self.history_, self._grid()
        same = fitted is not None and (history is fitted or _same_data(history, fitted))
        if same:
            return self
        # Phases are whole steps; a series on a shifted grid takes the nearest phase.
        offset = round((history.index[0] - grid.start) / grid.step)
        # A shallow copy: fitted arrays are shared read-only; _rebase replaces what it changes.
        rebased = copy.copy(self)
        rebased.history_ = history
        rebased._rebase(history, offset)
        return rebased

    def _forecast(
        self, history: History, source: CalibratedModel, horizon: int, quantiles: Sequence[float]
    ) -> Forecast:
        """Paths from ``source`` (this model rebased at ``history``) plus this model's offsets.

        The non-negativity seen at fit time applies, like the offsets: a refresh between fits keeps
        the fitted model's shape constraints.
        """
        last = np.array([len(history) - 1])
        mean = source._mean_paths(history.filled, last, horizon)[0]
        paths = {
            float(level): source._raw_quantile_paths(history.filled, last, horizon, float(level))[0]
            + self._offsets(float(level), horizon)
            for level in quantiles
        }
        mean, paths = finalize(mean, paths, self._grid().nonnegative)
        return Forecast(
            model=self.name, timestamps=history.future_index(horizon), mean=mean, quantiles=paths
        ).validate()

    # ---- calibration -----------------------------------------------------------------------

    def holdout(self, level: float, steps: int) -> Holdout:
        """Forecasts over the calibration window at ``level`` for the first ``steps`` steps.

        The conformal shift is cross-fitted (first half of the origins corrects the second and
        vice versa) so that the score never sees its own correction.
        """
        _, actual_paths, mean_paths = self._calibration()
        history = self._fitted()
        steps = min(steps, self.max_horizon)
        actual, mean = actual_paths[:, :steps], mean_paths[:, :steps]
        raw = self._raw(level, steps)[:, :steps]
        upper = raw.copy()
        if self.conformal:
            half = len(raw) // 2
            if half >= 1:
                residual = actual - raw
                first = _column_quantile(residual[:half], level)
                second = _column_quantile(residual[half:], level)
                upper[:half] += np.nan_to_num(second)
                upper[half:] += np.nan_to_num(first)
        mean, paths = finalize(mean, {level: upper}, history.nonnegative)
        return Holdout(actual=actual, mean=mean, upper=paths[level])

    def _raw(self, level: float, steps: int) -> np.ndarray:
        """Raw quantile paths at the calibration origins for at least ``steps`` steps (cached)."""
        history = self._fitted()
        cached = self.raw_paths_.get(level)
        if cached is None or cached.shape[1] < steps:
            cached = self._raw_quantile_paths(history.filled, self._calibration()[0], steps, level)
            self.raw_paths_[level] = cached
        return cached

    def _offsets(self, level: float, horizon: int) -> np.ndarray:
        """Residual quantile per step; beyond the calibrated steps it grows like sqrt(h)."""
        if not self.conformal:
            return np.zeros(horizon)
        # Fixed once fitted, and forecast_from needs them at every refresh: computed once per level.
        if level not in self.offsets_:
            if self.actual_ is None:
                raise ValueError(f"{self.name} was slimmed for the levels {sorted(self.offsets_)}, not {level}")
            residual = self._calibration()[1] - self._raw(level, self.max_horizon)
            computed = _column_quantile(residual, level)
            # Steps without residuals (very short histories) borrow from the nearest earlier step.
            known = ~np.isnan(computed)
            self.offsets_[level] = pd.Series(computed).ffill().bfill().to_numpy() if known.any() else None
        offsets = self.offsets_[level]
        if offsets is None:
            return np.zeros(horizon)
        calibrated = len(offsets)
        if horizon <= calibrated:
            return offsets[:horizon]
        tail_steps = np.arange(calibrated + 1, horizon + 1)
        tail = offsets[-1] * np.sqrt(tail_steps / calibrated)
        return np.concatenate([offsets, tail])

    # ---- what a model held between refreshes keeps --------------------------------------------

    def slimmed(self, quantiles: Sequence[float]) -> Self:
        """A copy holding only what :meth:`forecast_history` at ``quantiles`` needs: parameters, the
        conformal offsets of those levels and the fitted grid; not the fitted history nor the
        calibration arrays selection scored (forecasts are unchanged; :meth:`predict`,
        :meth:`holdout` and other levels are not available). What a worker keeps between refreshes
        of thousands of series."""
        self._grid()
        for level in quantiles:
            self._offsets(float(level), 1)  # computed now: the calibration arrays they come from go
        slim = copy.copy(self)
        slim.history_ = None
        slim.origins_ = slim.actual_ = slim.mean_paths_ = None
        slim.raw_paths_ = {}
        kept = {float(level) for level in quantiles}
        slim.offsets_ = {level: offsets for level, offsets in self.offsets_.items() if level in kept}
        slim._slim(quantiles)
        return slim

    def _slim(self, quantiles: Sequence[float]) -> None:
        """Drop (on the copy :meth:`slimmed` made) what a subclass keeps only for the fitted data."""
        return  # the default: parameters only

    def _fitted(self) -> History:
        history: History | None = getattr(self, "history_", None)
        if history is None:
            slim = getattr(self, "grid_", None) is not None
            detail = "a slimmed model forecasts only from a series (forecast_from)" if slim else "call fit() first"
            raise RuntimeError(f"{self.name}: no fitted history: {detail}")
        return history

    def _calibration(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The calibration origins, actual values and mean paths (``[origin, step]``)."""
        if self.origins_ is None or self.actual_ is None or self.mean_paths_ is None:
            raise RuntimeError(f"{self.name}: slimmed: it holds no calibration arrays to score")
        return self.origins_, self.actual_, self.mean_paths_

    def _grid(self) -> FittedGrid:
        grid: FittedGrid | None = getattr(self, "grid_", None)
        if grid is None:
            raise RuntimeError(f"{self.name}: call fit() before forecasting")
        return grid

    def __repr__(self) -> str:
        params = ", ".join(f"{key}={value!r}" for key, value in vars(self).items() if not key.endswith("_"))
        return f"{type(self).__name__}({params})"


def _same_data(history: History, fitted: History) -> bool:
    return (
        len(history) == len(fitted)
        and history.index[0] == fitted.index[0]
        and np.array_equal(history.filled, fitted.filled)
        and np.array_equal(history.values, fitted.values, equal_nan=True)
    )


def _column_quantile(matrix: np.ndarray, level: float) -> np.ndarray:
    return nanquantile_rows(np.ascontiguousarray(matrix.T), level)
