"""The inspection API on the plain-HTTP port: what is served, why, and from which forecast.

``GET /api/v1/forecasts`` lists every metric and series; ``GET /api/v1/forecasts/{metric}`` gives each
matching series with its history tail, forecast arrays, scheduled windows and backtest scores. Both
take a ``labelSelector``; errors are ``metav1.Status`` documents, as everywhere else on both ports.
Handlers read the current snapshot and nothing else (no I/O, no model work), like the metrics API.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
from aiohttp import web

from adapters.types import ScheduledWindow
from autoscaler.selectors import EVERYTHING, Selector, SelectorError, parse_selector
from autoscaler.serving.provider import Snapshot, not_served
from autoscaler.web.ops.buffer_views import buffers_json
from autoscaler.web.ops.launch_views import add_launch_routes
from autoscaler.web.ops.openapi import openapi_document
from autoscaler.web.ops.queued_views import queued_histories, queued_json
from autoscaler.web.ops.scorecard_views import add_scorecard_routes, series_target_json
from autoscaler.web.ops.views import InspectionError, SeriesView, find_metric, parse_history, views_of
from autoscaler.web.shared.keys import BUFFERS, CLOCK, SCORECARD, SNAPSHOTS
from autoscaler.web.shared.responses import invalid_parameter_response, status_response
from forecast.types import Forecast

FORECASTS_PATH = "/api/v1/forecasts"
BUFFERS_PATH = "/api/v1/capacity-buffers"


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


def series_json(
    view: SeriesView, target: dict[str, Any] | None = None, queued: pd.Series | None = None
) -> dict[str, Any]:
    """``target``: the series' service-level target observed (``scorecard_views.series_target_json``);
    ``queued``: its pool's record of GPUs waiting in Kueue's queues (``queued_views.queued_history``)."""
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
        "target": target,
        "kueue_waiting_gpus": queued_json(queued),
    }


def summary_json(snapshot: Snapshot, now: datetime, selector: Selector = EVERYTHING) -> dict[str, Any]:
    metrics = []
    for info in snapshot.metrics.values():
        series = []
        for view in views_of(snapshot, info, now, timedelta(0)):
            if not selector.matches(view.labels):
                continue
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


async def list_forecasts(request: web.Request) -> web.Response:
    snapshot = request.app[SNAPSHOTS].snapshot
    try:
        selector = parse_selector(request.query.get("labelSelector"))
    except SelectorError as error:
        return invalid_parameter_response("labelSelector", f"invalid labelSelector: {error}")
    return web.json_response(summary_json(snapshot, request.app[CLOCK](), selector))


async def get_forecast(request: web.Request) -> web.Response:
    snapshot = request.app[SNAPSHOTS].snapshot  # one read: the answer comes from one consistent snapshot
    metric = request.match_info["metric"]
    info = find_metric(snapshot, metric)
    if info is None:
        return status_response(404, not_served(metric, snapshot.metrics, noun="metric"))
    try:
        history = parse_history(request.query.get("history"))
        now = request.app[CLOCK]()
        views = views_of(snapshot, info, now, history, request.query.get("labelSelector"))
    except InspectionError as error:
        return invalid_parameter_response(error.parameter, str(error))
    scorecard, queued = request.app.get(SCORECARD), queued_histories(request.app, views, history)
    targets = [series_target_json(scorecard, view.target, now) for view in views]
    return web.json_response([series_json(*row) for row in zip(views, targets, queued, strict=True)])


async def get_buffers(request: web.Request) -> web.Response:
    actuator = request.app.get(BUFFERS)
    if actuator is None:
        return status_response(404, "no CapacityBuffer writer is configured (settings actuators.capacity_buffers)")
    return web.json_response(buffers_json(actuator))


async def get_openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document())


def add_inspection_routes(app: web.Application) -> None:
    """The inspection API (the live scorecard's included) and its OpenAPI document."""
    add_scorecard_routes(app)
    add_launch_routes(app)
    app.router.add_get(FORECASTS_PATH, list_forecasts)
    app.router.add_get(FORECASTS_PATH + "/{metric}", get_forecast)
    app.router.add_get(BUFFERS_PATH, get_buffers)
    app.router.add_get("/openapi.json", get_openapi)
