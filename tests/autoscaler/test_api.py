"""The external metrics API over real TLS with client certificates: exact JSON shapes and codes."""

from __future__ import annotations

from datetime import timedelta

import aiohttp
import pytest

from autoscaler.serving.provider import empty_snapshot
from tests.autoscaler.conftest import METRICS, RunningServer, fixed_snapshot

PREFIX = "/apis/external.metrics.k8s.io/v1beta1"


async def get(server: RunningServer, path: str, *, method: str = "GET", client="alice", headers=None, **params):
    cert = getattr(server.pki, client) if client else None
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, server.base_url + path, ssl=server.ssl_context(cert), params=params or None, headers=headers
        ) as response,
    ):
        return response.status, response.headers.get("Content-Type", ""), await response.json(content_type=None)


def status(code: int, reason: str, message: str, **details: str) -> dict:
    document = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        document["details"] = {"group": "external.metrics.k8s.io", **details}
    return document


async def test_discovery_documents(api_server):
    code, content_type, body = await get(api_server, "/apis")
    assert (code, content_type) == (200, "application/json; charset=utf-8")
    version = {"groupVersion": "external.metrics.k8s.io/v1beta1", "version": "v1beta1"}
    assert body == {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [{"name": "external.metrics.k8s.io", "versions": [version], "preferredVersion": version}],
    }
    code, _, body = await get(api_server, "/apis/external.metrics.k8s.io")
    assert code == 200
    assert body == {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": "external.metrics.k8s.io",
        "versions": [version],
        "preferredVersion": version,
    }
    code, _, body = await get(api_server, PREFIX)
    assert code == 200
    assert body == {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": "external.metrics.k8s.io/v1beta1",
        "resources": [
            {"name": name, "singularName": "", "namespaced": True, "kind": "ExternalMetricValueList", "verbs": ["get"]}
            for name in ("gpu_demand_forecast", "gpu_headroom", "request_rate_forecast")
        ],
    }


async def test_metric_with_selector(api_server):
    code, _, body = await get(
        api_server, f"{PREFIX}/namespaces/default/gpu_demand_forecast", labelSelector="pool in (h100)"
    )
    assert code == 200
    assert body == {
        "kind": "ExternalMetricValueList",
        "apiVersion": "external.metrics.k8s.io/v1beta1",
        "metadata": {},
        "items": [
            {
                "metricName": "gpu_demand_forecast",
                "metricLabels": {"pool": "h100", "region": "us"},
                "timestamp": "2026-11-22T08:00:00Z",
                "window": 300,
                "value": "3250m",
            }
        ],
    }


async def test_no_selector_returns_every_series(api_server):
    code, _, body = await get(api_server, f"{PREFIX}/namespaces/anything/gpu_demand_forecast")
    assert code == 200
    assert [(item["metricLabels"]["pool"], item["value"]) for item in body["items"]] == [
        ("a100", "12"),
        ("h100", "3250m"),
    ]
    assert all("metricLabels" in item for item in body["items"])


async def test_namespaced_series_only_in_its_namespace(api_server):
    code, _, body = await get(api_server, f"{PREFIX}/namespaces/inference/request_rate_forecast")
    assert code == 200 and body["items"][0]["value"] == "41"
    code, _, body = await get(api_server, f"{PREFIX}/namespaces/default/request_rate_forecast")
    assert code == 404
    assert body["reason"] == "NotFound"


async def test_unknown_metric_is_a_404_status(api_server):
    code, _, body = await get(api_server, f"{PREFIX}/namespaces/default/no_such_metric")
    assert code == 404
    assert body == status(
        404,
        "NotFound",
        "external metric 'no_such_metric' is not served by this configuration; "
        "served: gpu_demand_forecast, gpu_headroom, request_rate_forecast",
        name="no_such_metric",
        kind="ExternalMetricValueList",
    )


def warming_up(message: str, retry_after: int, metric: str = "gpu_demand_forecast") -> dict:
    document = status(503, "ServiceUnavailable", message, name=metric, kind="ExternalMetricValueList")
    document["details"]["retryAfterSeconds"] = retry_after
    return document


async def get_with_retry_after(server: RunningServer, path: str) -> tuple[int, str | None, dict]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(server.base_url + path, ssl=server.ssl_context(server.pki.alice)) as response,
    ):
        return response.status, response.headers.get("Retry-After"), await response.json()


async def test_warm_up_is_a_503_status_saying_when_the_first_forecast_is_due(api_server):
    provider, now = api_server.provider, api_server.clock.now  # 08:00:30
    provider.swap(empty_snapshot(METRICS))
    provider.expect_first_forecast(now + timedelta(seconds=42))
    path = f"{PREFIX}/namespaces/default/gpu_demand_forecast"
    assert await get_with_retry_after(api_server, path) == (
        503,
        "10",  # at most RETRY_AFTER_MAX_S: client-go clients wait that long, up to 10 times
        warming_up(
            "gpu-autoscaler is warming up: the first forecast is due by 2026-11-22T08:01:12Z (in 42 s); "
            "no value of 'gpu_demand_forecast' yet",
            10,
        ),
    )
    api_server.clock.now = now + timedelta(seconds=38)
    code, retry_after, body = await get_with_retry_after(api_server, path + "?labelSelector=pool%3Da100")
    assert (code, retry_after, body["details"]["retryAfterSeconds"]) == (503, "4", 4)
    assert "(in 4 s)" in body["message"]
    api_server.clock.now = now + timedelta(seconds=50)
    assert await get_with_retry_after(api_server, path) == (
        503,
        "1",
        warming_up(
            "gpu-autoscaler is warming up: the first forecast was due by 2026-11-22T08:01:12Z and is late "
            "(see /readyz?verbose); no value of 'gpu_demand_forecast' yet",
            1,
        ),
    )
    # A metric the configuration does not serve is still a 404 that says so.
    code, _, body = await get(api_server, f"{PREFIX}/namespaces/default/replicas_forecast")
    assert (code, body["reason"]) == (404, "NotFound")
    assert body["message"] == (
        "external metric 'replicas_forecast' is not served by this configuration; "
        "served: gpu_demand_forecast, gpu_headroom, request_rate_forecast"
    )
    # The first snapshot with values ends the warm-up: values, and a selector matching nothing is a 404 again.
    provider.swap(fixed_snapshot())
    assert provider.first_forecast_due is None
    code, _, body = await get(api_server, path)
    assert code == 200 and len(body["items"]) == 2
    code, _, body = await get(api_server, path, labelSelector="pool=v100")
    assert (code, body["reason"]) == (404, "NotFound")


