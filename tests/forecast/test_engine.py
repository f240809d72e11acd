"""Selection, fallback and the process-pool entry point."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from forecast.base import Holdout
from forecast.engine import EngineResult, fit_select_predict
from forecast.ensemble import confidence_set
from forecast.gbm import GradientBoostedQuantile
from forecast.history import History
from forecast.smoothing import ExponentialSmoothingModel


def _run(series: pd.Series, **overrides: object) -> EngineResult:
    arguments: dict[str, object] = {
        "horizon_steps": 12,
        "quantiles": (0.5, 0.9),
        "policy_quantile": 0.9,
        "lead_steps": 12,
    }
    arguments.update(overrides)
    return fit_select_predict(series, **arguments)  # type: ignore[arg-type]


def test_selects_by_pinball_and_reports_scores(helios_10d: pd.Series) -> None:
    result = _run(helios_10d)
    assert result.model in result.scores
    singles = {name: score for name, score in result.scores.items() if not name.startswith("ensemble(")}
    best = min(singles, key=lambda name: singles[name]["pinball"])
    # The best model predicts, alone or averaged with the models not clearly worse than it.
    assert result.model == best or (result.model.startswith("ensemble(") and best in result.model)
    assert set(result.scores[result.model]) == {"pinball", "mae", "coverage", "under_provision_rate", "fit_seconds"}
    assert len(result.forecast.mean) == 12
    assert np.all(result.forecast.quantile(0.9) >= result.forecast.mean)
    assert result.fit_seconds > 0


def test_result_pickles_for_the_process_pool(helios_10d: pd.Series) -> None:
    result = _run(helios_10d.iloc[-3 * 288 :], candidates=("naive", "naive_empirical"))
    clone = pickle.loads(pickle.dumps(result))  # noqa: S301 - our own bytes
    assert clone.model == result.model
    np.testing.assert_array_equal(clone.forecast.mean, result.forecast.mean)


def test_failing_model_falls_back_to_seasonal_naive(helios_10d: pd.Series, monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(self: GradientBoostedQuantile, history: History) -> GradientBoostedQuantile:
        raise RuntimeError("boom")

    monkeypatch.setattr(GradientBoostedQuantile, "fit_history", explode)
    result = _run(helios_10d, candidates=("gbm",))
    assert result.model == "seasonal_naive"
    assert any("gbm failed: RuntimeError: boom" in note for note in result.notes)
    assert any("fell back to seasonal_naive" in note for note in result.notes)


def test_failing_model_is_dropped_from_selection(helios_10d: pd.Series, monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(self: GradientBoostedQuantile, history: History) -> GradientBoostedQuantile:
        raise RuntimeError("boom")

    monkeypatch.setattr(GradientBoostedQuantile, "fit_history", explode)
    result = _run(helios_10d, candidates=("naive", "gbm"))
    assert result.model == "naive"
    assert "gbm" not in result.scores


def test_time_budget_overrun_falls_back(helios_10d: pd.Series) -> None:
    result = _run(helios_10d, candidates=("ets",), time_budget_s=0.0)
    assert result.model == "seasonal_naive"
    assert any("ets exceeded the time budget" in note for note in result.notes)


def test_prediction_failure_tries_the_next_model(helios_10d: pd.Series, monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(self: ExponentialSmoothingModel, horizon: int, quantiles: object) -> object:
        raise ValueError("no")

    monkeypatch.setattr(ExponentialSmoothingModel, "predict", explode)
    result = _run(helios_10d, candidates=("ets",))
    assert result.model == "seasonal_naive"
    assert any("ets failed to predict" in note for note in result.notes)


def test_short_history_uses_only_valid_models(helios_10d: pd.Series) -> None:
    result = _run(helios_10d.iloc[-200:])
    assert any("short history" in note for note in result.notes)
    assert not {"seasonal_naive", "holt_winters", "mstl", "seasonal_naive_weekly"} & set(result.scores)
    assert result.model in {"naive", "naive_empirical", "ets"}


def test_short_history_fallback_is_naive(helios_10d: pd.Series) -> None:
    result = _run(helios_10d.iloc[-100:], candidates=("holt_winters",))
    assert result.model == "naive"


def test_rejects_unusable_input() -> None:
    index = pd.date_range("2024-01-01", periods=3, freq="5min", tz="UTC")
    with pytest.raises(ValueError, match="two observed"):
        _run(pd.Series([np.nan, 1.0, np.nan], index=index))
    with pytest.raises(ValueError, match="unknown model"):
        _run(pd.Series([1.0, 2.0, 3.0], index=index), candidates=("prophet",))
    with pytest.raises(ValueError, match="tz-aware"):
        _run(pd.Series([1.0, 2.0, 3.0], index=index.tz_localize(None)))


def test_forecast_package_stays_pure() -> None:
    import subprocess
    import sys

    code = (
        "import sys, forecast.engine, forecast.backtest, forecast.io, forecast.known_demand;"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "{'aiohttp', 'adapters', 'autoscaler', 'kubernetes_asyncio', 'kubernetes', 'prometheus_client',"
        " 'requests', 'ijson'}];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_confidence_set_keeps_close_models_and_drops_clearly_worse_ones() -> None:
    rng = np.random.default_rng(0)
    actual = rng.normal(10.0, 1.0, size=(240, 4))

    def holdout(noise: float, bias: float) -> Holdout:
        upper = actual + 1.3 + bias + rng.normal(0.0, noise, size=actual.shape)
        return Holdout(actual=actual, mean=upper - 1.3, upper=upper)

    holdouts = {"best": holdout(0.5, 0.0), "close": holdout(0.5, 0.0), "bad": holdout(0.5, 3.0)}
    members = confidence_set(["best", "close", "bad"], holdouts, 0.9)
    assert members == ("best", "close")


def test_a_selected_model_can_be_refitted_by_name_ensembles_included(helios_10d):
    """The service refits its selection between full selections by passing the returned name back."""

    history = helios_10d.iloc[-6 * 288 :]
    first = fit_select_predict(history, horizon_steps=3, quantiles=(0.9,), policy_quantile=0.9, lead_steps=2)
    again = fit_select_predict(
        history, horizon_steps=3, quantiles=(0.9,), policy_quantile=0.9, lead_steps=2, candidates=(first.model,)
    )
    assert again.model == first.model
    assert np.allclose(again.forecast.quantile(0.9), first.forecast.quantile(0.9))
    forced = fit_select_predict(
        history,
        horizon_steps=3,
        quantiles=(0.9,),
        policy_quantile=0.9,
        lead_steps=2,
        candidates=("ensemble(naive+seasonal_naive)",),
    )
    assert forced.model == "ensemble(naive+seasonal_naive)"


def test_held_models_share_one_prepared_history_and_cache_no_calibration_paths(helios_10d: pd.Series) -> None:
    # What a worker holds per series between selections: each member keeping its own copy of the
    # history, or gbm a second copy of its calibration forecasts, cost ~100 KB per series each.
    forced = _run(helios_10d, candidates=("ensemble(ets+gbm+naive)",))
    assert forced.selection is not None
    members = forced.selection.members
    assert len(members) == 3
    assert all(member.history_ is members[0].history_ for member in members)
    gbm = next(member for member in members if isinstance(member, GradientBoostedQuantile))
    # Calibration paths (300 origins) live in mean_paths_ / raw_paths_ only; the cache keeps the
    # newest origin's, which every quantile of a refresh reuses.
    assert gbm.recent_.paths
    assert all(paths.shape[0] == 1 for paths in gbm.recent_.paths.values())
