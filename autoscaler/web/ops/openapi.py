"""The OpenAPI 3 document of the inspection API (served at ``/openapi.json``).

A test fuzzes the running API from this document with schemathesis, so a handler and its
description cannot drift apart silently.
"""

from __future__ import annotations

from typing import Any

from autoscaler.scorecard.figures import TARGET_KINDS
from autoscaler.scorecard.target_status import TUNE_WINDOW, WINDOWS_S

# Metric names as the service accepts them in a path segment: no slash, no dot segments.
METRIC_NAME_PATTERN = r"^[A-Za-z0-9_:][A-Za-z0-9_:.-]{0,252}$"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "nullable": True}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _object(properties: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(properties)
    return schema


_NUMBER_OR_NULL = _nullable({"type": "number"})
_TIMESTAMP = {"type": "string", "format": "date-time", "description": "RFC 3339, UTC"}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}


def _status_schema() -> dict[str, Any]:
    """metav1.Status, with the query parameter at fault as its cause on a 400."""
    return {
        "type": "object",
        "description": "metav1.Status, as the external metrics API and every unknown route answer errors",
        "required": ["kind", "apiVersion", "metadata", "status", "message", "reason", "code"],
        "properties": {
            "kind": {"type": "string", "enum": ["Status"]},
            "apiVersion": {"type": "string", "enum": ["v1"]},
            "metadata": {"type": "object"},
            "status": {"type": "string", "enum": ["Failure"]},
            "message": {"type": "string", "description": "what went wrong, for people"},
            "reason": {"type": "string", "description": "metav1.StatusReason, e.g. BadRequest, NotFound"},
            "code": {"type": "integer", "description": "the HTTP status"},
            "details": _object(
                {
                    "causes": {
                        "type": "array",
                        "description": "400: the query parameter at fault",
                        "items": _object(
                            {
                                "reason": {"type": "string", "enum": ["FieldValueInvalid"]},
                                "message": {"type": "string"},
                                "field": {"type": "string", "enum": ["labelSelector", "history"]},
                            }
                        ),
                    }
                }
            ),
        },
        "additionalProperties": False,
    }


def _series_schemas() -> dict[str, Any]:
    """One series in detail: its history, forecast and scheduled windows."""
    return {
        "History": _object(
            {
                "timestamps": {"type": "array", "items": _TIMESTAMP},
                "values": {"type": "array", "items": _NUMBER_OR_NULL, "description": "null marks a gap"},
            }
        ),
        "Forecast": _nullable(
            _object(
                {
                    "timestamps": {"type": "array", "items": _TIMESTAMP},
                    "mean": {"type": "array", "items": _NUMBER_OR_NULL},
                    "quantiles": {
                        "type": "object",
                        "description": 'arrays by quantile level, e.g. "0.9"',
                        "additionalProperties": {"type": "array", "items": _NUMBER_OR_NULL},
                    },
                }
            )
        ),
        "Window": _object(
            {
                "namespace": {"type": "string"},
                "name": {"type": "string"},
                "start": _TIMESTAMP,
                "end": _TIMESTAMP,
                "gpus": {"type": "number"},
                "source": {
                    "type": "string",
                    "description": "cronjob, config or workload (a Kueue Workload queued now)",
                },
            }
        ),
        "SeriesDetail": _object(
            {
                "metric": {"type": "string"},
                "labels": _LABELS,
                "value": {**_NUMBER_OR_NULL, "description": "what an HPA reads now (after the staleness fallback)"},
                "explanation": {"type": "string"},
                "model": _nullable({"type": "string"}),
                "stale_seconds": {"type": "number", "minimum": 0},
                "history": _ref("History"),
                "forecast": _ref("Forecast"),
                "windows": {"type": "array", "items": _ref("Window")},
                "lead_time_seconds": _nullable({"type": "integer"}),
                "backtest": _ref("Backtest"),
                "target": _nullable({"allOf": [_ref("Target")], "description": "null: served without a target"}),
                "kueue_waiting_gpus": _nullable({"allOf": [_ref("History")], "description": "null: no Kueue"}),
            }
        ),
    }


def _target_schema() -> dict[str, Any]:
    """A headroom's service-level target observed (``scorecard_views.target_json``, docs/scorecard.md)."""
    text = {"type": "string"}
    live = _object({window: _NUMBER_OR_NULL for window in (TUNE_WINDOW, *WINDOWS_S)})
    return _object(
        {
            "kind": {"type": "string", "enum": list(TARGET_KINDS)},
            "value": {"type": "number", "minimum": 0}, "description": text,
            "tune_window_seconds": {"type": "number", "minimum": 0},
            "attained": _object({"live": live, "replay": _NUMBER_OR_NULL}),
            "error_budget_remaining": {**_NUMBER_OR_NULL, "description": "1 - attained / target over the tune "
                                       "window; null: no budget (window start delay) or nothing scored"},
            "chosen": text, "chosen_at": _nullable(_TIMESTAMP), "reason": text,
        }
    )  # fmt: skip