async def test_selector_matching_nothing_is_a_404_not_an_empty_list(api_server):
    code, _, body = await get(api_server, f"{PREFIX}/namespaces/default/gpu_demand_forecast", labelSelector="pool=v100")
    assert code == 404
    assert "matches the selector" in body["message"]


@pytest.mark.parametrize("selector", ["pool in (a", "pool==", "a b", "!", "pool in ()"])
async def test_malformed_selector_is_a_400(api_server, selector):
    code, _, body = await get(api_server, f"{PREFIX}/namespaces/default/gpu_demand_forecast", labelSelector=selector)
    if selector == "pool==":  # an empty value is valid Kubernetes syntax; it just matches nothing here
        assert code == 404
        return
    assert code == 400
    assert (
        body["kind"] == "Status"
        and body["reason"] == "BadRequest"
        and body["message"].startswith("invalid labelSelector: ")
    )


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
async def test_other_verbs_are_405(api_server, method):
    code, _, body = await get(api_server, f"{PREFIX}/namespaces/default/gpu_demand_forecast", method=method)
    assert code == 405
    assert body["reason"] == "MethodNotAllowed" and body["code"] == 405


async def test_unknown_paths_are_404_status(api_server):
    for path in (
        "/apis/metrics.k8s.io/v1beta1",
        f"{PREFIX}/namespaces/default",
        "/openapi/v2",
        "/openapi/v3",
        "/etc/passwd",
    ):
        code, _, body = await get(api_server, path)
        assert code == 404, path
        assert body["kind"] == "Status" and body["reason"] == "NotFound"


async def test_version_document(api_server):
    code, _, body = await get(api_server, "/version", timeout="5s")
    assert code == 200
    assert set(body) == {
        "major",
        "minor",
        "gitVersion",
        "gitCommit",
        "gitTreeState",
        "buildDate",
        "goVersion",
        "compiler",
        "platform",
    }
    assert body["gitVersion"] == "v0.1.0"


async def test_probes_need_no_authentication(api_server):
    for path in ("/healthz", "/livez", "/readyz"):
        async with aiohttp.ClientSession() as session:
            async with session.get(api_server.base_url + path, ssl=api_server.ssl_context(None)) as response:
                assert response.status == 200 and await response.text() == "ok"
            async with session.get(api_server.ops_url + path) as response:
                assert response.status == 200


async def test_readyz_reports_warm_up(api_server):
    api_server.readiness.ready, api_server.readiness.reason = False, "warming up: no forecast yet"
    async with (
        aiohttp.ClientSession() as session,
        session.get(api_server.ops_url + "/readyz", params={"verbose": ""}) as response,
    ):
        assert response.status == 503
        assert "[-]snapshot: warming up: no forecast yet" in await response.text()


async def test_internal_errors_leak_nothing(api_server):
    def explode(*args, **kwargs):
        raise RuntimeError("secret database password in /etc/internal")

    api_server.provider.get_metric = explode  # type: ignore[method-assign]
    code, _, body = await get(api_server, f"{PREFIX}/namespaces/default/gpu_demand_forecast")
    assert code == 500
    assert body == status(500, "InternalError", "Internal error occurred: the request could not be served")


async def test_stale_metric_with_error_fallback_is_503(api_server):
    from dataclasses import replace

    snapshot = api_server.provider.snapshot
    info = replace(snapshot.metrics["gpu_headroom"], fallback="error")
    api_server.provider.swap(replace(snapshot, metrics={**snapshot.metrics, "gpu_headroom": info}))
    api_server.clock.now = snapshot.created_at + info.staleness_ttl * 2
    code, _, body = await get(api_server, f"{PREFIX}/namespaces/default/gpu_headroom")
    assert code == 503
    assert body["reason"] == "ServiceUnavailable" and "stale" in body["message"]
    # hold (the default) keeps serving the last value past the TTL
    code, _, body = await get(api_server, f"{PREFIX}/namespaces/default/gpu_demand_forecast")
    assert code == 200 and body["items"]


async def test_metrics_endpoint_counts_requests(api_server):
    await get(api_server, f"{PREFIX}/namespaces/default/gpu_demand_forecast")
    await get(api_server, f"{PREFIX}/namespaces/default/nope")
    async with aiohttp.ClientSession() as session, session.get(api_server.ops_url + "/metrics") as response:
        text = await response.text()
    route = "/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/{metric}"
    assert f'gpu_autoscaler_api_requests_total{{code="200",route="{route}"}} 1.0' in text
    assert f'gpu_autoscaler_api_requests_total{{code="404",route="{route}"}} 1.0' in text
    assert 'gpu_autoscaler_served_value{label_pool="a100",label_region="eu",metric="gpu_demand_forecast"} 12.0' in text
