"""Gradient-boosted quantile regression on lag and calendar features (direct multi-step).

One HistGradientBoostingRegressor(loss="quantile") per quantile level predicts the change from the
value at the origin to the value ``h`` steps ahead, with ``h`` as a feature, so one model covers
every step. Quantile levels the model was not trained for come from the median plus conformal
residual quantiles, like the point models.
"""

from __future__ import annotations

import copy
import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Self, TypeAlias

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingRegressor
from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

from forecast import pinball_leaves, trees
from forecast.base import CalibratedModel
from forecast.history import History

# A fitted level: sklearn's regressor, or its trees as flat arrays once slimmed.
Trees: TypeAlias = HistGradientBoostingRegressor | trees.FlatTrees
# Training rows are capped: beyond this the fit gets slower without getting better.
MAX_TRAINING_ROWS = 8_000
MEDIAN = 0.5
# One OpenMP thread: the service runs one series per pool process, and OpenMP threads spinning on
# a busy 2-core machine made a 0.3 s fit take 30 s.
THREADS = 1


_controller: ThreadpoolController | None = None


def _one_thread() -> Any:
    """``threadpool_limits(limits=THREADS)`` without finding the loaded libraries again at each call:
    that scan reads /proc/self/maps and costs milliseconds, more than predicting a refresh's rows."""
    global _controller  # one lazily built controller per process
    if _controller is None:
        _controller = ThreadpoolController()  # after sklearn's import: its OpenMP runtime is loaded
    return _controller.limit(limits=THREADS)


def training_steps(max_horizon: int) -> np.ndarray:
    """A geometric subset of forecast steps to train on; trees interpolate between them."""
    steps = {1, 2, 3, 4, 6, 8, 12, 16, 24, 36, 48, 72, 96, 144, 192, 288}
    chosen = [*sorted(s for s in steps if s <= max_horizon), max_horizon]
    return np.unique(np.asarray(chosen, dtype=np.intp))


