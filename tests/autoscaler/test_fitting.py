"""The worker side of a refresh without held models: the model chosen earlier (by this refresher
before a worker restart, or by a shard's previous owner) is refitted, not selected again; a model
this version does not know is selected again, and the forecast says so."""

from __future__ import annotations

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
