"""The backtest report: exact schema, no peeking, gaps never crossed, and accuracy on a real trace."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from forecast.backtest import REPORT_MODELS, rolling_origins, run_backtest, run_backtest_records

HORIZONS = {"15m": 3, "30m": 6, "60m": 12}
METRIC_KEYS = {"mae", "mase", "pinball", "coverage", "under_provision_rate", "fit_seconds_median"}


@pytest.fixture(scope="module")
def report(helios_10d: pd.Series) -> dict[str, object]:
    return run_backtest(
        helios_10d.iloc[-4 * 288 :],
        horizons=HORIZONS,
        quantile=0.9,
        origin_every=72,
        eval_steps=288,
        input_name="helios.csv",
    )


def test_report_schema_is_exact(report: dict[str, object]) -> None:
    assert set(report) == {
        "input",
        "points",
        "step_seconds",
        "quantile",
        "origins",
        "models",
        "auto",
        "selected_counts",
    }
    assert report["input"] == "helios.csv"
    assert report["points"] == 4 * 288
    assert report["step_seconds"] == 300
    assert report["quantile"] == 0.9
    assert report["origins"] == 4
    models = report["models"]
    assert isinstance(models, dict)
    assert set(models) == set(REPORT_MODELS)
    assert {"naive", "seasonal_naive", "naive_empirical", "holt_winters"} <= set(models)
    for scores in [*models.values(), report["auto"]]:
        assert set(scores) == METRIC_KEYS
        for metric in METRIC_KEYS - {"fit_seconds_median"}:
            assert set(scores[metric]) == set(HORIZONS)
    counts = report["selected_counts"]
    assert isinstance(counts, dict)
    assert sum(counts.values()) == 4
    json.dumps(report, allow_nan=False)  # strictly JSON: no NaN


def test_rolling_origins_stay_inside_the_evaluation_window() -> None:
    origins = rolling_origins(n=2000, max_horizon=12, every=72, eval_steps=2016, min_history=576)
    assert origins[-1] == 2000 - 1 - 12
    assert origins[0] >= 575
    assert np.all(np.diff(origins) == 72)


def test_gaps_are_never_crossed(helios_10d: pd.Series) -> None:
    series = helios_10d.iloc[-3 * 288 :].copy()
    origins = rolling_origins(len(series), 12, 36, 288, 2 * 288)
    origin = origins[1]
    series.iloc[origin + 2] = np.nan  # between the origin and every horizon but the first step
    series.iloc[origins[2]] = np.nan  # an origin inside a gap is skipped
    run = run_backtest_records(
        series, horizons=HORIZONS, quantile=0.9, origin_every=36, eval_steps=288, models=("naive",)
    )
    assert len(run.origins) == len(origins) - 1
    record = run.records["naive"]
    position = run.origins.index(series.index[origin])
    for label in HORIZONS:
        assert np.isnan(record.actual[label][position])


def test_training_never_sees_the_future(helios_10d: pd.Series) -> None:
    """Changing everything after an origin must not change that origin's forecasts."""
    series = helios_10d.iloc[-3 * 288 :]
    tampered = series.copy()
    origins = rolling_origins(len(series), 12, 144, 288, 2 * 288)
    tampered.iloc[origins[0] + 1 :] += 500.0
    kwargs = {"horizons": {"60m": 12}, "quantile": 0.9, "origin_every": 144, "eval_steps": 288}
    clean = run_backtest_records(series, models=("gbm", "ets"), **kwargs)  # type: ignore[arg-type]
    moved = run_backtest_records(tampered, models=("gbm", "ets"), **kwargs)  # type: ignore[arg-type]
    for name in ("gbm", "ets", "auto"):
        assert clean.records[name].upper["60m"][0] == moved.records[name].upper["60m"][0]
        assert clean.records[name].mean["60m"][0] == moved.records[name].mean["60m"][0]


def test_auto_beats_naive_empirical_on_a_real_trace(lora_trace: pd.Series) -> None:
    """GenAI LoRA request rate (daily cycle): pinball at 60 min clearly below the baseline."""
    report = run_backtest(
        lora_trace.iloc[-12 * 288 :],
        horizons={"60m": 12},
        quantile=0.9,
        origin_every=24,
        eval_steps=2 * 288,
        models=("naive_empirical",),
    )
    auto = report["auto"]["pinball"]["60m"]
    baseline = report["models"]["naive_empirical"]["pinball"]["60m"]
    assert auto < 0.85 * baseline, (auto, baseline, report["selected_counts"])