class FeatureBuilder:
    """Causal features for (origin, step) pairs over one filled series."""

    def __init__(self, filled: np.ndarray, index: pd.DatetimeIndex, step: pd.Timedelta) -> None:
        self.filled = filled
        self.start = index[0]
        self.step = step
        self.per_hour = max(1, int(pd.Timedelta(hours=1) // step))
        self.per_day = max(1, int(pd.Timedelta(days=1) // step))
        self.cumsum = np.concatenate([[0.0], np.cumsum(filled)])
        moves = np.abs(np.diff(filled, prepend=filled[0]))
        self.cum_moves = np.concatenate([[0.0], np.cumsum(moves)])

    def _lag(self, origins: np.ndarray, lag: int) -> np.ndarray:
        return np.asarray(self.filled[np.clip(origins - lag, 0, None)])

    def _trailing_mean(self, cumulative: np.ndarray, origins: np.ndarray, length: int) -> np.ndarray:
        first = np.clip(origins + 1 - length, 0, None)
        return np.asarray((cumulative[origins + 1] - cumulative[first]) / (origins + 1 - first))

    def build(self, origins: np.ndarray, steps: np.ndarray, max_step: int | None = None) -> np.ndarray:
        """Rows for every pair ``origins[i], steps[i]`` (equal-length arrays).

        ``max_step`` caps the step feature for steps beyond those trained on.
        """
        now = self.filled[origins]
        quarter = max(1, self.per_hour // 4)
        target = origins + steps
        seasonal_lag = self.per_day * np.ceil(steps / self.per_day).astype(np.intp)
        weekly_lag = 7 * self.per_day * np.ceil(steps / (7 * self.per_day)).astype(np.intp)
        day_ago = target - seasonal_lag
        week_ago = target - weekly_lag
        # Calendar of the target time in integer minutes since the epoch (1970-01-01 was a Thursday).
        minutes = (self.start.value + self.step.value * target) // 60_000_000_000
        minute_of_day = minutes % 1440
        day_of_week = (minutes // 1440 + 3) % 7
        columns = [
            np.minimum(steps, max_step if max_step else steps.max()).astype(np.float64),
            now - self._lag(origins, 1),
            now - self._lag(origins, quarter),
            now - self._lag(origins, self.per_hour),
            now - self._trailing_mean(self.cumsum, origins, self.per_hour),
            now - self._trailing_mean(self.cumsum, origins, self.per_day),
            self._trailing_mean(self.cum_moves, origins, 4 * self.per_hour),
            np.where(day_ago >= 0, self.filled[np.clip(day_ago, 0, None)] - now, np.nan),
            np.where(week_ago >= 0, self.filled[np.clip(week_ago, 0, None)] - now, np.nan),
            minute_of_day.astype(np.float64),
            day_of_week.astype(np.float64),
        ]
        return np.asarray(np.column_stack(columns), dtype=np.float64)


@dataclass
class RecentPaths:
    """Predictions from the newest origin of the latest series, by (level, horizon, origin).

    Shared by a fitted model and the copies that serve single policy quantiles (``for_quantiles``)
    or newer series (``forecast_from``): each policy quantile's forecast needs the median path, and
    they all forecast from the same series at each refresh, so the median is predicted once.
    """

    # The series predicted from, not kept alive by the cache (a worker holds thousands of models
    # between refreshes, each series as long as the history); a dead reference matches no array,
    # so the identity of a freed series cannot be mistaken for a new one's.
    source: weakref.ReferenceType[np.ndarray] | None = None
    start: pd.Timestamp | None = None
    paths: dict[tuple[float, int, int], np.ndarray] = field(default_factory=dict)

    def holds(self, filled: np.ndarray, start: pd.Timestamp) -> bool:
        """Whether the cached paths were predicted from ``filled`` starting at ``start``."""
        return self.source is not None and self.source() is filled and self.start == start

    def __getstate__(self) -> dict[str, object]:
        return {"source": None, "start": None, "paths": {}}  # a reference does not pickle; the cache need not


class GradientBoostedQuantile(CalibratedModel):
    name = "gbm"

    def __init__(
        self,
        *,
        levels: Sequence[float] = (MEDIAN, 0.9),
        max_iter: int = 80,
        learning_rate: float = 0.1,
        max_leaf_nodes: int = 15,
        min_samples_leaf: int = 40,
        max_horizon: int = 36,
        calibration_days: float = 2.0,
        seed: int = 0,
    ) -> None:
        super().__init__(max_horizon=max_horizon, calibration_days=calibration_days, seed=seed)
        self.levels = tuple(levels)
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf

    @classmethod
    def min_history(cls, steps_per_day: int) -> int:
        return 2 * steps_per_day

    def _fit_params(self, history: History, end: int) -> None:
        built = FeatureBuilder(history.filled, history.index, history.step)
        self.features_: FeatureBuilder | None = built
        steps = training_steps(self.max_horizon)
        first = min(history.steps_per_hour * 4, max(1, end // 4))
        origin_count = max(1, end - first)
        stride = max(1, math.ceil(origin_count * len(steps) / MAX_TRAINING_ROWS))
        origins = np.arange(end - 1 - int(steps.min()), first - 1, -stride)[::-1]
        pair_origins = np.repeat(origins, len(steps))
        pair_steps = np.tile(steps, len(origins))
        target = pair_origins + pair_steps
        # Targets stay before ``end`` (no peeking into calibration) and on observed values only.
        keep = (target < end) & ~np.isnan(history.values[np.minimum(target, len(history) - 1)])
        keep &= ~np.isnan(history.values[pair_origins])
        pair_origins, pair_steps = pair_origins[keep], pair_steps[keep]
        if len(pair_origins) < 4 * self.min_samples_leaf:
            raise ValueError(f"gbm: only {len(pair_origins)} training rows")
        features = built.build(pair_origins, pair_steps)
        # A feature with no value at all (e.g. the week-ago lag on a short history) cannot be binned.
        self.columns_ = np.flatnonzero(~np.all(np.isnan(features), axis=0))
        features = features[:, self.columns_]
        change = history.filled[pair_origins + pair_steps] - history.filled[pair_origins]
        levels = sorted({MEDIAN, *self.levels})
        with _one_thread(), pinball_leaves.fast_leaf_updates():
            trained = self._train(features, change, levels)
        self.models_: dict[float, Trees] = dict(trained)

    def _train(
        self, features: np.ndarray, change: np.ndarray, levels: Sequence[float]
    ) -> dict[float, HistGradientBoostingRegressor]:
        return {
            level: HistGradientBoostingRegressor(
                loss="quantile",
                quantile=level,
                max_iter=self.max_iter,
                learning_rate=self.learning_rate,
                max_leaf_nodes=self.max_leaf_nodes,
                min_samples_leaf=self.min_samples_leaf,
                early_stopping=False,
                random_state=self.seed,
            ).fit(features, change)
            for level in levels
        }

    def fit_history(self, history: History) -> Self:
        self.recent_ = RecentPaths()
        return super().fit_history(history)

    def _rebase(self, history: History, offset: int) -> None:
        # Lags and the calendar (counted from the series' first timestamp) come from the new series.
        self.features_ = FeatureBuilder(history.filled, history.index, history.step)

    def _predict_level(self, filled: np.ndarray, origins: np.ndarray, horizon: int, level: float) -> np.ndarray:
        features = self.features_
        if features is None or features.filled is not filled:
            features = FeatureBuilder(filled, self._fitted().index, self._fitted().step)
        if len(origins) > 1:
            # Calibration origins (at fit): computed once and kept by the caller (mean_paths_,
            # raw_paths_); caching them too would double what every held model costs in memory.
            return self._predict_paths(features, filled, origins, horizon, level)
        recent = self.recent_
        if not recent.holds(filled, features.start):
            recent.source, recent.start, recent.paths = weakref.ref(filled), features.start, {}
        key = (level, horizon, int(origins[0]))
        if key not in recent.paths:
            recent.paths[key] = self._predict_paths(features, filled, origins, horizon, level)
        return recent.paths[key].copy()  # callers own what they get; the cache keeps its own

    def _predict_paths(
        self, features: FeatureBuilder, filled: np.ndarray, origins: np.ndarray, horizon: int, level: float
    ) -> np.ndarray:
        pair_origins = np.repeat(origins, horizon)
        pair_steps = np.tile(np.arange(1, horizon + 1), len(origins))
        rows = features.build(pair_origins, pair_steps, self.max_horizon)[:, self.columns_]
        with _one_thread():
            change = trees.predict(self.models_[level], rows)  # sklearn's predict, faster for a few rows
        return np.asarray(filled[origins][:, None] + change.reshape(len(origins), horizon))

    def _mean_paths(self, filled: np.ndarray, origins: np.ndarray, horizon: int) -> np.ndarray:
        return self._predict_level(filled, origins, horizon, MEDIAN)

    def _raw_quantile_paths(self, filled: np.ndarray, origins: np.ndarray, horizon: int, level: float) -> np.ndarray:
        if level in self.models_:
            return self._predict_level(filled, origins, horizon, level)
        return self._mean_paths(filled, origins, horizon)

    def _slim(self, quantiles: Sequence[float]) -> None:
        # The trees as flat arrays (a third of a fitted regressor's memory, the same answers: checked
        # against sklearn's predict); features of the fitted history and paths predicted from it go.
        self.models_ = {level: _flat_or_kept(model) for level, model in self.models_.items()}
        self.features_ = None
        self.recent_ = RecentPaths()

    def for_quantiles(self, quantiles: Sequence[float]) -> GradientBoostedQuantile:
        # Each level is an independent regressor, so dropping levels leaves exactly what a fit for
        # ``quantiles`` alone trains; untrained levels then come from the median plus conformal
        # offsets, as they would have. Caches for dropped levels would answer differently: dropped.
        kept = {MEDIAN, *(float(level) for level in quantiles)}
        if kept >= set(self.models_):
            return self
        view = copy.copy(self)
        view.levels = (MEDIAN, *quantiles)
        view.models_ = {level: model for level, model in self.models_.items() if level in kept}
        view.raw_paths_ = {level: paths for level, paths in self.raw_paths_.items() if level in kept}
        view.offsets_ = {level: offsets for level, offsets in self.offsets_.items() if level in kept}
        return view


def _flat_or_kept(model: Trees) -> Trees:
    """``model``'s trees flattened, or ``model`` itself when they cannot be flattened exactly."""
    if isinstance(model, trees.FlatTrees):
        return model
    return trees.flatten(model) or model
