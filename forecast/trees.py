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
    """Every tree's nodes in one set of arrays; child indices point into the same arrays.

    About 19 bytes a node (a fitted regressor keeps about 60 in sklearn's predictor records, plus
    its binning): a worker holds the trees of thousands of series between refreshes.
    """

    roots: np.ndarray  # int32: each tree's first node
    feature: np.ndarray  # int16
    # The split threshold of an inner node, the value of a leaf: a node is one or the other.
    split: np.ndarray  # float64, as sklearn compares and adds
    left: np.ndarray  # int32; a leaf's children are itself, so a walk that reaches it stays there
    right: np.ndarray  # int32
    missing_left: np.ndarray  # bool
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
            left = np.where(np.isnan(values), self.missing_left[node], values <= self.split[node])
            node = np.where(left, self.left[node], self.right[node])
        # Sequential sums from the baseline (cumsum adds in order), as sklearn's raw prediction does.
        terms = np.vstack([np.full((1, count), self.baseline), self.split[node]])
        return np.asarray(np.cumsum(terms, axis=0)[-1])


_flat: weakref.WeakKeyDictionary[Any, FlatTrees | None] = weakref.WeakKeyDictionary()


def flatten(model: Any) -> FlatTrees | None:
    """The regressor's trees as flat arrays, or None when it cannot be done exactly."""
    try:
        if model.n_trees_per_iteration_ != 1 or model.is_categorical_ is not None:
            return None
        trees = [iteration[0].nodes for iteration in model._predictors]
        sizes = np.array([len(nodes) for nodes in trees], dtype=np.int32)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int32)
        nodes = np.concatenate(trees)
        if len(nodes) >= np.iinfo(np.int32).max or int(model.n_features_in_) > np.iinfo(np.int16).max:
            return None
        shift = np.repeat(starts, sizes)
        leaf = nodes["is_leaf"].astype(bool)
        # Leaves' children are 0 in sklearn: point them at themselves so the walk stays put.
        own = np.arange(len(nodes), dtype=np.int32)
        baseline = np.asarray(model._baseline_prediction, dtype=np.float64).reshape(-1)
        flat = FlatTrees(
            roots=starts,
            feature=nodes["feature_idx"].astype(np.int16),
            split=np.where(leaf, nodes["value"], nodes["num_threshold"]).astype(np.float64),
            left=np.where(leaf, own, nodes["left"].astype(np.int32) + shift).astype(np.int32),
            right=np.where(leaf, own, nodes["right"].astype(np.int32) + shift).astype(np.int32),
            missing_left=nodes["missing_go_to_left"].astype(bool),
            baseline=float(baseline[0]),
            depth=int(nodes["depth"].max()),
            features=int(model.n_features_in_),
        )
        # Check against sklearn on rows that reach many leaves, NaN included.
        rng = np.random.default_rng(0)
        thresholds = flat.split[~leaf]
        probe = rng.choice(thresholds, size=(32, flat.features)) if len(thresholds) else None
        if probe is not None:
            probe[::5, 0] = np.nan
            probe += rng.choice([-1e-9, 0.0, 1e-9], size=probe.shape)
            if not np.array_equal(flat.predict(probe), np.asarray(model.predict(probe), dtype=np.float64)):
                return None
    except (AttributeError, KeyError, IndexError, TypeError, ValueError):
        return None
    return flat


def predict(model: Any, rows: np.ndarray) -> np.ndarray:
    """``model.predict(rows)``, exactly, without sklearn's per-call cost for a few rows.

    ``model`` is a fitted regressor or its :func:`flatten`ed trees (which answer any number of rows).
    """
    if isinstance(model, FlatTrees):
        if rows.shape[1] != model.features:
            raise ValueError(f"the trees were fitted on {model.features} features, the rows have {rows.shape[1]}")
        return model.predict(np.asarray(rows, dtype=np.float64))
    if len(rows) > MAX_ROWS:
        return np.asarray(model.predict(rows), dtype=np.float64)
    if model not in _flat:
        _flat[model] = flatten(model)
    flat = _flat[model]
    if flat is None or rows.shape[1] != flat.features:
        return np.asarray(model.predict(rows), dtype=np.float64)
    return flat.predict(np.asarray(rows, dtype=np.float64))