def _buffer_schemas() -> dict[str, Any]:
    count = _nullable({"type": "integer", "minimum": 0})
    text = {"type": "string"}
    condition = _object({"type": text, "status": text, "reason": text, "message": text})
    buffer = _object(
        {
            "pool": text, "namespace": text, "name": text, "podTemplate": text,
            "gpusPerChunk": {"type": "integer", "minimum": 1}, "metric": text, "labels": _LABELS,
            "servedValue": _NUMBER_OR_NULL, "desired": count, "reason": text, "written": count,
            "writtenAt": _nullable(_TIMESTAMP), "writes": {"type": "integer", "minimum": 0}, "reported": count,
            "conditions": {"type": "array", "items": condition}, "lastError": _nullable(text),
        }
    )  # fmt: skip
    lease = _object({"namespace": text, "name": text, "holder": _nullable(text), "held": {"type": "boolean"}})
    return {
        "CapacityBuffer": buffer,
        "CapacityBuffers": _object(
            {
                "mode": {"type": "string", "enum": ["writing", "dry-run", "standby", "unavailable"]},
                "dryRun": {"type": "boolean"},
                "apiVersion": _nullable(text),
                "lease": _nullable(lease),
                "buffers": {"type": "array", "items": _ref("CapacityBuffer")},
            }
        ),
    }


def _scorecard_schemas() -> dict[str, Any]:
    count = {"type": "integer", "minimum": 0}
    amount = {"type": "number", "minimum": 0}
    seconds = _nullable({"type": "number", "minimum": 0})
    waits = _object({"count": count, "p50": seconds, "p95": seconds, "max": seconds})
    coverage = _object({"covered": count, "judged": count, "coverage": _nullable({"type": "number"})})
    period = _object(
        {
            "minutes_scored": {**count, "description": "minutes whose GPUs short are known"},
            "minutes_short": _nullable({**count, "description": "null: GPUs short unknown (no Pending-pod watch)"}),
            "minutes_short_fraction": _nullable(amount), "short_gpu_minutes": _nullable(amount),
            "idle_gpu_hours": {"type": "number"},
            "gpu_allocation": _nullable({"type": "number"}),
            "busy_utilization": _nullable({"type": "number", "minimum": 0, "maximum": 1}),
            "capacity_wait_seconds": waits,
            "window_start_delay_seconds": waits,
            "queue_wait_seconds": {**_object({"quota": waits, "admission_check": waits, "capacity": waits}),
                                   "description": "Kueue Workloads' waits, by the period they ended in"},
            "coverage": {"type": "object", "description": "per headroom metric", "additionalProperties": coverage},
        }
    )  # fmt: skip
    periods = _object({"1h": _ref("ScorecardPeriod"), "24h": _ref("ScorecardPeriod"), "7d": _ref("ScorecardPeriod")})
    targets = {"type": "object", "description": "per headroom metric", "additionalProperties": _ref("Target")}
    pool = _object({"pool": {"type": "string"}, "periods": periods, "targets": targets})
    kueue = _object({"count": _nullable(amount), "p50": seconds, "p95": seconds})  # Kueue's histograms
    waits_of = _object(dict.fromkeys(("quota", "admission_check", "admission"), kueue))
    queue = _object({"cluster_queue": {"type": "string"}, "window_seconds": amount, "waits": waits_of})
    queues = {"type": "array", "items": queue, "description": "read from Kueue's histograms (no Workload watch)"}
    return {
        "ScorecardPeriod": period,
        "Target": _target_schema(),
        "Scorecard": _object({"at": _TIMESTAMP, "cluster_queues": queues, "pools": {"type": "array", "items": pool}}),
    }


def _launch_schemas() -> dict[str, Any]:
    count = {"type": "integer", "minimum": 0}
    seconds = _nullable({"type": "number", "minimum": 0})
    reasons = {"type": "object", "description": "failed launches per reason", "additionalProperties": count}
    kind = _object({"instance_type": {"type": "string"}, "ready": count, "slow": count, "failures": reasons})
    outcome = _object(
        {
            "at": _TIMESTAMP, "nodeclaim": {"type": "string"}, "instance_type": {"type": "string"},
            "outcome": {"type": "string", "description": "Ready, or the failure reason"},
            "seconds": seconds, "retries": count,
        }
    )  # fmt: skip
    pool = _object(
        {
            "pool": {"type": "string"},
            "failing": _nullable({"type": "string", "description": "why the pool's launches keep failing"}),
            "ready": count, "slow": count, "failures": reasons,
            "instance_types": {"type": "array", "items": kind},
            "lead_time_seconds": _object({"samples": count, "p50": seconds, "p90": seconds, "max": seconds}),
            "open_need_since": _nullable(_TIMESTAMP),
            "recent": {"type": "array", "items": outcome},
        }
    )  # fmt: skip
    return {
        "PoolLaunches": pool,
        "Launches": _object({"at": _TIMESTAMP, "pools": {"type": "array", "items": _ref("PoolLaunches")}}),
    }


