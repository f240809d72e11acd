"""The inspection API on the plain-HTTP port: what is served, why, and from which forecast.

``GET /api/v1/forecasts`` lists every metric and series; ``GET /api/v1/forecasts/{metric}`` gives each
matching series with its history tail, forecast arrays, scheduled windows and backtest scores.
Handlers read the provider's snapshot and nothing else (no I/O, no model work), like the metrics API.
:class:`SeriesView` is the typed reading of one series that both this API and the web page use.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pandas as pd
from aiohttp import web

from adapters.types import ScheduledWindow

# Module imports, not names: api.py imports this module to mount it, so both sides of the cycle
# resolve attributes at call time.
from autoscaler import api, ui
from autoscaler.durations import parse_duration
from autoscaler.openapi import openapi_document
from autoscaler.provider import MetricInfo, MetricUnavailable, ServedSeries, Snapshot, apply_staleness
from autoscaler.selectors import SelectorError, parse_selector
from forecast.types import Forecast

DEFAULT_HISTORY = timedelta(hours=6)
FORECASTS_PATH = "/api/v1/forecasts"

Clock = Callable[[], datetime]
# Staleness is measured against this clock; tests replace it before the app starts.
CLOCK: web.AppKey[Clock] = web.AppKey("inspection_clock")


class InspectionError(ValueError):
    """A request parameter that cannot be used; becomes a 400 with the message."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


@runtime_checkable
class SnapshotSource(Protocol):
    """A provider whose whole current snapshot can be read (``SnapshotProvider`` is one)."""

    @property
    def snapshot(self) -> Snapshot: ...


@dataclass(frozen=True)
class SeriesView:
    """One served series as people inspect it: the value after staleness, and what it came from."""

    info: MetricInfo
    series: ServedSeries
    value: float
    explanation: str
    stale_seconds: float
    model: str | None
    history: pd.Series
    forecast: Forecast | None
    quantile: float | None
    windows: tuple[ScheduledWindow, ...]
    lead_time_seconds: int | None
    lead_time_source: str | None
    scores: Mapping[str, Mapping[str, float]]
    notes: tuple[str, ...]
    fit_seconds: float | None

    @property
    def labels(self) -> Mapping[str, str]:
        return self.series.labels


def current_snapshot(app: web.Application) -> Snapshot:
    provider = app[api.PROVIDER]
    if not isinstance(provider, SnapshotSource):
        raise TypeError(f"the inspection API needs a provider with a snapshot, got {type(provider).__name__}")
    return provider.snapshot


def find_metric(snapshot: Snapshot, name: str) -> MetricInfo | None:
    # Metric names are matched case-insensitively, as the external metrics API does.
    return snapshot.metrics.get(name.lower())


def parse_history(text: str | None) -> timedelta:
    """The ``history`` query parameter: a duration such as ``6h`` (default) or ``90m``."""
    if text is None:
        return DEFAULT_HISTORY
    try:
        return parse_duration(text)
    except (ValueError, OverflowError) as error:  # "inf" or "1e30s" overflow timedelta
        raise InspectionError("history", f"invalid history {text!r}: {error}") from None


def history_tail(series: pd.Series, window: timedelta) -> pd.Series:
    """The last ``window`` of ``series``, counted back from its last timestamp."""
    if not series.index.is_monotonic_increasing:
        series = series.sort_index()
    if series.empty or window >= (series.index[-1] - series.index[0]).to_pytimedelta():
        return series
    cutoff = series.index[-1] - pd.Timedelta(window)
    return series.loc[cutoff:]


def served_value(info: MetricInfo, series: ServedSeries, now: datetime) -> tuple[float, str]:
    """The value an HPA reads now and why, by the provider's own staleness rule."""
    try:
        served = apply_staleness(info, series, now)
    except MetricUnavailable as error:
        return series.value, f"{error}: the external metrics API answers 503; last value {series.explanation}"
    return served.value, served.explanation


