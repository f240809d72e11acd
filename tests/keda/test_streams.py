"""The push RPCs: StreamIsActive sends the activity at once and again when it changes; StreamMetricSpec
sends the spec at once, the same as GetMetricSpec; both end cleanly when the server stops."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from datetime import timedelta

import grpc
import pytest

from autoscaler.app.api_loop import on_own_loop
from autoscaler.app.serving import GRPC_THREAD
from autoscaler.keda import externalscaler_pb2 as pb
from autoscaler.keda.externalscaler_pb2_grpc import ExternalScalerStub
from autoscaler.keda.server import serving_grpc
from autoscaler.serving.provider import ServedSeries, SnapshotProvider
from autoscaler.web.security.tls import ServingFiles
from autoscaler.web.shared.self_metrics import SelfMetrics
from tests.autoscaler.conftest import NOW, SettableClock, fixed_snapshot
from tests.eventually import eventually
from tests.keda.conftest import Scaler, grpc_settings, ref
from tests.pki import PKI


def with_headroom(scaler: Scaler, value: float) -> None:
    """Swap in a new snapshot whose gpu_headroom (pool=a100) is ``value``, as the refresher does."""
    snapshot = scaler.provider.snapshot
    series = (ServedSeries("gpu_headroom", {"pool": "a100"}, value, snapshot.created_at),)
    scaler.provider.swap(replace(snapshot, series={**snapshot.series, "gpu_headroom": series}))


async def test_stream_is_active_pushes_when_the_activity_changes(stub, scaler):
    call = stub.StreamIsActive(ref(activationValue="1"))
    assert (await call.read()).result is False  # 0.5 is not above 1: sent at once
    with_headroom(scaler, 3.0)
    assert (await call.read()).result is True
    with_headroom(scaler, 2.0)  # still active: nothing to push
    with_headroom(scaler, 4.0)
    with_headroom(scaler, 0.0)
    # The next message is the change to inactive: the swaps that kept it active sent nothing.
    assert (await call.read()).result is False
    assert scaler.sample("gpu_autoscaler_grpc_streams_open", {"method": "StreamIsActive"}) == 1
    call.cancel()
    # The server (its own thread) closes the stream, then counts it.
    await eventually(
        lambda: (
            scaler.sample("gpu_autoscaler_grpc_requests_total", {"method": "StreamIsActive", "code": "CANCELLED"}) == 1
        ),
        message="the cancelled stream to be closed on the server and counted",
    )
    assert scaler.sample("gpu_autoscaler_grpc_streams_open", {"method": "StreamIsActive"}) == 0


# Not on looptime: gRPC's network I/O is not loop activity looptime sees, so fast-forwarded time would
# run out the deadline while the answer is on its way; the fixture's recheck interval is 0.2 s instead.
async def test_stream_is_active_ends_unavailable_when_the_metric_turns_stale(stub, scaler):
    snapshot = scaler.provider.snapshot
    info = replace(snapshot.metrics["gpu_headroom"], fallback="error")
    scaler.provider.swap(replace(snapshot, metrics={**snapshot.metrics, "gpu_headroom": info}))
    call = stub.StreamIsActive(ref())
    assert (await call.read()).result is True
    # Time alone makes it stale: no swap, the stream's periodic re-read notices (0.2 s here).
    scaler.clock.now = snapshot.created_at + info.staleness_ttl + timedelta(seconds=1)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await asyncio.wait_for(call.read(), 10)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "is stale (901 s old, TTL 900 s)" in raised.value.details()


async def test_stream_metric_spec_sends_what_get_metric_spec_answers(stub):
    call = stub.StreamMetricSpec(ref(targetValue="4"))
    first = await call.read()
    assert first == await stub.GetMetricSpec(ref(targetValue="4"))
    assert list(first.metricSpecs) == [pb.MetricSpec(metricName="gpu_headroom", targetSize=4, targetSizeFloat=4.0)]
    call.cancel()


def alices_channel(pki: PKI, port: int) -> grpc.aio.Channel:
    credentials = grpc.ssl_channel_credentials(
        pki.client_ca.read_bytes(), pki.alice.key.read_bytes(), pki.alice.cert.read_bytes()
    )
    return grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials)


async def test_stopping_the_server_ends_open_streams_with_ok(pki):
    provider = SnapshotProvider(fixed_snapshot(), clock=SettableClock(NOW))
    metrics = SelfMetrics()
    serving = ServingFiles(pki.serving_cert, pki.serving_key)
    settings = grpc_settings(pki, shutdown_grace="30s")
    context = on_own_loop(GRPC_THREAD, serving_grpc(settings, provider=provider, self_metrics=metrics, serving=serving))
    listening = await context.__aenter__()
    async with alices_channel(pki, listening.port) as channel:
        stub = ExternalScalerStub(channel)
        active, spec = stub.StreamIsActive(ref()), stub.StreamMetricSpec(ref())
        assert (await active.read()).result is True
        assert len((await spec.read()).metricSpecs) == 1
        loop = asyncio.get_running_loop()
        started = loop.time()
        await context.__aexit__(None, None, None)
        assert await active.read() is grpc.aio.EOF
        assert await spec.read() is grpc.aio.EOF
        assert await active.code() == grpc.StatusCode.OK and await spec.code() == grpc.StatusCode.OK
        assert loop.time() - started < 10  # the streams ended at once, not after shutdown_grace
    for method in ("StreamIsActive", "StreamMetricSpec"):
        assert metrics.registry.get_sample_value("gpu_autoscaler_grpc_requests_total", {"method": method, "code": "OK"})
    assert not any(thread.name == GRPC_THREAD for thread in threading.enumerate()), "the gRPC thread outlived it"


async def test_closing_the_scaler_from_the_main_loop_ends_streams_served_on_its_thread(scaler, stub):
    """What ``serve`` does at SIGTERM (``end_streams``), before the shutdown delay: streams end with OK
    while unary calls are still answered."""
    streams = [stub.StreamIsActive(ref(activationValue=str(value))) for value in range(1, 6)]
    assert [(await stream.read()).result for stream in streams] == [False] * 5
    scaler.listening.scaler.close()
    for stream in streams:
        assert await asyncio.wait_for(stream.read(), 10) is grpc.aio.EOF
        assert await stream.code() == grpc.StatusCode.OK
    assert (await stub.IsActive(ref())).result is True