def _schemas() -> dict[str, Any]:
    return {
        "Status": _status_schema(),
        **_buffer_schemas(),
        **_scorecard_schemas(),
        **_launch_schemas(),
        "Backtest": _object(
            {
                "quantile": {**_NUMBER_OR_NULL, "description": "the policy quantile the pinball loss is taken at"},
                "scores": {
                    "type": "object",
                    "description": "rolling-origin backtest scores per candidate model (null: not finite)",
                    "additionalProperties": {"type": "object", "additionalProperties": _NUMBER_OR_NULL},
                },
            }
        ),
        **_series_schemas(),
        "SeriesSummary": _object(
            {
                "labels": _LABELS,
                "value": _NUMBER_OR_NULL,
                "timestamp": _TIMESTAMP,
                "stale_seconds": {"type": "number", "minimum": 0},
                "model": _nullable({"type": "string"}),
                "lead_time_seconds": _nullable({"type": "integer"}),
                "backtest": _ref("Backtest"),
            }
        ),
        "MetricSummary": _object(
            {
                "metric": {"type": "string"},
                "description": {"type": "string"},
                "unit": {"type": "string"},
                "fallback": {"type": "string", "enum": ["hold", "static", "error"]},
                "staleness_ttl_seconds": {"type": "number"},
                "series": {"type": "array", "items": _ref("SeriesSummary")},
            }
        ),
        "ForecastIndex": _object(
            {
                "snapshot": _object({"created_at": _TIMESTAMP, "last_error": _nullable({"type": "string"})}),
                "metrics": {"type": "array", "items": _ref("MetricSummary")},
            }
        ),
    }


def _buffer_paths(error: dict[str, Any]) -> dict[str, Any]:
    return {
        "/api/v1/capacity-buffers": {
            "get": {
                "operationId": "getCapacityBuffers",
                "summary": "Each pool's CapacityBuffer: desired, written and reported replicas, conditions",
                "responses": {
                    "200": _json(_ref("CapacityBuffers"), "the CapacityBuffer writer's state"),
                    "404": {**error, "description": "no CapacityBuffer writer is configured"},
                },
            }
        }
    }


def _scorecard_paths() -> dict[str, Any]:
    return {
        "/api/v1/scorecard": {
            "get": {
                "operationId": "getScorecard",
                "summary": "Each pool's live outcomes over 1 h, 24 h and 7 d: GPUs short, waits, idle GPUs, coverage",
                "responses": {"200": _json(_ref("Scorecard"), "the pools this replica scores")},
            }
        }
    }


def _launch_paths() -> dict[str, Any]:
    return {
        "/api/v1/launches": {
            "get": {
                "operationId": "getLaunches",
                "summary": "Each pool's NodeClaim launch record: failed and slow launches, lead times with retries",
                "responses": {"200": _json(_ref("Launches"), "the pools NodeClaims were seen in")},
            }
        }
    }


def _paths() -> dict[str, Any]:
    error = _json(_ref("Status"), "")
    label_selector = {
        "name": "labelSelector", "in": "query", "required": False, "schema": {"type": "string"},
        "description": "Kubernetes label selector, e.g. nodepool=a100,region in (eu,us)",
    }  # fmt: skip
    return {
        "/api/v1/forecasts": {
            "get": {
                "operationId": "listForecasts",
                "summary": "Every served metric and series with its value, staleness and model",
                "parameters": [label_selector],
                "responses": {
                    "200": _json(_ref("ForecastIndex"), "the current snapshot, summarised"),
                    "400": {**error, "description": "malformed labelSelector"},
                },
            }
        },
        "/api/v1/forecasts/{metric}": {
            "get": {
                "operationId": "getForecast",
                "summary": "Each series of one metric: value, explanation, history, forecast, windows, scores",
                "parameters": [
                    {
                        "name": "metric",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "pattern": METRIC_NAME_PATTERN},
                    },
                    label_selector,
                    {
                        "name": "history",
                        "in": "query",
                        "required": False,
                        "description": "how much history to return, counted back from its last point: a "
                        "duration with a unit (6h)",
                        "schema": {"type": "string", "default": "6h"},
                    },
                ],
                "responses": {
                    "200": _json({"type": "array", "items": _ref("SeriesDetail")}, "matching series"),
                    "400": {**error, "description": "malformed labelSelector or history"},
                    "404": {**error, "description": "the metric is not served"},
                },
            }
        },
        **_buffer_paths(error),
        **_scorecard_paths(),
        **_launch_paths(),
        "/openapi.json": {
            "get": {
                "operationId": "getOpenAPI",
                "summary": "This document",
                "responses": {"200": _json({"type": "object"}, "OpenAPI 3 document")},
            }
        },
    }


def openapi_document() -> dict[str, Any]:
    """The whole document; built on each call (it is small) so no shared mutable state exists."""
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "gpu-autoscaler inspection API",
            "version": "1",
            "description": (
                "What the service serves on the external metrics API and why: forecasts, history, scheduled "
                "windows and backtest scores. Read-only; answers come from the in-memory snapshot."
            ),
        },
        "paths": _paths(),
        "components": {"schemas": _schemas()},
    }
