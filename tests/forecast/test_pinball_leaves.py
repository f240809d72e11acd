"""Quantile-loss boosting's leaf values, all leaves at once, are numpy's percentiles bit for bit."""

from __future__ import annotations

import contextlib

import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.ensemble._hist_gradient_boosting import gradient_boosting

from forecast import pinball_leaves
from forecast.gbm import GradientBoostedQuantile


@pytest.mark.parametrize("quantile", [0.5, 0.9, 0.99, 0.1, 0.75, 0.999, 1.0, 0.0])
def test_leaf_quantiles_equal_numpy_percentile_exactly(quantile: float) -> None:
    rng = np.random.default_rng(7)
    for trial in range(300):
        count = int(rng.integers(1, 80))
        residuals = rng.normal(size=count) * rng.choice([1.0, 1e-9, 1e9])
        if trial % 3 == 0:
            residuals = np.round(residuals, 1)  # ties, as integer GPU counts give
        cuts = np.sort(rng.choice(np.arange(1, count), size=min(4, count - 1), replace=False)) if count > 1 else []
        leaves = np.split(rng.permutation(count), cuts)
        expected = np.array([np.percentile(residuals[leaf], 100 * quantile, axis=0) for leaf in leaves])
        np.testing.assert_array_equal(pinball_leaves.leaf_quantiles(residuals, leaves, quantile), expected)


def test_the_patch_is_scoped_to_the_block() -> None:
    before = gradient_boosting._update_leaves_values
    with pinball_leaves.fast_leaf_updates():
        assert gradient_boosting._update_leaves_values is pinball_leaves._update_leaves_values
    assert gradient_boosting._update_leaves_values is before
    with pytest.raises(RuntimeError), pinball_leaves.fast_leaf_updates():
        raise RuntimeError("a failing fit")
    assert gradient_boosting._update_leaves_values is before


def _nodes(model: GradientBoostedQuantile) -> dict[float, list[np.ndarray]]:
    return {level: [tree[0].nodes for tree in regressor._predictors] for level, regressor in model.models_.items()}


def test_gbm_trees_are_identical_to_scikit_learns_own_leaf_updates(
    helios_10d: pd.Series, monkeypatch: pytest.MonkeyPatch
) -> None:
    batched: list[int] = []
    leaf_quantiles = pinball_leaves.leaf_quantiles

    def counted(residuals: np.ndarray, leaves: list[np.ndarray], quantile: float) -> np.ndarray:
        batched.append(len(leaves))
        return leaf_quantiles(residuals, leaves, quantile)

    monkeypatch.setattr(pinball_leaves, "leaf_quantiles", counted)
    fast = GradientBoostedQuantile(levels=(0.5, 0.9, 0.99), max_horizon=12).fit(helios_10d)
    assert len(batched) == 3 * fast.max_iter  # every tree of every level took the batched path
    monkeypatch.setattr(pinball_leaves, "fast_leaf_updates", contextlib.nullcontext)
    reference = GradientBoostedQuantile(levels=(0.5, 0.9, 0.99), max_horizon=12).fit(helios_10d)
    assert len(batched) == 3 * fast.max_iter
    assert set(_nodes(fast)) == {0.5, 0.9, 0.99}
    for level, trees in _nodes(fast).items():
        for fast_nodes, reference_nodes in zip(trees, _nodes(reference)[level], strict=True):
            np.testing.assert_array_equal(fast_nodes, reference_nodes)


def test_other_losses_take_scikit_learns_path_inside_the_block() -> None:
    rng = np.random.default_rng(1)
    features, target = rng.normal(size=(600, 3)), rng.normal(size=600)
    weights = rng.uniform(0.5, 2.0, size=600)

    def fitted(loss: str, sample_weight: np.ndarray | None) -> np.ndarray:
        regressor = HistGradientBoostingRegressor(
            loss=loss, quantile=0.9 if loss == "quantile" else None, max_iter=10, early_stopping=False, random_state=0
        )
        return np.asarray(regressor.fit(features, target, sample_weight=sample_weight).predict(features))

    cases = [("absolute_error", None), ("quantile", weights)]  # not an unweighted pinball loss
    outside = [fitted(loss, weight) for loss, weight in cases]
    with pinball_leaves.fast_leaf_updates():
        inside = [fitted(loss, weight) for loss, weight in cases]
    for before, after in zip(outside, inside, strict=True):
        np.testing.assert_array_equal(before, after)
