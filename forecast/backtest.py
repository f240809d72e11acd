"""Rolling-origin backtest of every model and of automatic selection on one series.

Origins fall every ``origin_every`` over the last ``eval_days``. At each origin every model (and the
engine's selection) sees only the history up to and including the origin. The error at horizon h is
measured on the single step h ahead of the origin; an origin inside a gap, or a target that is a gap
or lies beyond one, is skipped rather than scored.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from forecast import metrics
from forecast.engine import DEFAULT_CANDIDATES, fit_select_predict
from forecast.history import prepare
from forecast.registry import MODELS, make_model
from forecast.types import Forecast, ProgressCallback

AUTO = "auto"
REPORT_MODELS: tuple[str, ...] = DEFAULT_CANDIDATES
METRICS = ("mae", "mase", "pinball", "coverage", "under_provision_rate")


@dataclass
class ModelRecord:
    """Per-horizon arrays over origins (NaN where a point was skipped) and fit times."""

    actual: dict[str, list[float]] = field(default_factory=dict)
    mean: dict[str, list[float]] = field(default_factory=dict)
    upper: dict[str, list[float]] = field(default_factory=dict)
    scale: dict[str, list[float]] = field(default_factory=dict)
    fit_seconds: list[float] = field(default_factory=list)
    failures: int = 0


@dataclass
class BacktestRun:
    """Everything the summary and the plot need."""

    input: str
    points: int
    step: pd.Timedelta
    quantile: float
    horizons: dict[str, int]
    origins: list[pd.Timestamp]
    records: dict[str, ModelRecord]
    selected: list[str]


def rolling_origins(n: int, max_horizon: int, every: int, eval_steps: int, min_history: int) -> list[int]:
    """Origin positions (index of the last observation used), oldest first."""
    last = n - 1 - max_horizon
    first = max(n - eval_steps, min_history - 1)
    origins = list(range(last, first - 1, -every))
    return sorted(origins)


def run_backtest_records(
    series: pd.Series,
    *,
    horizons: Mapping[str, int],
    quantile: float,
    origin_every: int,
    eval_steps: int,
    models: Sequence[str] = REPORT_MODELS,
    input_name: str = "",
    seed: int = 0,
    progress: ProgressCallback | None = None,
) -> BacktestRun:
    """Forecast from every origin with every model and with automatic selection."""
    history = prepare(series)
    values = history.values
    n = len(history)
    per_day = history.steps_per_day
    max_horizon = max(horizons.values())
    origins = _backtest_origins(n, max_horizon, origin_every, eval_steps, per_day)
    full = pd.Series(values, index=history.index)
    names = [*models, AUTO]
    records = {name: _empty_record(horizons) for name in names}
    selected: list[str] = []
    used_origins: list[pd.Timestamp] = []
    for position, origin in enumerate(origins):
        if progress is not None:
            progress(position, len(origins))
        if np.isnan(values[origin]):
            continue  # an origin inside a gap has no current value to forecast from
        used_origins.append(history.index[origin])
        train = full.iloc[: origin + 1]
        scale = metrics.seasonal_naive_scale(values[: origin + 1], per_day)
        targets = {label: _target(values, origin, h) for label, h in horizons.items()}
        for name in names:
            record = records[name]
            started = time.perf_counter()
            forecast: Forecast | None
            try:
                forecast = _forecast(name, train, per_day, max_horizon, quantile, seed, selected)
            except Exception:  # a failing model is counted and skipped, not fatal
                record.failures += 1
                forecast = None
            else:
                record.fit_seconds.append(time.perf_counter() - started)
            _append_point(record, forecast, targets, scale, horizons, quantile)
    if progress is not None:
        progress(len(origins), len(origins))
    return BacktestRun(
        input=input_name,
        points=n,
        step=history.step,
        quantile=quantile,
        horizons=dict(horizons),
        origins=used_origins,
        records=records,
        selected=selected,
    )


def _backtest_origins(n: int, max_horizon: int, origin_every: int, eval_steps: int, per_day: int) -> list[int]:
    """:func:`rolling_origins` for a backtest; raises ``ValueError`` when the series has none."""
    # Every origin needs two days behind it: selection calibrates on recent history.
    origins = rolling_origins(n, max_horizon, origin_every, eval_steps, min_history=2 * per_day)
    if not origins:
        raise ValueError(
            f"series too short for a backtest: {n} points, need over two days of history plus {max_horizon} steps"
        )
    return origins


def _empty_record(horizons: Mapping[str, int]) -> ModelRecord:
    """A record with an empty list per horizon label for each per-origin array."""
    record = ModelRecord()
    for label in horizons:
        record.actual[label], record.mean[label] = [], []
        record.upper[label], record.scale[label] = [], []
    return record


def _forecast(
    name: str,
    train: pd.Series,
    per_day: int,
    max_horizon: int,
    quantile: float,
    seed: int,
    selected: list[str],
) -> Forecast:
    """``name``'s forecast from the end of ``train``: one model, or the engine's selection (``AUTO``,
    whose chosen model is appended to ``selected``). Raises whatever fitting raises."""
    if name == AUTO:
        result = fit_select_predict(
            train,
            horizon_steps=max_horizon,
            quantiles=(quantile,),
            policy_quantile=quantile,
            lead_steps=max_horizon,
            seed=seed,
        )
        selected.append(result.model)
        return result.forecast
    if len(train) < MODELS[name].min_history(per_day):
        raise ValueError("history too short")
    model = make_model(name, max_horizon=max_horizon, quantiles=(quantile,), seed=seed)
    return model.fit(train).predict(max_horizon, (quantile,))


def _append_point(
    record: ModelRecord,
    forecast: Forecast | None,
    targets: Mapping[str, float],
    scale: float,
    horizons: Mapping[str, int],
    quantile: float,
) -> None:
    """One origin's actuals, scale and forecasts (NaN when the model failed) at every horizon."""
    for label, h in horizons.items():
        record.actual[label].append(targets[label])
        record.scale[label].append(scale)
        if forecast is None:
            record.mean[label].append(float("nan"))
            record.upper[label].append(float("nan"))
        else:
            record.mean[label].append(float(forecast.mean[h - 1]))
            record.upper[label].append(float(forecast.quantile(quantile)[h - 1]))


