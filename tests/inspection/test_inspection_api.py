"""The inspection API's exact JSON shapes and status codes, on a snapshot with real forecast arrays."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest

from autoscaler.web.shared.keys import SCORECARD
from tests.autoscaler.test_api import status as kubernetes_status
from tests.inspection.conftest import (
    GAP_POSITIONS,
    LEAD_TIME,
    METRICS,
    NOW,
    QUANTILE,
    SCRAPE_DELAY,
    TARGET,
    WINDOW,
    OpsServer,
)

DETAIL_KEYS = {
    "target",
    "kueue_waiting_gpus",
    "metric",
    "labels",
    "value",
    "explanation",
    "model",
    "stale_seconds",
    "history",
    "forecast",
    "windows",
    "lead_time_seconds",
    "backtest",
}


def rfc3339(stamp) -> str:
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def expected_backtest(scores) -> dict:
    return {
        "quantile": QUANTILE,
        "scores": {
            model: {name: value if math.isfinite(value) else None for name, value in metrics.items()}
            for model, metrics in scores.items()
        },
    }


def test_list_forecasts(ops_server: OpsServer):
    forecast = ops_server.forecast
    code, body = ops_server.get_json("/api/v1/forecasts")
    assert code == 200
    backtest = expected_backtest(forecast.result.scores)
    full = {
        "labels": {"nodepool": "a100"},
        "timestamp": "2020-05-29T00:00:00Z",
        "stale_seconds": SCRAPE_DELAY.total_seconds(),
        "model": forecast.result.model,
        "lead_time_seconds": int(LEAD_TIME.total_seconds()),
        "backtest": backtest,
    }
    assert body == {
        "snapshot": {"created_at": "2020-05-29T00:00:00Z", "last_error": None},
        "metrics": [
            {
                "metric": "gpu_demand_forecast",
                "description": "GPUs expected within the lead time",
                "unit": "GPUs",
                "fallback": "hold",
                "staleness_ttl_seconds": 900.0,
                "series": [
                    {**full, "value": forecast.demand.value},
                    {
                        "labels": {"nodepool": "h100"},
                        "value": 3.0,
                        "timestamp": "2020-05-28T23:58:00Z",
                        "stale_seconds": SCRAPE_DELAY.total_seconds() + 120,
                        "model": None,
                        "lead_time_seconds": None,
                        "backtest": {"quantile": None, "scores": {}},
                    },
                ],
            },
            {
                "metric": "gpu_headroom",
                "description": "Placeholder GPUs to hold",
                "unit": "GPUs",
                "fallback": "hold",
                "staleness_ttl_seconds": 900.0,
                "series": [{**full, "value": forecast.headroom.value}],
            },
            {
                "metric": "request_rate_forecast",
                "description": "Requests per second",
                "unit": "req/s",
                "fallback": "hold",
                "staleness_ttl_seconds": 900.0,
                "series": [],
            },
        ],
    }


def test_metric_detail_exact_shape(ops_server: OpsServer):
    forecast = ops_server.forecast
    code, body = ops_server.get_json("/api/v1/forecasts/gpu_demand_forecast")
    assert code == 200
    assert isinstance(body, list) and len(body) == 2
    full, bare = body
    assert set(full) == DETAIL_KEYS and set(bare) == DETAIL_KEYS

    history = forecast.demand.provenance.history
    tail = history[history.index >= history.index[-1] - timedelta(hours=6)]  # the default
    assert len(tail) == 73
    values = [None if math.isnan(v) else v for v in tail.to_numpy()]
    assert values.count(None) == len(GAP_POSITIONS)
    predicted = forecast.result.forecast
    assert full == {
        "metric": "gpu_demand_forecast",
        "labels": {"nodepool": "a100"},
        "value": forecast.demand.value,
        "explanation": forecast.demand.explanation,
        "model": forecast.result.model,
        "stale_seconds": SCRAPE_DELAY.total_seconds(),
        "history": {"timestamps": [rfc3339(t) for t in tail.index], "values": values},
        "forecast": {
            "timestamps": [rfc3339(t) for t in predicted.timestamps],
            "mean": list(predicted.mean),
            "quantiles": {"0.9": list(predicted.quantiles[QUANTILE])},
        },
        "windows": [
            {
                "namespace": "research",
                "name": "nightly-train",
                "start": "2020-05-29T00:10:00Z",
                "end": "2020-05-29T01:10:00Z",
                "gpus": WINDOW.gpus,
                "source": "cronjob",
            }
        ],
        "lead_time_seconds": 1800,
        "backtest": expected_backtest(forecast.result.scores),
        "target": None,  # a demand forecast has no target
        "kueue_waiting_gpus": None,  # no Kueue watched
    }
    assert full["history"]["timestamps"][0] == "2020-05-28T17:55:00Z"
    assert full["history"]["timestamps"][-1] == "2020-05-28T23:55:00Z"
    assert full["forecast"]["timestamps"][0] == "2020-05-29T00:00:00Z"
    assert len(full["forecast"]["mean"]) == 7  # lead time (6 steps) + 1
    # The served value is the p90 peak within the lead time plus the scheduled window's GPUs.
    within = [
        u for t, u in zip(predicted.timestamps, predicted.quantiles[QUANTILE], strict=True) if t <= NOW + LEAD_TIME
    ]
    assert full["value"] == pytest.approx(max(within) + WINDOW.gpus)

    assert bare == {
        "metric": "gpu_demand_forecast",
        "labels": {"nodepool": "h100"},
        "value": 3.0,
        "explanation": "",
        "model": None,
        "stale_seconds": SCRAPE_DELAY.total_seconds() + 120,
        "history": {"timestamps": [], "values": []},
        "forecast": None,
        "windows": [],
        "lead_time_seconds": None,
        "backtest": {"quantile": None, "scores": {}},
        "target": None,
        "kueue_waiting_gpus": None,
    }


@pytest.mark.parametrize(
    ("query", "expected_pools"),
    [
        ("nodepool=a100", ["a100"]),
        ("nodepool in (h100,b200)", ["h100"]),
        ("nodepool!=a100", ["h100"]),
        ("!nodepool", []),
        ("", ["a100", "h100"]),
    ],
)
def test_label_selector(ops_server: OpsServer, query: str, expected_pools: list[str]):
    code, body = ops_server.get_json(f"/api/v1/forecasts/gpu_demand_forecast?labelSelector={quote(query)}")
    assert code == 200
    assert [series["labels"]["nodepool"] for series in body] == expected_pools


@pytest.mark.parametrize(("history", "points"), [("1h", 13), ("90m", 19), ("0s", 1), ("30d", 864), ("6h", 73)])
def test_history_window(ops_server: OpsServer, history: str, points: int):
    code, body = ops_server.get_json(
        f"/api/v1/forecasts/gpu_demand_forecast?labelSelector=nodepool%3Da100&history={history}"
    )
    assert code == 200
    (series,) = body
    assert len(series["history"]["timestamps"]) == len(series["history"]["values"]) == points
    assert series["history"]["timestamps"][-1] == "2020-05-28T23:55:00Z"


def test_metric_names_are_case_insensitive(ops_server: OpsServer):
    code, body = ops_server.get_json("/api/v1/forecasts/GPU_Headroom")
    assert code == 200
    assert [series["metric"] for series in body] == ["gpu_headroom"]


def test_metric_without_series_is_an_empty_list(ops_server: OpsServer):
    assert ops_server.get_json("/api/v1/forecasts/request_rate_forecast") == (200, [])


def status(code: int, reason: str, message: str, field: str | None = None) -> dict:
    """The metav1.Status every error on this port is, with the parameter at fault as its cause."""
    document = kubernetes_status(code, reason, message)
    if field is not None:
        document["details"] = {"causes": [{"reason": "FieldValueInvalid", "message": message, "field": field}]}
    return document


def test_unknown_metric_is_a_404_status_like_an_unknown_route(ops_server: OpsServer):
    code, body = ops_server.get_json("/api/v1/forecasts/no_such_metric")
    assert code == 404
    assert body == status(
        404,
        "NotFound",
        "metric 'no_such_metric' is not served by this configuration; "
        "served: gpu_demand_forecast, gpu_headroom, request_rate_forecast",
    )
    code, body = ops_server.get_json("/api/v1/no-such-route")
    assert (code, body["kind"], body["reason"]) == (404, "Status", "NotFound")


@pytest.mark.parametrize("path", ["/api/v1/forecasts/gpu_demand_forecast", "/api/v1/forecasts"])
@pytest.mark.parametrize("selector", ["nodepool in (a100", "=a100", "nodepool=a100,", "Not A Key=1"])
def test_bad_selector_is_400(ops_server: OpsServer, path: str, selector: str):
    code, body = ops_server.get_json(f"{path}?labelSelector={quote(selector)}")
    assert code == 400
    assert body["message"].startswith("invalid labelSelector: ")
    assert body == status(400, "BadRequest", body["message"], "labelSelector")


@pytest.mark.parametrize(
    ("query", "expected_pools"), [("nodepool=h100", {"h100"}), ("nodepool", {"a100", "h100"}), ("!nodepool", set())]
)
def test_list_applies_the_label_selector(ops_server: OpsServer, query: str, expected_pools: set[str]):
    code, body = ops_server.get_json(f"/api/v1/forecasts?labelSelector={quote(query)}")
    assert code == 200
    pools = {series["labels"]["nodepool"] for metric in body["metrics"] for series in metric["series"]}
    assert pools == expected_pools
    assert [metric["metric"] for metric in body["metrics"]] == [info.name for info in METRICS]


@pytest.mark.parametrize(
    "history", ["abc", "-1h", "6 hours", "inf", "1e300s", "nan", "", "1", "1.5", "1e400", "9" * 30 + "w"]
)
def test_bad_history_is_400(ops_server: OpsServer, history: str):
    code, body = ops_server.get_json(f"/api/v1/forecasts/gpu_demand_forecast?history={quote(history)}")
    assert code == 400
    message = f"invalid history {history!r}: expected a duration with a unit, e.g. 6h or 90m"
    assert body == status(400, "BadRequest", message, "history")


def test_openapi_document_is_served(ops_server: OpsServer):
    code, body = ops_server.get_json("/openapi.json")
    assert code == 200
    assert body["openapi"].startswith("3.")
    assert set(body["paths"]) == {
        "/api/v1/forecasts", "/api/v1/forecasts/{metric}", "/api/v1/capacity-buffers", "/api/v1/scorecard",
        "/api/v1/launches", "/openapi.json",
    }  # fmt: skip


def test_the_scorecard_gives_each_period_of_each_pool(ops_server: OpsServer):
    code, body = ops_server.get_json("/api/v1/scorecard")
    period = {
        "minutes_scored": 3,
        "minutes_short": 1,
        "minutes_short_fraction": round(1 / 3, 6),
        "short_gpu_minutes": 2.0,
        "idle_gpu_hours": 0.1,
        "gpu_allocation": 0.75,
        "busy_utilization": None,  # no dcgm-exporter here
        "capacity_wait_seconds": {"count": 1, "p50": 45.0, "p95": 45.0, "max": 45.0},
        "window_start_delay_seconds": {"count": 1, "p50": 420.0, "p95": 420.0, "max": 420.0},
        "queue_wait_seconds": {kind: {"count": 0, "p50": None, "p95": None, "max": None}
                               for kind in ("quota", "admission_check", "capacity")},
        "coverage": {"gpu_headroom": {"covered": 0, "judged": 1, "coverage": 0.0}},
    }  # fmt: skip
    assert (code, body) == (
        200,
        {
            "at": "2020-05-29T00:00:42Z",
            "cluster_queues": [],  # Kueue's histograms: not read here
            "pools": [
                {
                    "pool": "a100",
                    "periods": {"1h": period, "24h": period, "7d": period},
                    "targets": {"gpu_headroom": observed_target(1 / 3)},
                }
            ],
        },
    )


def observed_target(live: float) -> dict[str, Any]:
    """The conftest's TARGET as the API shows it, the pool having attained ``live`` in every window."""
    return {
        "kind": "minutes_short_fraction",
        "value": TARGET.value,
        "description": "at most 1 % of minutes with any GPU short",
        "tune_window_seconds": 7 * 86400.0,
        "attained": {
            "live": {"tune": round(live, 6), "1h": round(live, 6), "6h": round(live, 6), "24h": round(live, 6)},
            "replay": TARGET.replay_attained,
        },
        "error_budget_remaining": round(1 - live / TARGET.value, 6),
        "chosen": TARGET.chosen,
        "chosen_at": "2020-05-28T23:00:00Z",
        "reason": TARGET.reason,
    }


def test_a_headroom_served_to_a_target_shows_it_observed(ops_server: OpsServer):
    """The scored pool had 1 of its 3 minutes short: a third, 33 times the 1 % target, the budget overspent."""
    code, body = ops_server.get_json("/api/v1/forecasts/gpu_headroom")
    assert code == 200
    assert [series["target"] for series in body] == [observed_target(1 / 3)]
    assert observed_target(1 / 3)["error_budget_remaining"] == -32.333333


def test_a_target_in_an_unscored_pool_shows_nothing_attained(ops_server: OpsServer):
    ops_server.app[SCORECARD].cards.clear()
    code, body = ops_server.get_json("/api/v1/forecasts/gpu_headroom")
    (series,) = body
    assert code == 200
    assert series["target"]["attained"] == {
        "live": {"tune": None, "1h": None, "6h": None, "24h": None},
        "replay": TARGET.replay_attained,
    }
    assert series["target"]["error_budget_remaining"] is None


def test_the_scorecard_without_pools_is_empty(ops_server: OpsServer):
    ops_server.app[SCORECARD].cards.clear()
    assert ops_server.get_json("/api/v1/scorecard") == (
        200,
        {"at": "2020-05-29T00:00:42Z", "cluster_queues": [], "pools": []},
    )
