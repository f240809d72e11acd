"""Issue 30's cases against the running demo (one process for the module): restored values from the
future or not numbers, malformed gRPC, gRPC messages over the limit, metadata and names over theirs,
lenient numbers, the trigger cache, certificates without a user, refused handshakes on both ports,
and SIGTERM ending gRPC streams at once although a shutdown delay keeps the process serving."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
import warnings
from collections.abc import Awaitable, Iterator
from datetime import UTC, datetime, timedelta

import aiohttp
import grpc
import pytest

from autoscaler.keda import externalscaler_pb2 as pb
from autoscaler.keda.externalscaler_pb2_grpc import ExternalScalerStub
from autoscaler.keda.interceptor import UNAUTHENTICATED_MESSAGE
from autoscaler.keda.scaler import TRIGGER_OVERHEAD_BYTES
from autoscaler.serving import persistence
from autoscaler.web.security.certificates import load_authority
from autoscaler.web.shared.responses import status
from tests.autoscaler.demo_process import DemoProcess
from tests.eventually import eventually
from tests.hostile_clients import pipeline_without_reading
from tests.pki import issued_without_common_name

SHUTDOWN_DELAY_S = 20
IDLE_TIMEOUT_S = 2
FUTURE = "2099-01-01T00:00:00+00:00"


def saved_values(now: datetime) -> str:
    """A good saved value, one stamped 2099 (a clock that was ahead), one written as a string, one subnormal."""
    entry = {"metric": "gpu_headroom", "labels": {"nodepool": "demo-gpu"}, "timestamp": now.isoformat()}
    series = [{**entry, "value": 1}, {**entry, "value": 2, "timestamp": FUTURE}, {**entry, "value": "12"}]
    series += [{**entry, "value": 1e-320}]
    return json.dumps({"version": 1, "created_at": now.isoformat(), "series": series})


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoProcess]:
    state = tmp_path_factory.mktemp("hostile") / "state"
    state.mkdir()
    (state / persistence.FILE_NAME).write_text(saved_values(datetime.now(UTC) - timedelta(minutes=1)))
    settings = {"SHUTDOWN_DELAY": f"{SHUTDOWN_DELAY_S}s", "IDLE_TIMEOUT": f"{IDLE_TIMEOUT_S}s"}
    process = DemoProcess(state, env={f"GPU_AUTOSCALER_SERVER__{name}": value for name, value in settings.items()})
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


async def sample_value(demo: DemoProcess, sample: str) -> float:
    """The value of ``sample`` (name and labels as /metrics writes them) now; 0 when not exported yet."""
    for line in (await scrape(demo)).splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def grpc_requests(code: str, method: str) -> str:
    return f'gpu_autoscaler_grpc_requests_total{{code="{code}",method="{method}"}}'


def log_lines(demo: DemoProcess, pattern: str) -> list[str]:
    return [line for line in demo.lines if re.search(pattern, line)]


async def logged_once(demo: DemoProcess, pattern: str) -> list[str]:
    """The lines matching ``pattern``, once one has arrived: a thread reads the process's output, so a
    line written before the metrics were read may still be on its way (asserting at once failed
    under load)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if found := log_lines(demo, pattern):
            return found
        await asyncio.sleep(0.05)
    return []


def test_the_demo_says_its_plain_port_needs_no_authentication(demo):
    assert re.search(
        r"probes and /metrics on http://127\.0\.0\.1:\d+ \(no authentication: server\.http_auth none; probes open\)",
        demo.start_log,
    ), demo.start_log


