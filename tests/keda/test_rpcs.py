"""Every RPC of KEDA's ExternalScaler through a real grpcio client, with the message shapes KEDA sends.

The snapshot is ``tests.autoscaler.conftest.fixed_snapshot``: gpu_demand_forecast 12 (pool=a100,
region=eu) and 3.25 (pool=h100, region=us), gpu_headroom 0.5 (pool=a100), request_rate_forecast 41
(service=llm) in namespace ``inference`` only.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta

import grpc
import pytest

from autoscaler.keda import externalscaler_pb2 as pb
from autoscaler.selectors import SelectorError, parse_selector
from autoscaler.serving.provider import ServedSeries, empty_snapshot
from tests.eventually import eventually
from tests.keda.conftest import ref


def metrics_request(metric_name: str = "gpu_headroom", namespace: str = "default", **metadata: str):
    return pb.GetMetricsRequest(scaledObjectRef=ref(namespace, **metadata), metricName=metric_name)


async def refusal(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value


async def test_get_metric_spec_names_the_metric_and_its_target(stub):
    response = await stub.GetMetricSpec(ref(targetValue="2.5"))
    assert list(response.metricSpecs) == [pb.MetricSpec(metricName="gpu_headroom", targetSize=3, targetSizeFloat=2.5)]


async def test_get_metrics_serves_the_snapshot_value(stub):
    response = await stub.GetMetrics(metrics_request())
    assert list(response.metricValues) == [
        pb.MetricValue(metricName="gpu_headroom", metricValue=1, metricValueFloat=0.5)
    ]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", 15.25),  # every series: 12 + 3.25, what an HPA sums from the list
        ("region in (eu,us)", 15.25),
        ("pool!=h100", 12.0),
        ("region=us", 3.25),
    ],
)
async def test_get_metrics_sums_the_series_the_selector_matches(stub, selector, expected):
    request = metrics_request("gpu_demand_forecast", metric="gpu_demand_forecast", labelSelector=selector)
    response = await stub.GetMetrics(request)
    assert [(v.metricName, v.metricValueFloat, v.metricValue) for v in response.metricValues] == [
        ("gpu_demand_forecast", expected, -(-expected // 1))
    ]


async def test_a_namespaced_series_is_served_in_its_namespace_only(stub):
    metadata = {"metric": "request_rate_forecast", "labelSelector": "service=llm", "targetValue": "10"}
    response = await stub.GetMetrics(metrics_request("request_rate_forecast", "inference", **metadata))
    assert response.metricValues[0].metricValueFloat == 41.0
    error = await refusal(stub.GetMetrics(metrics_request("request_rate_forecast", "default", **metadata)))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error.details() == (
        "no series of external metric 'request_rate_forecast' in namespace 'default' matches the selector"
    )


async def test_an_empty_metric_name_reads_the_triggers_metric(stub):
    response = await stub.GetMetrics(metrics_request(""))
    assert response.metricValues[0].metricName == "gpu_headroom"


@pytest.mark.parametrize(("activation", "active"), [(None, True), ("0.4", True), ("0.5", False), ("7", False)])
async def test_is_active_while_the_value_is_above_the_activation_value(stub, activation, active):
    metadata = {"activationValue": activation} if activation is not None else {}
    assert (await stub.IsActive(ref(**metadata))).result is active


def selector_message(text: str) -> str:
    with pytest.raises(SelectorError) as raised:
        parse_selector(text)
    return f"invalid labelSelector: {raised.value}"


INVALID = [
    ({"metric": ""}, "missing metric: the trigger's metadata must name the metric to serve"),
    ({"targetValue": ""}, "missing targetValue: the trigger's metadata must give it (a number such as '1')"),
    ({"targetValue": "0"}, "invalid targetValue: must be a number greater than 0, got '0'"),
    ({"targetValue": "two"}, "invalid targetValue: must be a number greater than 0, got 'two'"),
    ({"targetValue": "inf"}, "invalid targetValue: must be a number greater than 0, got 'inf'"),
    ({"activationValue": "nan"}, "invalid activationValue: must be a finite number, got 'nan'"),
    ({"labelSelector": "pool in ()"}, selector_message("pool in ()")),
    ({"labelSelector": "pool=a100,"}, selector_message("pool=a100,")),
    ({"labelselector": "pool=h100"}, "invalid key labelselector: the key is spelled labelSelector"),
]


@pytest.mark.parametrize(("metadata", "message"), INVALID)
async def test_bad_metadata_is_invalid_argument_naming_the_key(stub, metadata, message):
    error = await refusal(stub.GetMetricSpec(ref(**metadata)))
    assert (error.code(), error.details()) == (grpc.StatusCode.INVALID_ARGUMENT, message)


async def test_the_selector_error_is_the_external_metrics_apis(stub, api_server):
    """The same bad selector over HTTPS and over gRPC: the same message."""
    import aiohttp

    url = f"{api_server.base_url}/apis/external.metrics.k8s.io/v1beta1/namespaces/default/gpu_headroom"
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, params={"labelSelector": "pool in (a"}, ssl=api_server.ssl_context(api_server.pki.alice)) as r,
    ):
        body = await r.json()
    error = await refusal(stub.GetMetrics(metrics_request(labelSelector="pool in (a")))
    assert r.status == 400 and error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == body["message"]


async def test_every_rpc_refuses_bad_metadata(stub):
    bad = ref(targetValue="-1")
    expected = (grpc.StatusCode.INVALID_ARGUMENT, "invalid targetValue: must be a number greater than 0, got '-1'")
    for call in (
        stub.GetMetricSpec(bad),
        stub.IsActive(bad),
        stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=bad, metricName="gpu_headroom")),
    ):
        error = await refusal(call)
        assert (error.code(), error.details()) == expected
    for stream in (stub.StreamIsActive(bad), stub.StreamMetricSpec(bad)):
        error = await refusal(stream.read())
        assert (error.code(), error.details()) == expected


async def test_a_bad_namespace_is_refused_with_kube_apiservers_rule(stub):
    error = await refusal(stub.IsActive(ref(namespace="Not_A_Namespace")))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith(
        'invalid scaledObjectRef.namespace: invalid namespace "Not_A_Namespace": a lowercase RFC 1123 label'
    )


async def test_a_metric_name_other_than_the_triggers_is_refused(stub):
    error = await refusal(stub.GetMetrics(metrics_request("gpu_demand_forecast")))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "invalid metricName: 'gpu_demand_forecast' is not the metric of this trigger ('gpu_headroom', "
        "from its metadata key metric)"
    )


async def test_unknown_metric_and_unmatched_selector_are_not_found(stub):
    error = await refusal(stub.GetMetricSpec(ref(metric="no_such_metric")))
    assert (error.code(), error.details()) == (
        grpc.StatusCode.NOT_FOUND,
        "external metric 'no_such_metric' is not served by this configuration; "
        "served: gpu_demand_forecast, gpu_headroom, request_rate_forecast",
    )
    error = await refusal(stub.IsActive(ref(labelSelector="pool=v100")))
    assert (error.code(), error.details()) == (
        grpc.StatusCode.NOT_FOUND,
        "no series of external metric 'gpu_headroom' in namespace 'default' matches the selector",
    )


async def test_a_stale_metric_with_error_fallback_is_unavailable(stub, scaler):
    snapshot = scaler.provider.snapshot
    info = replace(snapshot.metrics["gpu_headroom"], fallback="error")
    scaler.provider.swap(replace(snapshot, metrics={**snapshot.metrics, "gpu_headroom": info}))
    scaler.clock.now = snapshot.created_at + info.staleness_ttl * 2
    error = await refusal(stub.GetMetrics(metrics_request()))
    assert (error.code(), error.details()) == (
        grpc.StatusCode.UNAVAILABLE,
        "external metric 'gpu_headroom' is stale (1800 s old, TTL 900 s); the HPA keeps its current replicas",
    )
    # hold (the default) keeps serving the last value past the TTL; GetMetricSpec needs no value
    every_forecast = {"metric": "gpu_demand_forecast", "labelSelector": ""}
    response = await stub.GetMetrics(metrics_request("gpu_demand_forecast", **every_forecast))
    assert response.metricValues[0].metricValueFloat == 15.25
    assert (await stub.GetMetricSpec(ref())).metricSpecs[0].targetSizeFloat == 1.0


async def test_during_warm_up_get_metrics_and_is_active_are_unavailable_saying_when(stub, scaler):
    scaler.provider.swap(empty_snapshot(tuple(scaler.provider.snapshot.metrics.values())))
    scaler.provider.expect_first_forecast(scaler.clock.now + timedelta(seconds=42))
    for call in (stub.GetMetrics(metrics_request()), stub.IsActive(ref())):
        error = await refusal(call)
        assert (error.code(), error.details()) == (
            grpc.StatusCode.UNAVAILABLE,
            "gpu-autoscaler is warming up: the first forecast is due by 2026-11-22T08:01:12Z (in 42 s); "
            "no value of 'gpu_headroom' yet",
        )
    assert (await stub.GetMetricSpec(ref())).metricSpecs[0].targetSizeFloat == 1.0  # needs no value


async def test_a_static_fallback_is_summed_per_series(stub, scaler):
    snapshot = scaler.provider.snapshot
    info = replace(snapshot.metrics["gpu_demand_forecast"], fallback="static", fallback_value=2.0)
    scaler.provider.swap(replace(snapshot, metrics={**snapshot.metrics, "gpu_demand_forecast": info}))
    scaler.clock.now = snapshot.created_at + info.staleness_ttl * 2
    every_forecast = {"metric": "gpu_demand_forecast", "labelSelector": ""}
    response = await stub.GetMetrics(metrics_request("gpu_demand_forecast", **every_forecast))
    assert response.metricValues[0].metricValueFloat == 4.0  # two series, each at the static 2


async def test_a_new_snapshot_is_served_at_once(stub, scaler):
    snapshot = scaler.provider.snapshot
    series = (ServedSeries("gpu_headroom", {"pool": "a100"}, 6.0, snapshot.created_at),)
    scaler.provider.swap(replace(snapshot, series={**snapshot.series, "gpu_headroom": series}))
    response = await stub.GetMetrics(metrics_request())
    assert response.metricValues[0].metricValueFloat == 6.0


async def test_internal_errors_leak_nothing_and_are_logged(stub, scaler, caplog):
    def explode(*args, **kwargs):
        raise RuntimeError("secret database password in /etc/internal")

    scaler.provider.get_metric = explode  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="autoscaler.keda.interceptor"):
        error = await refusal(stub.GetMetrics(metrics_request()))
    assert (error.code(), error.details()) == (
        grpc.StatusCode.INTERNAL,
        "Internal error occurred: the request could not be served",
    )
    assert [record.getMessage() for record in caplog.records] == ["internal error serving gRPC GetMetrics"]
    assert "secret database password" in caplog.text  # in the log (the traceback), never in the answer
    await eventually(
        lambda: scaler.sample("gpu_autoscaler_grpc_requests_total", {"method": "GetMetrics", "code": "INTERNAL"}) == 1,
        message="the internal error counted",
    )


async def test_request_metrics_count_each_call_by_method_and_code(stub, scaler):
    await stub.GetMetrics(metrics_request())
    await stub.GetMetrics(metrics_request())
    await refusal(stub.GetMetrics(metrics_request(metric="nope")))
    await stub.IsActive(ref())
    sample = scaler.sample
    # The server counts a call just after the caller has its answer (on the server's own thread).
    await eventually(
        lambda: sample("gpu_autoscaler_grpc_request_duration_seconds_count", {"method": "IsActive"}) == 1,
        message="the last call counted",
    )
    assert sample("gpu_autoscaler_grpc_requests_total", {"method": "GetMetrics", "code": "OK"}) == 2
    assert sample("gpu_autoscaler_grpc_requests_total", {"method": "GetMetrics", "code": "NOT_FOUND"}) == 1
    assert sample("gpu_autoscaler_grpc_requests_total", {"method": "IsActive", "code": "OK"}) == 1
    assert sample("gpu_autoscaler_grpc_request_duration_seconds_count", {"method": "GetMetrics"}) == 3
    assert 0 < sample("gpu_autoscaler_grpc_request_duration_seconds_sum", {"method": "GetMetrics"}) < 3
