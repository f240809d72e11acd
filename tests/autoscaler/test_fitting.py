"""The worker side of a refresh without held models: the model chosen earlier (by this refresher
before a worker restart, or by a shard's previous owner) is refitted, not selected again; a model
this version does not know is selected again, and the forecast says so."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from autoscaler.refresh import fitting
from autoscaler.refresh.fitting import WorkRequest, work_in_worker
from tests.autoscaler.test_publication import Clock, TraceSource


@pytest.fixture(autouse=True)
def no_held_models():
    """Fitted models stay in the (here: this) process; none may leak into other tests."""
    yield
    fitting._HELD.clear()


@pytest.fixture
def history():
    source = TraceSource()
    return source.replay.history(Clock().now, timedelta(days=3)).series


def request(series, work, model, scope):
    key = ("gpus", (("pool", "earth"),))
    return WorkRequest(scope=scope, key=key, series=series, lead_steps=2, quantiles=(0.9,), work=work, model=model)


@pytest.mark.parametrize("asked", ["update", "refit"])
def test_without_held_models_the_chosen_model_is_refitted(history, asked):
    result = work_in_worker(request(history, asked, "seasonal_naive", scope=f"refit-{asked}"))
    assert (result.work, result.engine.model) == ("refit", "seasonal_naive")
    assert set(result.engine.scores) == {"seasonal_naive"}  # one candidate fitted, not the whole selection


def test_an_ensemble_is_refitted_from_its_members(history):
    result = work_in_worker(request(history, "update", "ensemble(naive+naive_empirical)", scope="ensemble"))
    assert (result.work, result.engine.model) == ("refit", "ensemble(naive+naive_empirical)")


@pytest.mark.parametrize("model", ["prophet", "ensemble(naive+prophet)"])
def test_a_model_this_version_does_not_know_is_selected_again(history, model):
    result = work_in_worker(request(history, "update", model, scope=f"unknown-{model}"))
    assert result.work == "select"
    assert len(result.engine.scores) > 2  # every candidate was scored
    assert f"model {model!r} is not known to this version; selected again" in result.engine.notes


def test_a_worker_holds_slimmed_models_that_forecast_as_the_fit_did(history):
    fitted = work_in_worker(request(history, "refit", "ensemble(ets+gbm)", scope="slim"))
    held = fitting.held_models("slim")[("gpus", (("pool", "earth"),))]
    assert [type(member).name for member in held.selection.members] == ["ets", "gbm"]
    # Neither the fitted history nor the calibration arrays stay in the worker.
    assert all(member.history_ is None and member.actual_ is None for member in held.selection.members)
    updated = work_in_worker(request(history, "update", "ensemble(ets+gbm)", scope="slim"))
    assert updated.work == "update"
    assert updated.engine.forecast.timestamps.equals(fitted.engine.forecast.timestamps)
    assert updated.engine.forecast.quantile(0.9).tolist() == fitted.engine.forecast.quantile(0.9).tolist()
    assert updated.engine.forecast.mean.tolist() == fitted.engine.forecast.mean.tolist()


def test_held_models_asked_for_a_level_they_were_not_kept_for_are_selected_again(history):
    work_in_worker(request(history, "refit", "ets", scope="new-level"))
    other_level = replace(request(history, "update", "ets", scope="new-level"), quantiles=(0.8,))
    result = work_in_worker(other_level)
    assert result.work == "select"
    assert (
        "held models could not forecast (ValueError: ets was slimmed for the levels [0.9], not 0.8); selected again"
        in result.engine.notes
    )