async def test_restored_values_from_the_future_or_not_numbers_are_dropped_naming_them(demo):
    path = demo.state / persistence.FILE_NAME
    await demo.wait_for_log(
        rf"{re.escape(str(path))}: dropped saved value 1: ValueError: timestamp {re.escape(FUTURE)} is \d+ s in "
        r"the future \(a clock ahead when it was saved\?\); at most 60 s of skew is accepted"
    )
    await demo.wait_for_log(
        rf"{re.escape(str(path))}: dropped saved value 2: TypeError: value '12' is not a JSON number"
    )
    await demo.wait_for_log(
        rf"{re.escape(str(path))}: dropped saved value 3: ValueError: value 1e-320 is subnormal, "
        "not a number that was ever served"
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
    assert len(await logged_once(demo, refused)) == 1
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
        lines = await logged_once(demo, rf"tls_accept: TLS handshake with 127\.0\.0\.1:\d+ refused: {reason}$")
        assert len(lines) == 1, (reason, lines)
    for reason in HANDSHAKE_KINDS["grpc"].values():
        pattern = rf"WARNING grpc\.core: gRPC port: TLS handshake refused: {reason}$"
        assert len(await logged_once(demo, pattern)) == 1, reason
    assert not log_lines(demo, "Handshake failed|ssl_transport_security")  # gRPC core's own lines: none


def trigger(**metadata: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(
        name="hostile", namespace="default", scalerMetadata={"metric": "gpu_headroom", "targetValue": "1", **metadata}
    )


async def refused(call: Awaitable[object]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value.code(), raised.value.details()


def too_large(request: pb.GetMetricsRequest) -> tuple[grpc.StatusCode, str]:
    details = f"SERVER: Received message larger than max ({request.ByteSize()} vs. 65536)"
    return grpc.StatusCode.RESOURCE_EXHAUSTED, details


async def test_grpc_messages_over_64_kib_are_resource_exhausted_counted_and_logged_once(demo):
    """The probe's cases 1, 2 and 6: 180,000 metadata keys, distinct triggers of 150,000 keys, a 1 MB name."""
    counter = grpc_requests("RESOURCE_EXHAUSTED", "GetMetrics")
    before = await sample_value(demo, counter)
    keys = {f"k{index:06d}": "v" for index in range(180_000)}
    requests = [pb.GetMetricsRequest(scaledObjectRef=trigger(**keys), metricName="gpu_headroom")] * 2
    for tag in ("a", "b", "c"):
        many = {f"{tag}{index:06d}": "v" for index in range(150_000)}
        requests.append(pb.GetMetricsRequest(scaledObjectRef=trigger(**many), metricName="gpu_headroom"))
    requests.append(pb.GetMetricsRequest(scaledObjectRef=trigger(), metricName="x" * 1_000_000))
    async with demo_channel(demo) as channel:
        stub = ExternalScalerStub(channel)
        for request in requests:
            assert await refused(stub.GetMetrics(request)) == too_large(request)
    await counted_in_metrics(demo, f"{counter} {before + len(requests)}")
    refusal = (
        r"gRPC GetMetrics from ipv4:127\.0\.0\.1:\d+ refused: its request message did not arrive "
        r"\(gRPC refuses one over 65536 bytes with RESOURCE_EXHAUSTED, or the caller left\)"
    )
    assert len(await logged_once(demo, refusal)) == 1
    assert await sample_value(demo, "gpu_autoscaler_grpc_trigger_cache_bytes") == 0.0


async def test_grpc_metadata_and_names_over_their_limits_are_invalid_argument(demo):
    long_name = pb.GetMetricsRequest(scaledObjectRef=trigger(), metricName="x" * 20_000)
    async with demo_channel(demo) as channel:
        stub = ExternalScalerStub(channel)
        keys = {f"k{index}": "v" for index in range(63)}
        assert await refused(stub.GetMetricSpec(trigger(**keys))) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "invalid scalerMetadata: 65 keys; the limit is 64",
        )
        assert await refused(stub.GetMetrics(long_name)) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            f"invalid metricName: the name '{'x' * 80}... (19920 more bytes)' is 20000 characters long; "
            "the limit is 253",
        )
    await counted_in_metrics(demo, f"{grpc_requests('INVALID_ARGUMENT', 'GetMetricSpec')} 1.0")


@pytest.mark.parametrize("target", ["1_000", "1e-320", "infinity", "0x1p3"])
async def test_lenient_target_values_are_invalid_argument(demo, target):
    async with demo_channel(demo) as channel:
        assert await refused(ExternalScalerStub(channel).GetMetricSpec(trigger(targetValue=target))) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            f"invalid targetValue: must be a number greater than 0, got {target!r}",
        )


async def test_the_trigger_cache_keeps_one_entry_per_trigger_and_no_refusals(demo):
    """The probe's case 2 under the message limit: only the fields that matter are kept."""
    cache = "gpu_autoscaler_grpc_trigger_cache_bytes"
    before = await sample_value(demo, cache)
    async with demo_channel(demo) as channel:
        stub = ExternalScalerStub(channel)
        for index in range(40):  # one trigger from forty ScaledObjects, each with other keys of its own
            note = {"scalerAddress": f"scaler-{index}:9443", f"note{index}": "x" * 1000}
            await stub.GetMetricSpec(trigger(labelSelector="pool=cache-test", **note))
        one_entry = TRIGGER_OVERHEAD_BYTES + len("gpu_headroom") + len("pool=cache-test") + len("1")
        assert await sample_value(demo, cache) == before + one_entry
        for index in range(20):
            code, _ = await refused(stub.GetMetricSpec(trigger(metric=f"unknown_{index}")))
            assert code == grpc.StatusCode.NOT_FOUND
        assert await sample_value(demo, cache) == before + one_entry