def _target(values: np.ndarray, origin: int, h: int) -> float:
    """The actual h steps ahead, or NaN when it or any step before it is a gap (never cross one)."""
    ahead = values[origin + 1 : origin + h + 1]
    if len(ahead) < h or np.isnan(ahead).any():
        return float("nan")
    return float(ahead[-1])


def _json_number(value: float) -> float | None:
    return None if not np.isfinite(value) else round(float(value), 6)


def summarize_record(record: ModelRecord, horizons: Mapping[str, int], quantile: float) -> dict[str, Any]:
    out: dict[str, Any] = {name: {} for name in METRICS}
    for label in horizons:
        actual = np.asarray(record.actual[label])
        mean = np.asarray(record.mean[label])
        upper = np.asarray(record.upper[label])
        scale = np.asarray(record.scale[label])
        out["mae"][label] = _json_number(metrics.mae(actual, mean))
        out["mase"][label] = _json_number(metrics.mase(actual, mean, scale))
        out["pinball"][label] = _json_number(metrics.pinball(actual, upper, quantile))
        out["coverage"][label] = _json_number(metrics.coverage(actual, upper))
        out["under_provision_rate"][label] = _json_number(metrics.under_provision_rate(actual, upper))
    seconds = record.fit_seconds
    out["fit_seconds_median"] = _json_number(statistics.median(seconds)) if seconds else None
    return out


def summarize(run: BacktestRun) -> dict[str, Any]:
    """The JSON-able report."""
    models = {
        name: summarize_record(record, run.horizons, run.quantile)
        for name, record in run.records.items()
        if name != AUTO
    }
    counts: dict[str, int] = {}
    for name in run.selected:
        counts[name] = counts.get(name, 0) + 1
    return {
        "input": run.input,
        "points": run.points,
        "step_seconds": int(run.step.total_seconds()),
        "quantile": run.quantile,
        "origins": len(run.origins),
        "models": models,
        "auto": summarize_record(run.records[AUTO], run.horizons, run.quantile),
        "selected_counts": dict(sorted(counts.items())),
    }


def run_backtest(
    series: pd.Series,
    *,
    horizons: Mapping[str, int],
    quantile: float,
    origin_every: int,
    eval_steps: int,
    models: Sequence[str] = REPORT_MODELS,
    input_name: str = "",
    seed: int = 0,
    progress: ProgressCallback | None = None,
) -> dict[str, Any]:
    """Backtest ``series`` (already at its serving step) and return the JSON-able report.

    ``horizons`` maps labels such as ``"60m"`` to steps; ``origin_every`` and ``eval_steps`` are
    in steps.
    """
    run = run_backtest_records(
        series,
        horizons=horizons,
        quantile=quantile,
        origin_every=origin_every,
        eval_steps=eval_steps,
        models=models,
        input_name=input_name,
        seed=seed,
        progress=progress,
    )
    return summarize(run)
