"""Prediction of a fitted ``HistGradientBoostingRegressor`` for a handful of rows, at numpy speed.

sklearn's ``predict`` costs about a millisecond per call whatever the number of rows: input
validation, then one OpenMP-parallel pass per tree. A refresh between fits predicts two rows per
quantile level, many thousand times over a simulated month. Here every tree is walked at once (one
numpy step per tree level) and the leaf values are added in sklearn's order, starting from its
baseline, so the result is bit-identical. The flat arrays come from sklearn's fitted predictors (not
a public API): each flattening is checked against sklearn's own ``predict`` and a model whose check
fails (or whose internals look different) keeps using ``predict``.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

# Above this many rows sklearn's parallel traversal is as fast (calibration predicts hundreds).
MAX_ROWS = 64


@dataclass(frozen=True)
class FlatTrees:
    """Every tree's nodes in one set of arrays; child indices point into the same arrays."""

    roots: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    missing_left: np.ndarray
    leaf: np.ndarray
    value: np.ndarray
    baseline: float
    depth: int
    features: int

    def predict(self, rows: np.ndarray) -> np.ndarray:
        count = len(rows)
        node = np.repeat(self.roots[:, None], count, axis=1)  # [tree, row]
        columns = np.arange(count)[None, :]
        for _ in range(self.depth):
            values = rows[columns, self.feature[node]]
            # sklearn: NaN follows missing_go_to_left, otherwise x <= threshold goes left.
            left = np.where(np.isnan(values), self.missing_left[node], values <= self.threshold[node])
            node = np.where(self.leaf[node], node, np.where(left, self.left[node], self.right[node]))
        # Sequential sums from the baseline (cumsum adds in order), as sklearn's raw prediction does.
        terms = np.vstack([np.full((1, count), self.baseline), self.value[node]])
        return np.asarray(np.cumsum(terms, axis=0)[-1])


_flat: weakref.WeakKeyDictionary[Any, FlatTrees | None] = weakref.WeakKeyDictionary()


def _flatten(model: Any) -> FlatTrees | None:
    """The regressor's trees as flat arrays, or None when it cannot be done exactly."""
    try:
        if model.n_trees_per_iteration_ != 1 or model.is_categorical_ is not None:
            return None
        trees = [iteration[0].nodes for iteration in model._predictors]
        sizes = np.array([len(nodes) for nodes in trees], dtype=np.intp)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.intp)
        nodes = np.concatenate(trees)
        shift = np.repeat(starts, sizes)
        baseline = np.asarray(model._baseline_prediction, dtype=np.float64).reshape(-1)
        flat = FlatTrees(
            roots=starts,
            feature=nodes["feature_idx"].astype(np.intp),
            threshold=nodes["num_threshold"].astype(np.float64),
            left=nodes["left"].astype(np.intp) + shift,
            right=nodes["right"].astype(np.intp) + shift,
            missing_left=nodes["missing_go_to_left"].astype(bool),
            leaf=nodes["is_leaf"].astype(bool),
            value=nodes["value"].astype(np.float64),
            baseline=float(baseline[0]),
            depth=int(nodes["depth"].max()),
            features=int(model.n_features_in_),
        )
        # Leaves' children are 0 in sklearn: point them at themselves so the walk stays put.
        own = np.arange(len(nodes), dtype=np.intp)
        flat.left[flat.leaf] = own[flat.leaf]
        flat.right[flat.leaf] = own[flat.leaf]
        # Check against sklearn on rows that reach many leaves, NaN included.
        rng = np.random.default_rng(0)
        probe = rng.choice(flat.threshold[~flat.leaf], size=(32, flat.features)) if (~flat.leaf).any() else None
        if probe is not None:
            probe[::5, 0] = np.nan
            probe += rng.choice([-1e-9, 0.0, 1e-9], size=probe.shape)
            if not np.array_equal(flat.predict(probe), np.asarray(model.predict(probe), dtype=np.float64)):
                return None
    except (AttributeError, KeyError, IndexError, TypeError, ValueError):
        return None
    return flat


def predict(model: Any, rows: np.ndarray) -> np.ndarray:
    """``model.predict(rows)``, exactly, without sklearn's per-call cost for a few rows."""
    if len(rows) > MAX_ROWS:
        return np.asarray(model.predict(rows), dtype=np.float64)
    if model not in _flat:
        _flat[model] = _flatten(model)
    flat = _flat[model]
    if flat is None or rows.shape[1] != flat.features:
        return np.asarray(model.predict(rows), dtype=np.float64)
    return flat.predict(np.asarray(rows, dtype=np.float64))
