"""Every model honours the estimator contract."""

from __future__ import annotations

import inspect
import itertools
import pickle

import numpy as np
import pandas as pd
import pytest

from forecast.registry import MODEL_NAMES, MODELS, make_model
from forecast.types import Forecast

QUANTILES = (0.1, 0.5, 0.9, 0.99)
HORIZON = 24


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_init_stores_parameters_only(name: str) -> None:
    model = MODELS[name]()
    parameters = set(inspect.signature(type(model).__init__).parameters) - {"self"}
    assert set(vars(model)) == parameters
    assert not any(key.endswith("_") for key in vars(model))


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_fit_returns_self_and_predict_is_well_formed(name: str, helios_10d: pd.Series) -> None:
    model = make_model(name, max_horizon=12, quantiles=(0.9,), seed=3)
    assert model.fit(helios_10d) is model
    forecast = model.predict(HORIZON, QUANTILES)
    assert isinstance(forecast, Forecast)
    assert forecast.model == name
    assert len(forecast.timestamps) == HORIZON == len(forecast.mean)
    assert forecast.timestamps[0] == helios_10d.index[-1] + pd.Timedelta(minutes=5)
    assert str(forecast.timestamps.tz) == "UTC"
    assert set(forecast.quantiles) == set(QUANTILES)
    for lower, upper in itertools.pairwise(QUANTILES):
        assert np.all(forecast.quantile(lower) <= forecast.quantile(upper))
    for level in (0.5, 0.9, 0.99):
        assert np.all(forecast.quantile(level) >= forecast.mean)
    assert np.all(np.isfinite(forecast.mean))
    assert np.all(forecast.quantile(0.1) >= 0)  # demand is non-negative
    forecast.validate()


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_deterministic_with_a_seed(name: str, helios_10d: pd.Series) -> None:
    first = make_model(name, max_horizon=12, quantiles=(0.9,), seed=7).fit(helios_10d).predict(12, (0.9,))
    second = make_model(name, max_horizon=12, quantiles=(0.9,), seed=7).fit(helios_10d).predict(12, (0.9,))
    np.testing.assert_array_equal(first.mean, second.mean)
    np.testing.assert_array_equal(first.quantile(0.9), second.quantile(0.9))


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_gaps_are_tolerated(name: str, helios_10d: pd.Series) -> None:
    gappy = helios_10d.copy()
    gappy.iloc[-600:-550] = np.nan
    gappy.iloc[1000:1010] = np.nan
    forecast = make_model(name, max_horizon=12, quantiles=(0.9,)).fit(gappy).predict(12, (0.9,))
    assert np.all(np.isfinite(forecast.quantile(0.9)))


def test_predict_before_fit_raises() -> None:
    with pytest.raises(RuntimeError, match="fit"):
        make_model("naive", max_horizon=3).predict(3, (0.9,))


def test_fitted_models_pickle(helios_10d: pd.Series) -> None:
    model = make_model("gbm", max_horizon=6, quantiles=(0.9,)).fit(helios_10d.iloc[-3 * 288 :])
    clone = pickle.loads(pickle.dumps(model))  # noqa: S301 - our own bytes
    np.testing.assert_array_equal(clone.predict(6, (0.9,)).mean, model.predict(6, (0.9,)).mean)


def test_naive_empirical_is_last_value_plus_change_quantile() -> None:
    index = pd.date_range("2024-01-01", periods=400, freq="5min", tz="UTC")
    values = np.cumsum(np.where(np.arange(400) % 2 == 0, 1.0, -0.5))
    series = pd.Series(values, index=index)
    model = make_model("naive_empirical", max_horizon=2).fit(series)
    forecast = model.predict(2, (0.9,))
    expected = values[-1] + np.quantile(values[1:] - values[:-1], 0.9)
    assert forecast.mean[0] == values[-1]
    assert forecast.quantile(0.9)[0] == pytest.approx(expected)
