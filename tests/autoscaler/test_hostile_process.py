"""Issue 30's cases against the running demo (one process for the module): restored values from the
future or not numbers, malformed gRPC, refused handshakes on both ports, and SIGTERM ending gRPC
streams at once although a shutdown delay keeps the process serving."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import socket
import ssl
import time
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import aiohttp
import grpc
import pytest

from autoscaler import persistence
from autoscaler.keda import externalscaler_pb2 as pb
from autoscaler.keda.externalscaler_pb2_grpc import ExternalScalerStub
from tests.autoscaler.demo_process import DemoProcess
from tests.eventually import eventually

SHUTDOWN_DELAY_S = 20
FUTURE = "2099-01-01T00:00:00+00:00"


def saved_values(now: datetime) -> str:
    """A good saved value, one stamped 2099 (a clock that was ahead), and one written as a string."""
    entry = {"metric": "gpu_headroom", "labels": {"pool": "demo-gpu"}, "timestamp": now.isoformat()}
    series = [{**entry, "value": 1}, {**entry, "value": 2, "timestamp": FUTURE}, {**entry, "value": "12"}]
    return json.dumps({"version": 1, "created_at": now.isoformat(), "series": series})


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoProcess]:
    state = tmp_path_factory.mktemp("hostile") / "state"
    state.mkdir()
    (state / persistence.FILE_NAME).write_text(saved_values(datetime.now(UTC) - timedelta(minutes=1)))
    process = DemoProcess(state, env={"GPU_AUTOSCALER_SERVER__SHUTDOWN_DELAY": f"{SHUTDOWN_DELAY_S}s"})
    process.start()
    yield process
    if process.process is not None and process.process.poll() is None:
        process.process.send_signal(signal.SIGTERM)  # a second signal ends the shutdown delay
        assert process.stop() == 0


def grpc_port(demo: DemoProcess) -> int:
    found = re.search(r"KEDA external scaler \(gRPC over TLS \(mutual TLS\)\) on 127\.0\.0\.1:(\d+)", demo.start_log)
    assert found, demo.start_log
    return int(found.group(1))


def demo_channel(demo: DemoProcess) -> grpc.aio.Channel:
    files = {name: (demo.state / name).read_bytes() for name in ("ca.crt", "client.key", "client.crt")}
    credentials = grpc.ssl_channel_credentials(files["ca.crt"], files["client.key"], files["client.crt"])
    return grpc.aio.secure_channel(f"127.0.0.1:{grpc_port(demo)}", credentials)


async def scrape(demo: DemoProcess) -> str:
    async with aiohttp.ClientSession() as session, session.get(f"{demo.http_url}/metrics") as response:
        return await response.text()


async def counted_in_metrics(demo: DemoProcess, sample: str) -> None:
    async def scraped() -> bool:
        return sample in await scrape(demo)

    await eventually(scraped, message=f"{sample} in /metrics")


def log_lines(demo: DemoProcess, pattern: str) -> list[str]:
    return [line for line in demo.lines if re.search(pattern, line)]


def test_the_demo_says_its_plain_port_needs_no_authentication(demo):
    assert re.search(
        r"probes and /metrics on http://127\.0\.0\.1:\d+ \(no authentication: server\.http_auth none; probes open\)",
        demo.start_log,
    ), demo.start_log


async def test_restored_values_from_the_future_or_not_numbers_are_dropped_naming_them(demo):
    path = demo.state / persistence.FILE_NAME
    await demo.wait_for_log(
        rf"dropping saved value 1 of {re.escape(str(path))}: ValueError: timestamp {re.escape(FUTURE)} is \d+ s in "
        r"the future \(a clock ahead when it was saved\?\); at most 60 s of skew is accepted"
    )
    await demo.wait_for_log(
        rf"dropping saved value 2 of {re.escape(str(path))}: TypeError: value '12' is not a JSON number"
    )


async def test_malformed_grpc_requests_are_invalid_argument_counted_and_logged_once(demo):
    async with demo_channel(demo) as channel:
        send = channel.unary_unary("/externalscaler.ExternalScaler/GetMetrics")
        for _ in range(100):
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await send(b"\x0a\x03\xff\xfe\xfd")
            assert (raised.value.code(), raised.value.details()) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                "malformed request: the request message is not valid protobuf",
            )
    counted = 'gpu_autoscaler_grpc_requests_total{code="INVALID_ARGUMENT",method="GetMetrics"} 100.0'
    await counted_in_metrics(demo, counted)
    refused = r"malformed gRPC GetMetrics from ipv4:127\.0\.0\.1:\d+ refused: the request message is not valid protobuf"
    assert len(log_lines(demo, refused)) == 1
    assert not log_lines(demo, "DecodeError|Traceback")


def refused_handshake(demo: DemoProcess, port: int, kind: str) -> None:
    """One TLS handshake the server refuses (bounded: 3 s): a protocol or cipher it does not serve,
    plain HTTP, or (mutual TLS on the gRPC port) no client certificate."""
    context = ssl.create_default_context(cafile=str(demo.state / "ca.crt"))
    context.check_hostname = False
    if kind == "tls1.1":
        with warnings.catch_warnings(action="ignore", category=DeprecationWarning):
            context.set_ciphers("DEFAULT:@SECLEVEL=0")
            context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_1
    elif kind == "cbc":
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers("AES128-SHA")
    with socket.create_connection(("127.0.0.1", port), timeout=3) as raw:
        if kind == "plain":
            raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            raw.recv(1024)
            return
        with contextlib.suppress(ssl.SSLError, ConnectionError), context.wrap_socket(raw) as wrapped:
            wrapped.recv(1)


HANDSHAKE_KINDS = {
    "https": {"tls1.1": "UNSUPPORTED_PROTOCOL", "cbc": "NO_SHARED_CIPHER", "plain": "HTTP_REQUEST"},
    # BoringSSL (in gRPC) names a cipher it does not serve by the curve it would need.
    "grpc": {
        "tls1.1": "UNSUPPORTED_PROTOCOL",
        "cbc": "WRONG_CURVE",
        "plain": "HTTP_REQUEST",
        "no client certificate": "PEER_DID_NOT_RETURN_A_CERTIFICATE",
    },
}
REPEATS = 20


async def test_refused_handshakes_on_both_ports_are_counted_and_logged_once_per_reason(demo):
    ports = {"https": demo.secure_port, "grpc": grpc_port(demo)}
    for port_name, kinds in HANDSHAKE_KINDS.items():
        for kind in kinds:
            for _ in range(REPEATS):
                await asyncio.to_thread(refused_handshake, demo, ports[port_name], kind)
    await counted_in_metrics(demo, f'gpu_autoscaler_auth_failures_total{{code="tls"}} {3 * REPEATS}.0')
    await counted_in_metrics(demo, f"gpu_autoscaler_grpc_handshake_failures_total {4 * REPEATS}.0")
    for reason in HANDSHAKE_KINDS["https"].values():
        lines = log_lines(demo, rf"tls_accept: TLS handshake with 127\.0\.0\.1:\d+ refused: {reason}$")
        assert len(lines) == 1, (reason, lines)
    for reason in HANDSHAKE_KINDS["grpc"].values():
        assert len(log_lines(demo, rf"WARNING grpc\.core: gRPC port: TLS handshake refused: {reason}$")) == 1, reason
    assert not log_lines(demo, "Handshake failed|ssl_transport_security")  # gRPC core's own lines: none


async def test_sigterm_ends_grpc_streams_at_once_although_the_delay_keeps_serving(demo):
    await demo.wait_ready()
    async with demo_channel(demo) as channel:
        stub = ExternalScalerStub(channel)
        trigger = pb.ScaledObjectRef(
            name="demo", namespace="default", scalerMetadata={"metric": "gpu_headroom", "targetValue": "1"}
        )
        stream = stub.StreamIsActive(trigger)
        assert isinstance((await stream.read()).result, bool)
        assert demo.process is not None
        demo.process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert await asyncio.wait_for(stream.read(), 10) is grpc.aio.EOF
        assert await stream.code() == grpc.StatusCode.OK
        ended_after = time.monotonic() - started
        # Still serving unary calls during the delay: the stream ended at SIGTERM, not after 20 s.
        assert (await stub.GetMetricSpec(trigger, timeout=10)).metricSpecs[0].targetSizeFloat == 1.0
        assert demo.process.poll() is None and ended_after < SHUTDOWN_DELAY_S / 2
    assert demo.stop() == 0  # a second SIGTERM ends the delay
