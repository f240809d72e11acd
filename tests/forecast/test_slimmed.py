"""What a worker holds between refreshes: a slimmed model forecasts exactly as the fitted one, and
holds neither the fitted history nor the calibration arrays nor sklearn's regressors."""

from __future__ import annotations

import gc
import pickle
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import HistGradientBoostingRegressor

from forecast import trees
from forecast.base import CalibratedModel, model_history
from forecast.engine import fit_select_predict
from forecast.gbm import GradientBoostedQuantile
from forecast.registry import MODEL_NAMES, make_model
from tests.forecast.same_forecast import assert_same_forecast

QUANTILES = (0.9,)


@pytest.fixture(scope="module")
def train(helios_10d: pd.Series) -> pd.Series:
    return helios_10d.iloc[:-144]


@pytest.fixture(scope="module")
def fitted(train: pd.Series) -> dict[str, CalibratedModel]:
    return {name: make_model(name, max_horizon=6, quantiles=QUANTILES, seed=1).fit(train) for name in MODEL_NAMES}


def _refreshes(helios_10d: pd.Series) -> list[pd.Series]:
    """The series a held model forecasts from at successive refreshes: the fitted one, then newer
    ones (growing, and sliding a window as the service's lookback does)."""
    train = helios_10d.iloc[:-144]
    return [train, helios_10d.iloc[:-100], helios_10d.iloc[:-99], helios_10d.iloc[50:-60], helios_10d.iloc[50:]]


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_a_slimmed_model_forecasts_exactly_as_the_fitted_one(
    name: str, fitted: dict[str, CalibratedModel], helios_10d: pd.Series
) -> None:
    model = fitted[name]
    slim = model.slimmed(QUANTILES)
    for series in _refreshes(helios_10d):
        for horizon in (2, 6, 9):  # within and beyond the calibrated steps
            assert_same_forecast(
                slim.forecast_from(series, horizon, QUANTILES), model.forecast_from(series, horizon, QUANTILES)
            )


def _arrays(value: Any, seen: set[int] | None = None) -> list[np.ndarray]:
    """Every numpy array reachable from ``value`` through attributes, dataclass fields and containers."""
    seen = set() if seen is None else seen
    if id(value) in seen or isinstance(value, str | bytes | int | float | bool | type(None)):
        return []
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, pd.Index | pd.Series):
        return [np.asarray(value)]
    if isinstance(value, dict):
        children = [*value.keys(), *value.values()]
    elif isinstance(value, list | tuple | set | frozenset):
        children = list(value)
    else:
        children = list(getattr(value, "__dict__", {}).values())
    return [array for child in children for array in _arrays(child, seen)]


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_a_slimmed_model_holds_no_array_as_long_as_its_history(
    name: str, fitted: dict[str, CalibratedModel], train: pd.Series
) -> None:
    model = fitted[name]
    length = len(model_history(train))
    assert any(length in array.shape for array in _arrays(model))  # the fitted model does
    slim = model.slimmed(QUANTILES)
    held = _arrays(slim)
    assert not [array.shape for array in held if {length - 1, length, length + 1} & set(array.shape)]
    assert (slim.history_, slim.origins_, slim.actual_, slim.mean_paths_) == (None, None, None, None)
    assert slim.raw_paths_ == {}
    assert len(pickle.dumps(slim)) < len(pickle.dumps(model)) / 2


def test_a_slimmed_gbm_holds_flat_trees_not_sklearns_regressors(
    fitted: dict[str, CalibratedModel], helios_10d: pd.Series
) -> None:
    model = fitted["gbm"]
    assert isinstance(model, GradientBoostedQuantile)
    slim = model.slimmed(QUANTILES)
    assert set(slim.models_) == set(model.models_) == {0.5, 0.9}
    assert all(isinstance(level, trees.FlatTrees) for level in slim.models_.values())
    assert all(isinstance(level, HistGradientBoostingRegressor) for level in model.models_.values())
    # Flat trees answer any number of rows, as sklearn does (a refresh asks for a few).
    rows = np.random.default_rng(5).normal(0, 3, size=(200, slim.models_[0.5].features))
    rows[::9, 2] = np.nan
    for level, regressor in model.models_.items():
        np.testing.assert_array_equal(trees.predict(slim.models_[level], rows), regressor.predict(rows))
    with pytest.raises(ValueError, match=r"the trees were fitted on \d+ features, the rows have 3"):
        trees.predict(slim.models_[0.5], rows[:, :3])


def test_a_slimmed_model_refuses_what_it_cannot_answer(fitted: dict[str, CalibratedModel], train: pd.Series) -> None:
    slim = fitted["ets"].slimmed(QUANTILES)
    with pytest.raises(ValueError, match=r"ets was slimmed for the levels \[0.9\], not 0.5"):
        slim.forecast_from(train, 3, (0.5, 0.9))
    with pytest.raises(RuntimeError, match="ets: no fitted history: a slimmed model forecasts only from a series"):
        slim.predict(3, QUANTILES)
    with pytest.raises(RuntimeError, match="ets: slimmed: it holds no calibration arrays to score"):
        slim.holdout(0.9, 2)
    with pytest.raises(ValueError, match="ets was fitted on a step of 0 days 00:05:00, the series has a step of"):
        slim.forecast_from(train.resample("10min").mean(), 3, QUANTILES)


def test_a_slimmed_selection_forecasts_as_the_selection(helios_10d: pd.Series) -> None:
    train = helios_10d.iloc[:-144]
    result = fit_select_predict(train, horizon_steps=3, quantiles=(0.9,), policy_quantile=0.9, lead_steps=2)
    assert result.selection is not None
    slim = result.selection.slimmed((0.9,))
    assert (slim.model, slim.nonnegative) == (result.selection.model, result.selection.nonnegative)
    for series in _refreshes(helios_10d):
        assert_same_forecast(slim.forecast(series, 3, (0.9,)), result.selection.forecast(series, 3, (0.9,)))


def test_gbm_caches_its_paths_without_keeping_the_series_alive(
    fitted: dict[str, CalibratedModel], helios_10d: pd.Series
) -> None:
    slim = fitted["gbm"].slimmed(QUANTILES)
    assert isinstance(slim, GradientBoostedQuantile)
    newer = helios_10d.iloc[:-100]
    first = slim.forecast_from(newer, 3, QUANTILES)
    gc.collect()
    assert slim.recent_.paths  # the newest origin's paths, for the next quantile of the same refresh
    assert slim.recent_.source is not None and slim.recent_.source() is None  # the series it saw is gone
    assert_same_forecast(slim.forecast_from(newer, 3, QUANTILES), first)
    assert pickle.loads(pickle.dumps(slim)).recent_.paths == {}  # noqa: S301 (pickled just above)