async def test_a_client_certificate_without_a_user_is_refused_on_both_ports(demo, tmp_path):
    """The probe's case 3: from the demo's client CA, no CN, only O=system:masters."""
    authority = load_authority(demo.state / "ca.crt", demo.state / "ca.key")
    client = issued_without_common_name(authority, tmp_path)
    context = ssl.create_default_context(cafile=str(demo.state / "ca.crt"))
    context.load_cert_chain(client.cert, client.key)
    url = f"https://127.0.0.1:{demo.secure_port}/apis/external.metrics.k8s.io/v1beta1/namespaces/default/gpu_headroom"
    async with aiohttp.ClientSession() as session, session.get(url, ssl=context) as response:
        assert (response.status, await response.json()) == (401, status(401, "Unauthorized"))
    credentials = grpc.ssl_channel_credentials(
        (demo.state / "ca.crt").read_bytes(), client.key.read_bytes(), client.cert.read_bytes()
    )
    async with grpc.aio.secure_channel(f"127.0.0.1:{grpc_port(demo)}", credentials) as channel:
        for _ in range(3):
            assert await refused(ExternalScalerStub(channel).IsActive(trigger())) == (
                grpc.StatusCode.UNAUTHENTICATED,
                UNAUTHENTICATED_MESSAGE,
            )
    await counted_in_metrics(demo, 'gpu_autoscaler_auth_failures_total{code="401"} 1.0')
    await counted_in_metrics(demo, f"{grpc_requests('UNAUTHENTICATED', 'IsActive')} 3.0")
    refusal = r"gRPC IsActive from ipv4:127\.0\.0\.1:\d+ refused: no user in its client certificate \(empty CN\)"
    assert len(await logged_once(demo, refusal)) == 1


def send_without_reading(demo: DemoProcess, limit_s: float) -> tuple[float, str]:
    """Pipeline requests and never read an answer; (seconds until the server cut us off, how)."""
    context = ssl.create_default_context(cafile=str(demo.state / "ca.crt"))
    context.load_cert_chain(demo.state / "client.crt", demo.state / "client.key")
    path = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/gpu_headroom"
    return pipeline_without_reading(demo.secure_port, context, path, limit_s)


async def test_a_client_that_never_reads_is_reset_after_the_idle_timeout(demo):
    elapsed, how = await asyncio.to_thread(send_without_reading, demo, 30.0)
    assert how in ("ConnectionResetError", "SSLEOFError", "BrokenPipeError"), how
    assert elapsed < 3 * IDLE_TIMEOUT_S + 4  # stalled for idle_timeout, then seen within a check
    aborted = rf"connection from 127\.0\.0\.1:\d+ aborted: \d+ bytes of answers unread for {IDLE_TIMEOUT_S} s$"
    await demo.wait_for_log(aborted)
    assert len(await logged_once(demo, aborted)) == 1


WHOLE = "expected a whole number, not text, a boolean or a float (write 300, not '300', 300.0 or 1e3)"


def test_lenient_numbers_in_the_environment_stop_serve_naming_the_field(tmp_path):
    """The probe's case 8 for settings: exit 2 before anything listens."""
    command = [sys.executable, "-m", "autoscaler", "serve", "--state-dir", str(tmp_path), "--secure-port", "0"]
    for name, value, message in [
        ("MAX_HEADERS", "1_000", f"{WHOLE} (got '1_000')"),
        ("MAX_HEADERS", "300.0", f"{WHOLE} (got 300.0)"),
        ("SHUTDOWN_DELAY", "1e-320", "invalid duration 1e-320: subnormal (got 1e-320)"),
    ]:
        environment = {**os.environ, f"GPU_AUTOSCALER_SERVER__{name}": value}
        completed = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120, check=False)
        field = name.lower()
        assert completed.returncode == 2, completed.stderr
        assert completed.stderr.endswith(
            f"Error: invalid settings in defaults:\n  server.{field}: Value error, {message}\n"
        ), completed.stderr


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
