"""Forecasting from newer data with fitted models, and one fit serving several policy quantiles."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from forecast.base import CalibratedModel
from forecast.engine import fit_select_many, fit_select_predict
from forecast.gbm import GradientBoostedQuantile
from forecast.registry import MODEL_NAMES, make_model
from forecast.smoothing import ExponentialSmoothingModel
from tests.forecast.same_forecast import assert_same_forecast

QUANTILES = (0.5, 0.9, 0.99)
STEP = pd.Timedelta(minutes=5)
QUARTER_DAY = 72  # steps


@pytest.fixture(scope="module")
def fitted(helios_10d: pd.Series) -> dict[str, CalibratedModel]:
    """Every model fitted once on the first nine and a half days (the rest is 'newer data')."""
    train = helios_10d.iloc[:-144]
    return {name: make_model(name, max_horizon=6, quantiles=(0.9,), seed=1).fit(train) for name in MODEL_NAMES}


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_forecast_from_the_fitted_series_is_predict(
    name: str, fitted: dict[str, CalibratedModel], helios_10d: pd.Series
) -> None:
    model = fitted[name]
    train = helios_10d.iloc[:-144].copy()  # equal data, another object: prepared again, same answer
    for horizon in (1, 6, 12):
        assert_same_forecast(model.forecast_from(train, horizon, QUANTILES), model.predict(horizon, QUANTILES))


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_forecast_from_newer_data_starts_after_it(
    name: str, fitted: dict[str, CalibratedModel], helios_10d: pd.Series
) -> None:
    model = fitted[name]
    before = model.predict(6, QUANTILES)
    newer = helios_10d.iloc[:-100]
    forecast = model.forecast_from(newer, 6, QUANTILES)
    assert forecast.timestamps[0] == newer.index[-1] + STEP
    assert np.all(np.isfinite(forecast.quantile(0.99)))
    if name not in ("seasonal_naive", "seasonal_naive_weekly"):  # those copy a past day, not the level
        assert not np.array_equal(forecast.mean, before.mean)
    # Fitting did not change: the model still predicts what it predicted before.
    assert_same_forecast(model.predict(6, QUANTILES), before)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_forecast_from_a_later_start_keeps_seasonal_phases(
    name: str, fitted: dict[str, CalibratedModel], helios_10d: pd.Series
) -> None:
    """A history that starts a quarter of a day later (the service's sliding window) forecasts
    nearly the same: seasonal states, profiles and calendar features follow timestamps, not positions.
    Off by a quarter-day phase, daily shapes would move by six hours."""
    model = fitted[name]
    train = helios_10d.iloc[:-144]
    later = model.forecast_from(train.iloc[QUARTER_DAY:], 6, (0.9,))
    reference = model.predict(6, (0.9,))
    assert later.timestamps.equals(reference.timestamps)
    # Only the initial state differs (forgotten over nine days); a 6-hour phase error moves the
    # Helios forecast by tens of GPUs.
    np.testing.assert_allclose(later.quantile(0.9), reference.quantile(0.9), atol=2.0)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_forecast_from_rejects_another_step(
    name: str, fitted: dict[str, CalibratedModel], helios_10d: pd.Series
) -> None:
    coarser = helios_10d.resample("10min").max()
    with pytest.raises(ValueError, match=r"fitted on a step of 0 days 00:05:00.*step of 0 days 00:10:00"):
        fitted[name].forecast_from(coarser, 6, (0.9,))


@pytest.mark.parametrize("name", ["ets", "holt_winters"])
def test_smoothing_resumes_exactly(name: str, helios_10d: pd.Series) -> None:
    """Refreshes resume the filter after the shared prefix; the states are those of a full run."""
    model = make_model(name, max_horizon=6).fit(helios_10d.iloc[:-144])
    assert isinstance(model, ExponentialSmoothingModel)
    resumed = [model.forecast_from(helios_10d.iloc[:end], 6, (0.9,)) for end in (-140, -100, -100, -20)]
    revised = helios_10d.iloc[:-20].copy()
    revised.iloc[-50] += 7.0  # a corrected observation: resume from before it
    resumed.append(model.forecast_from(revised, 6, (0.9,)))
    for forecast, series in zip(
        resumed, [helios_10d.iloc[:end] for end in (-140, -100, -100, -20)] + [revised], strict=True
    ):
        fresh = pickle.loads(pickle.dumps(model))  # noqa: S301 - our own bytes
        fresh.filter_cache_.start = pd.Timestamp(0, tz="UTC")  # nothing to resume from
        assert_same_forecast(forecast, fresh.forecast_from(series, 6, (0.9,)))


def test_selection_pickles_and_forecasts(helios_10d: pd.Series) -> None:
    train = helios_10d.iloc[:-144]
    result = fit_select_predict(train, horizon_steps=3, quantiles=(0.5, 0.9), policy_quantile=0.9, lead_steps=2)
    selection = result.selection
    assert selection.model == result.model
    assert_same_forecast(selection.forecast(train, 3, (0.5, 0.9)), result.forecast)
    clone = pickle.loads(pickle.dumps(selection))  # noqa: S301 - our own bytes
    assert_same_forecast(clone.forecast(train, 3, (0.5, 0.9)), result.forecast)
    newer = helios_10d.iloc[:-30]
    forecast = clone.forecast(newer, 3, (0.9,))
    assert forecast.timestamps[0] == newer.index[-1] + STEP
    assert_same_forecast(forecast, selection.forecast(newer, 3, (0.9,)))
    # Each member forecasts from the newer data; an ensemble is their average.
    parts = [member.forecast_from(newer, 3, (0.9,)) for member in selection.members]
    np.testing.assert_allclose(forecast.mean, np.mean([part.mean for part in parts], axis=0))


def test_an_ensemble_selection_forecasts_with_every_member(helios_10d: pd.Series) -> None:
    train = helios_10d.iloc[:-144]
    result = fit_select_predict(
        train,
        horizon_steps=3,
        quantiles=(0.9,),
        policy_quantile=0.9,
        lead_steps=2,
        candidates=("ensemble(naive+naive_empirical)",),
    )
    assert result.model == "ensemble(naive+naive_empirical)"
    assert [member.name for member in result.selection.members] == ["naive", "naive_empirical"]
    assert_same_forecast(result.selection.forecast(train, 3, (0.9,)), result.forecast)


def test_shared_fits_select_as_separate_calls(helios_10d: pd.Series) -> None:
    train, newer = helios_10d.iloc[:-144], helios_10d.iloc[:-60]
    levels = (0.8, 0.9, 0.99)
    shared = fit_select_many(train, horizon_steps=2, quantiles=(0.5,), policy_quantiles=levels, lead_steps=1)
    assert set(shared) == set(levels)
    for level in levels:
        alone = fit_select_predict(train, horizon_steps=2, quantiles=(0.5,), policy_quantile=level, lead_steps=1)
        result = shared[level]
        assert result.model == alone.model
        assert result.notes == alone.notes
        assert result.scores.keys() == alone.scores.keys()
        for name, score in alone.scores.items():
            assert {k: v for k, v in result.scores[name].items() if k != "fit_seconds"} == {
                k: v for k, v in score.items() if k != "fit_seconds"
            }
        assert_same_forecast(result.forecast, alone.forecast)
        # gbm trained every level once; each quantile's selection holds only what a fit for it has.
        assert_same_forecast(
            result.selection.forecast(newer, 2, (0.5, level)), alone.selection.forecast(newer, 2, (0.5, level))
        )


def test_shared_gbm_answers_as_a_fit_for_one_quantile(helios_10d: pd.Series) -> None:
    """gbm trains every policy level once; each quantile's selection holds only the levels a fit for
    it alone trains, so its other forecast levels come from the median plus offsets, as they would."""
    train, newer = helios_10d.iloc[:-144], helios_10d.iloc[:-60]
    carried = (0.5, 0.8, 0.9, 0.99)
    shared = fit_select_many(
        train, horizon_steps=2, quantiles=carried, policy_quantiles=(0.8, 0.99), lead_steps=1, candidates=("gbm",)
    )
    for level in (0.8, 0.99):
        alone = fit_select_predict(
            train, horizon_steps=2, quantiles=carried, policy_quantile=level, lead_steps=1, candidates=("gbm",)
        )
        (member,) = shared[level].selection.members
        assert isinstance(member, GradientBoostedQuantile)
        assert set(member.models_) == {0.5, level}
        assert_same_forecast(shared[level].forecast, alone.forecast)
        assert_same_forecast(
            shared[level].selection.forecast(newer, 2, carried), alone.selection.forecast(newer, 2, carried)
        )