def _float_or_none(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _whole_seconds(value: object) -> int | None:
    seconds = _float_or_none(value)
    return int(seconds) if seconds is not None and math.isfinite(seconds) else None


def _scores(raw: object) -> dict[str, dict[str, float]]:
    if not isinstance(raw, Mapping):
        return {}
    scores: dict[str, dict[str, float]] = {}
    for model, metrics in raw.items():
        if isinstance(metrics, Mapping):
            scores[str(model)] = {str(k): float(v) for k, v in metrics.items() if _float_or_none(v) is not None}
    return scores


def series_view(info: MetricInfo, series: ServedSeries, now: datetime, history: timedelta) -> SeriesView:
    """Read ``series.details`` (written by the refresher) defensively: any part may be missing."""
    details = series.details
    value, explanation = served_value(info, series, now)
    raw_history = details.get("history")
    raw_forecast = details.get("forecast")
    raw_windows = details.get("windows") or ()
    model = details.get("model")
    source = details.get("lead_time_source")
    notes = details.get("notes") or ()
    return SeriesView(
        info=info,
        series=series,
        value=value,
        explanation=explanation,
        stale_seconds=max(0.0, (now - series.timestamp).total_seconds()),
        model=model if isinstance(model, str) else None,
        history=history_tail(raw_history, history) if isinstance(raw_history, pd.Series) else pd.Series(dtype=float),
        forecast=raw_forecast if isinstance(raw_forecast, Forecast) else None,
        quantile=_float_or_none(details.get("quantile")),
        windows=tuple(window for window in raw_windows if isinstance(window, ScheduledWindow)),
        lead_time_seconds=_whole_seconds(details.get("lead_time_seconds")),
        lead_time_source=source if isinstance(source, str) else None,
        scores=_scores(details.get("scores")),
        notes=tuple(str(note) for note in notes),
        fit_seconds=_float_or_none(details.get("fit_seconds")),
    )


def views_of(
    snapshot: Snapshot, info: MetricInfo, now: datetime, history: timedelta, selector_text: str | None = None
) -> list[SeriesView]:
    """Every series of ``info`` matching the selector; raises InspectionError for a bad selector."""
    try:
        selector = parse_selector(selector_text)
    except SelectorError as error:
        raise InspectionError("labelSelector", f"invalid labelSelector: {error}") from None
    return [
        series_view(info, series, now, history)
        for series in snapshot.series.get(info.name, ())
        if selector.matches(series.labels)
    ]


# JSON rendering. NaN and infinities are not JSON: they become null.


def rfc3339(moment: datetime | pd.Timestamp) -> str:
    stamp = pd.Timestamp(moment)
    stamp = stamp.tz_localize(UTC) if stamp.tzinfo is None else stamp.tz_convert(UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def _timestamps(index: pd.Index) -> list[str]:
    stamps = pd.DatetimeIndex(index)
    stamps = stamps.tz_localize(UTC) if stamps.tz is None else stamps.tz_convert(UTC)
    return list(stamps.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _numbers(values: Sequence[float] | np.ndarray) -> list[float | None]:
    return [float(v) if math.isfinite(v) else None for v in np.asarray(values, dtype=np.float64)]


def _number(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def quantile_key(level: float) -> str:
    return f"{level:g}"


def backtest_json(view: SeriesView) -> dict[str, Any]:
    return {
        "quantile": view.quantile,
        "scores": {
            model: {name: _number(value) for name, value in metrics.items()} for model, metrics in view.scores.items()
        },
    }


def forecast_json(forecast: Forecast | None) -> dict[str, Any] | None:
    if forecast is None:
        return None
    return {
        "timestamps": _timestamps(forecast.timestamps),
        "mean": _numbers(forecast.mean),
        "quantiles": {quantile_key(level): _numbers(values) for level, values in sorted(forecast.quantiles.items())},
    }


def window_json(window: ScheduledWindow) -> dict[str, Any]:
    return {
        "namespace": window.namespace,
        "name": window.name,
        "start": rfc3339(window.start),
        "end": rfc3339(window.end),
        "gpus": window.gpus,
        "source": window.source,
    }


def series_json(view: SeriesView) -> dict[str, Any]:
    return {
        "metric": view.info.name,
        "labels": dict(view.labels),
        "value": _number(view.value),
        "explanation": view.explanation,
        "model": view.model,
        "stale_seconds": round(view.stale_seconds, 3),
        "history": {"timestamps": _timestamps(view.history.index), "values": _numbers(view.history.to_numpy())},
        "forecast": forecast_json(view.forecast),
        "windows": [window_json(window) for window in view.windows],
        "lead_time_seconds": view.lead_time_seconds,
        "backtest": backtest_json(view),
    }


def summary_json(snapshot: Snapshot, now: datetime) -> dict[str, Any]:
    metrics = []
    for info in snapshot.metrics.values():
        series = []
        for view in views_of(snapshot, info, now, timedelta(0)):
            series.append(
                {
                    "labels": dict(view.labels),
                    "value": _number(view.value),
                    "timestamp": rfc3339(view.series.timestamp),
                    "stale_seconds": round(view.stale_seconds, 3),
                    "model": view.model,
                    "lead_time_seconds": view.lead_time_seconds,
                    "backtest": backtest_json(view),
                }
            )
        metrics.append(
            {
                "metric": info.name,
                "description": info.description,
                "unit": info.unit,
                "fallback": info.fallback,
                "staleness_ttl_seconds": info.staleness_ttl.total_seconds(),
                "series": series,
            }
        )
    return {
        "snapshot": {"created_at": rfc3339(snapshot.created_at), "last_error": snapshot.last_error},
        "metrics": metrics,
    }


def error_response(status: int, message: str, **fields: str) -> web.Response:
    return web.json_response({"error": message, **fields}, status=status)


async def list_forecasts(request: web.Request) -> web.Response:
    snapshot = current_snapshot(request.app)
    return web.json_response(summary_json(snapshot, request.app[CLOCK]()))


async def get_forecast(request: web.Request) -> web.Response:
    snapshot = current_snapshot(request.app)  # one read: the answer comes from one consistent snapshot
    metric = request.match_info["metric"]
    info = find_metric(snapshot, metric)
    if info is None:
        return error_response(404, f"metric {metric!r} is not served by gpu-autoscaler", metric=metric)
    try:
        history = parse_history(request.query.get("history"))
        views = views_of(snapshot, info, request.app[CLOCK](), history, request.query.get("labelSelector"))
    except InspectionError as error:
        return error_response(400, str(error), parameter=error.parameter)
    return web.json_response([series_json(view) for view in views])


async def get_openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document())


def add_inspection_routes(app: web.Application, *, clock: Clock | None = None) -> None:
    """The inspection API, its OpenAPI document and the web page (``/`` and ``/ui/{metric}``)."""
    app[CLOCK] = clock or (lambda: datetime.now(UTC))
    app.router.add_get(FORECASTS_PATH, list_forecasts)
    app.router.add_get(FORECASTS_PATH + "/{metric}", get_forecast)
    app.router.add_get("/openapi.json", get_openapi)
    ui.add_ui_routes(app)
