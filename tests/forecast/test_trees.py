"""The fast few-row tree walk answers exactly as sklearn's predict."""

from __future__ import annotations

import numpy as np
import pandas as pd

from forecast import trees
from forecast.gbm import GradientBoostedQuantile


def test_flat_trees_predict_exactly_as_sklearn(helios_10d: pd.Series) -> None:
    model = GradientBoostedQuantile(levels=(0.5, 0.9), max_horizon=12).fit(helios_10d)
    rng = np.random.default_rng(3)
    origins = rng.integers(100, len(helios_10d) - 1, 48)
    steps = rng.integers(1, 13, 48)
    rows = model.features_.build(origins, steps, 12)[:, model.columns_]
    rows[::7, 3] = np.nan  # missing values take each node's learnt side
    for regressor in model.models_.values():
        assert trees.flatten(regressor) is not None  # sklearn's internals are as expected
        for count in (1, 2, 5, 48):
            np.testing.assert_array_equal(trees.predict(regressor, rows[:count]), regressor.predict(rows[:count]))
