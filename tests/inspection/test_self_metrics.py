"""/metrics on the ops port: the service's own metrics, parsed with prometheus_client's parser."""

from __future__ import annotations

import math
from datetime import timedelta

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.refresh.refresher import RefreshStats
from autoscaler.serving.provider import ServedSeries, Snapshot
from autoscaler.web.shared.self_metrics import RefreshCollector, SnapshotCollector
from tests.inspection.conftest import LEAD_TIME, NOW, QUANTILE, SCRAPE_DELAY, OpsServer


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    parsed: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            parsed.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return parsed


def only(found: dict, name: str, **labels: str) -> float:
    matching = [value for sample_labels, value in found[name] if labels.items() <= sample_labels.items()]
    assert len(matching) == 1, (name, labels, found.get(name))
    return matching[0]


def types(text: str) -> dict[str, str]:
    return {family.name: family.type for family in text_string_to_metric_families(text)}


def test_forecast_metrics_from_the_snapshot(ops_server: OpsServer):
    ops_server.get("/api/v1/forecasts/gpu_demand_forecast")  # one request, counted below
    code, content_type, body = ops_server.get("/metrics")
    assert code == 200 and content_type.startswith("text/plain")
    text = body.decode()
    found = samples(text)
    forecast = ops_server.forecast.result
    a100 = {"metric": "gpu_demand_forecast", "label_nodepool": "a100"}

    assert only(found, "gpu_autoscaler_served_value", **a100) == ops_server.forecast.demand.value
    assert only(found, "gpu_autoscaler_served_value", metric="gpu_demand_forecast", label_nodepool="h100") == 3.0
    assert only(found, "gpu_autoscaler_served_value", metric="gpu_headroom") == ops_server.forecast.headroom.value

    # Forecast peaks over [now, now + lead time] (7 steps of 5 minutes, both ends included).
    steps = forecast.forecast.timestamps <= NOW + LEAD_TIME
    upper = max(forecast.forecast.quantiles[QUANTILE][steps])
    mean = max(forecast.forecast.mean[steps])
    assert only(found, "gpu_autoscaler_forecast_upper", **a100) == upper
    assert [labels["quantile"] for labels, _ in found["gpu_autoscaler_forecast_upper"]] == ["0.9", "0.9"]
    assert only(found, "gpu_autoscaler_forecast_mean", **a100) == mean
    # The served demand is that peak plus the scheduled window's 64 GPUs.
    assert math.isclose(ops_server.forecast.demand.value, upper + 64)

    assert only(found, "gpu_autoscaler_series_age_seconds", **a100) == SCRAPE_DELAY.total_seconds()
    h100_age = only(found, "gpu_autoscaler_series_age_seconds", metric="gpu_demand_forecast", label_nodepool="h100")
    assert h100_age == (SCRAPE_DELAY + timedelta(minutes=2)).total_seconds()
    assert only(found, "gpu_autoscaler_lead_time_seconds", **a100) == LEAD_TIME.total_seconds()
    assert only(found, "gpu_autoscaler_fit_duration_seconds", **a100) == forecast.fit_seconds

    assert [
        labels for labels, _ in found["gpu_autoscaler_model_info"] if labels["metric"] == "gpu_demand_forecast"
    ] == [{**a100, "model": forecast.model}]
    pinball = {
        labels["model"]: value
        for labels, value in found["gpu_autoscaler_backtest_pinball"]
        if labels["metric"] == "gpu_demand_forecast"
    }
    assert pinball == {model: score["pinball"] for model, score in forecast.scores.items()}
    under = only(found, "gpu_autoscaler_under_provision_rate", **a100)
    assert under == forecast.scores[forecast.model]["under_provision_rate"]
    assert only(found, "gpu_autoscaler_snapshot_timestamp_seconds") == NOW.timestamp()

    # The series without details has values and age, but no forecast, model or scores.
    for name in ("gpu_autoscaler_forecast_upper", "gpu_autoscaler_model_info", "gpu_autoscaler_backtest_pinball"):
        assert all(labels.get("label_nodepool") != "h100" for labels, _ in found[name]), name

    # Request counters and latency by route template and code (from the middleware).
    route = "/api/v1/forecasts/{metric}"
    assert only(found, "gpu_autoscaler_api_requests_total", route=route, code="200") == 1.0
    assert only(found, "gpu_autoscaler_api_request_duration_seconds_count", route=route) == 1.0

    assert types(text) | {
        "gpu_autoscaler_served_value": "gauge",
        "gpu_autoscaler_forecast_upper": "gauge",
        "gpu_autoscaler_series_age_seconds": "gauge",
        "gpu_autoscaler_api_requests": "counter",
        "gpu_autoscaler_api_request_duration_seconds": "histogram",
    } == types(text)
    assert all(name.startswith("gpu_autoscaler_") for name in types(text))


def test_refresh_metrics_from_the_stats():
    stats = RefreshStats(
        refreshes=7,
        failures={"gpus_requested": 2},
        last_success={"gpus_requested": NOW - timedelta(minutes=3), "request_rate": NOW},
        last_error={"gpus_requested": "pull failed"},
        last_duration_s=1.25,
    )
    current: list[RefreshStats | None] = [None]
    registry = CollectorRegistry()
    registry.register(RefreshCollector(lambda: current[0]))

    idle = samples(generate_latest(registry).decode())
    assert idle == {}  # no refresher yet: the families exist but have no samples

    current[0] = stats
    text = generate_latest(registry).decode()
    found = samples(text)
    assert found["gpu_autoscaler_refresh_failures_total"] == [
        ({"signal": "gpus_requested"}, 2.0),
        ({"signal": "request_rate"}, 0.0),
    ]
    assert found["gpu_autoscaler_last_success_timestamp_seconds"] == [
        ({"signal": "gpus_requested"}, (NOW - timedelta(minutes=3)).timestamp()),
        ({"signal": "request_rate"}, NOW.timestamp()),
    ]
    assert found["gpu_autoscaler_refreshes_total"] == [({}, 7.0)]
    assert found["gpu_autoscaler_refresh_duration_seconds"] == [({}, 1.25)]
    assert types(text) == {
        "gpu_autoscaler_last_success_timestamp_seconds": "gauge",
        "gpu_autoscaler_refresh_failures": "counter",
        "gpu_autoscaler_refreshes": "counter",
        "gpu_autoscaler_refresh_duration_seconds": "gauge",
    }


def test_label_keys_that_prometheus_cannot_take_are_sanitised():
    series = ServedSeries("m", {"karpenter.sh/nodepool": "a100"}, 1.0, NOW)
    snapshot = Snapshot(created_at=NOW, metrics={}, series={"m": (series,)})
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: snapshot, clock=lambda: NOW))
    found = samples(generate_latest(registry).decode())
    assert found["gpu_autoscaler_served_value"] == [({"metric": "m", "label_karpenter_sh_nodepool": "a100"}, 1.0)]
