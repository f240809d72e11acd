"""Hostile calls against the real gRPC server (issue 30): each is refused with a bounded answer,
counted in gpu_autoscaler_grpc_requests_total, and logged at most once per interval."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import AsyncIterator

import grpc
import pytest

from autoscaler.keda import externalscaler_pb2 as pb
from autoscaler.keda import interceptor
from autoscaler.keda.core_log import CoreLog
from autoscaler.keda.externalscaler_pb2_grpc import ExternalScalerStub
from autoscaler.keda.interceptor import MAX_REQUEST_BYTES, UNAUTHENTICATED_MESSAGE
from autoscaler.keda.scaler import MAX_DETAILS, TRIGGER_CACHE_BYTES, TRIGGER_OVERHEAD_BYTES
from autoscaler.throttled_log import ThrottledLogByReason
from tests.eventually import eventually
from tests.keda.conftest import TRIGGER, Scaler, ref
from tests.pki import without_common_name

TRIGGER_BYTES = sum(len(key) + len(value) for key, value in TRIGGER.items())
GET_METRICS = "/externalscaler.ExternalScaler/GetMetrics"
INTERCEPTOR = "autoscaler.keda.interceptor"


def requests_total(scaler: Scaler, method: str, code: str) -> float | None:
    return scaler.sample("gpu_autoscaler_grpc_requests_total", {"method": method, "code": code})


async def counted(scaler: Scaler, method: str, code: str, expected: float) -> None:
    """The counter reaches ``expected``: the server counts a call just after the caller has its answer."""
    await eventually(
        lambda: requests_total(scaler, method, code) == expected,
        message=f"{expected} {method} calls counted with code {code}",
    )


async def refusal(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value


async def test_a_message_over_the_limit_is_refused_by_grpc_before_it_is_read_counted_and_logged_once(
    stub, scaler, caplog
):
    # The probe's case 1: 180,000 keys, 2.5 MB, under gRPC's default 4 MiB limit.
    metadata = {**TRIGGER, **{f"k{index:06d}": "v" for index in range(180_000)}}
    request = pb.GetMetricsRequest(scaledObjectRef=ref(**metadata), metricName="gpu_headroom")
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            error = await refusal(stub.GetMetrics(request))
            assert (error.code(), error.details()) == (
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"SERVER: Received message larger than max ({request.ByteSize()} vs. {MAX_REQUEST_BYTES})",
            )
        # gRPC refuses it from the length prefix, before any handler reads it; the call is counted.
        await counted(scaler, "GetMetrics", "RESOURCE_EXHAUSTED", 3)
    assert scaler.listening.scaler.cached_triggers == (0, 0)
    (record,) = caplog.records
    assert (record.name, record.levelname) == (INTERCEPTOR, "WARNING")
    assert re.fullmatch(
        r"gRPC GetMetrics from ipv4:127\.0\.0\.1:\d+ refused: its request message did not arrive "
        r"\(gRPC refuses one over 65536 bytes with RESOURCE_EXHAUSTED, or the caller left\)",
        record.getMessage(),
    ), record.getMessage()


async def test_a_call_without_a_request_message_is_invalid_argument(scaler, monkeypatch):
    monkeypatch.setattr(interceptor, "NOT_RECEIVED_GRACE_S", 0.05)
    async with scaler.channel(scaler.pki.alice) as channel:
        send = channel.stream_unary(GET_METRICS)  # a raw caller: ends its requests without sending one

        async def nothing() -> AsyncIterator[bytes]:
            return
            yield b""

        error = await refusal(send(nothing()))
    assert (error.code(), error.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "malformed request: the call ended without a request message",
    )
    await counted(scaler, "GetMetrics", "INVALID_ARGUMENT", 1)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({f"k{index}": "v" for index in range(61)}, "invalid scalerMetadata: 65 keys; the limit is 64"),
        (
            {"note": "x" * 25_000},
            f"invalid scalerMetadata: {TRIGGER_BYTES + 4 + 25_000} bytes of keys and values; the limit is 24576",
        ),
        (
            {"metric": "m" * 10_000},
            f"invalid metric: the name '{'m' * 80}... (9920 more bytes)' is 10000 characters long; the limit is 253",
        ),
    ],
    ids=["keys", "bytes", "metric"],
)
async def test_metadata_over_its_limits_is_invalid_argument(stub, scaler, extra, message):
    error = await refusal(stub.GetMetricSpec(ref(**extra)))
    assert (error.code(), error.details()) == (grpc.StatusCode.INVALID_ARGUMENT, message)
    await counted(scaler, "GetMetricSpec", "INVALID_ARGUMENT", 1)


async def test_a_huge_metric_name_is_never_echoed_into_grpc_message(stub, scaler):
    huge = pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="x" * 1_000_000)  # the probe's case 6
    error = await refusal(stub.GetMetrics(huge))
    assert (error.code(), error.details()) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"SERVER: Received message larger than max ({huge.ByteSize()} vs. {MAX_REQUEST_BYTES})",
    )
    await counted(scaler, "GetMetrics", "RESOURCE_EXHAUSTED", 1)
    long = pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="x" * 20_000)  # under the message limit
    error = await refusal(stub.GetMetrics(long))
    assert (error.code(), error.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        f"invalid metricName: the name '{'x' * 80}... (19920 more bytes)' is 20000 characters long; the limit is 253",
    )
    await counted(scaler, "GetMetrics", "INVALID_ARGUMENT", 1)


async def test_a_long_selector_is_quoted_to_1_kib_in_the_refusal(stub):
    selector = "pool in (" + ",".join(f"v{index}" for index in range(2_500))  # 16 KB, unclosed
    error = await refusal(stub.GetMetricSpec(ref(labelSelector=selector)))
    assert (error.code(), error.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        f"invalid labelSelector: unclosed '(' in '{selector[:1024]}... ({len(selector) - 1024} more bytes)'",
    )
    assert len(error.details()) < MAX_DETAILS


@pytest.mark.parametrize("target", ["1_000", "1e-320", "0x1p3", "infinity", "1e400", " 1 000"])
async def test_lenient_numbers_are_refused(stub, target):
    error = await refusal(stub.GetMetricSpec(ref(targetValue=target)))
    assert (error.code(), error.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        f"invalid targetValue: must be a number greater than 0, got {target!r}",
    )


async def test_a_16000_digit_number_is_refused_at_once_quoted_to_1_kib(stub):
    """Issue 38: the decimal reader's pattern backtracked quadratically (13 s of the event loop for this
    value, whose last character is not a digit); its quote is the first 1 KiB."""
    target = "9" * 16_000 + "x"
    started = time.perf_counter()
    error = await refusal(stub.GetMetricSpec(ref(targetValue=target)))
    elapsed = time.perf_counter() - started
    assert (error.code(), error.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        f"invalid targetValue: must be a number greater than 0, got '{'9' * 1024}... (14977 more bytes)'",
    )
    assert elapsed < 2.0, elapsed


async def test_plain_decimal_numbers_are_served(stub):
    for target, expected in [("1000", 1000.0), (" 2.5 ", 2.5), ("1e3", 1000.0), (".5", 0.5), ("+3", 3.0)]:
        assert (await stub.GetMetricSpec(ref(targetValue=target))).metricSpecs[0].targetSizeFloat == expected


async def test_the_trigger_cache_is_keyed_by_the_fields_that_matter(stub, scaler):
    for index in range(40):  # the same trigger from forty ScaledObjects, each with its own other keys
        await stub.GetMetricSpec(ref(scalerAddress=f"scaler-{index}:9443", **{f"note{index}": "x" * 1000}))
    fields = len("gpu_headroom") + len("pool=a100") + len("1")
    assert scaler.listening.scaler.cached_triggers == (1, TRIGGER_OVERHEAD_BYTES + fields)
    assert scaler.sample("gpu_autoscaler_grpc_trigger_cache_bytes", {}) == TRIGGER_OVERHEAD_BYTES + fields


async def test_refusals_are_not_cached(stub, scaler):
    for index in range(20):
        await refusal(stub.GetMetricSpec(ref(metric=f"unknown_{index}")))  # parses, but is NOT_FOUND
        await refusal(stub.GetMetricSpec(ref(targetValue=f"-{index}")))
    await counted(scaler, "GetMetricSpec", "NOT_FOUND", 20)
    assert scaler.listening.scaler.cached_triggers == (0, 0)


def test_the_trigger_cache_is_bounded_in_bytes(scaler):
    servicer = scaler.listening.scaler
    selector = "pool in (" + ",".join(f"v{index:04d}" for index in range(1_600)) + ")"  # 9.6 KB
    for index in range(150):
        servicer.trigger(ref(labelSelector=f"{selector},n{index:03d}"))
    entry = TRIGGER_OVERHEAD_BYTES + len("gpu_headroom") + len(selector) + len(",n000") + len("1")
    assert servicer.cached_triggers == (TRIGGER_CACHE_BYTES // entry, TRIGGER_CACHE_BYTES // entry * entry)
    assert TRIGGER_CACHE_BYTES // entry < 150


async def test_malformed_protobuf_is_invalid_argument_counted_and_logged_once(scaler, caplog):
    async with scaler.channel(scaler.pki.alice) as channel:
        send = channel.unary_unary(GET_METRICS)
        with caplog.at_level(logging.INFO):
            for _ in range(100):
                error = await refusal(send(b"\x0a\x03\xff\xfe\xfd"))
                assert (error.code(), error.details()) == (
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "malformed request: the request message is not valid protobuf",
                )
    await counted(scaler, "GetMetrics", "INVALID_ARGUMENT", 100)
    lines = [(record.name, record.levelname, record.getMessage()) for record in caplog.records]
    assert len(lines) == 1, lines
    name, level, message = lines[0]
    assert (name, level) == (INTERCEPTOR, "WARNING")
    assert message.startswith("malformed gRPC GetMetrics from ipv4:127.0.0.1:")
    assert message.endswith(" refused: the request message is not valid protobuf")


async def test_a_certificate_without_a_user_is_unauthenticated(scaler, tmp_path, caplog):
    client = without_common_name(scaler.pki, tmp_path)
    async with scaler.channel(client) as channel:
        with caplog.at_level(logging.INFO):
            for _ in range(3):
                error = await refusal(ExternalScalerStub(channel).IsActive(ref()))
                assert (error.code(), error.details()) == (grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)
    await counted(scaler, "IsActive", "UNAUTHENTICATED", 3)
    assert requests_total(scaler, "IsActive", "OK") is None
    (record,) = caplog.records
    assert record.getMessage().startswith("gRPC IsActive from ipv4:127.0.0.1:")
    assert record.getMessage().endswith(" refused: no user in its client certificate (empty CN)")


HANDSHAKE_LINE = (
    "I1127 13:46:45.438243   12943 ssl_transport_security.cc:2563] Handshake failed with error SSL_ERROR_SSL: "
    "error:100000c0:SSL routines:OPENSSL_internal:PEER_DID_NOT_RETURN_A_CERTIFICATE: Invalid certificate "
    "verification context\n"
)


def test_core_log_lines_are_records_failed_handshakes_counted_and_other_output_passed_on(caplog):
    core = CoreLog()
    handshakes: list[None] = []
    stop_counting = core.on_handshake_failure(lambda: handshakes.append(None))
    source, sink = os.pipe()
    passed_on, passthrough = os.pipe()
    os.write(sink, ("Traceback (most recent call last):\n" + HANDSHAKE_LINE * 3).encode())
    os.write(sink, b"W1127 13:46:46.000001   12943 chttp2_server.cc:100] something odd\n")
    os.close(sink)
    with caplog.at_level(logging.INFO, logger="grpc.core"):
        core.pump(source, passthrough)  # until the pipe closes
    os.close(passthrough)
    with os.fdopen(passed_on, "rb") as rest:
        assert rest.read() == b"Traceback (most recent call last):\n"
    assert len(handshakes) == 3
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("grpc.core", "WARNING", "gRPC port: TLS handshake refused: PEER_DID_NOT_RETURN_A_CERTIFICATE"),
        ("grpc.core", "WARNING", "something odd"),
    ]
    stop_counting()
    assert core.route(HANDSHAKE_LINE) and len(handshakes) == 3


def test_throttling_by_reason_keeps_one_line_per_reason_and_bounds_the_reasons(caplog):
    throttled = ThrottledLogByReason(logging.getLogger("test.by_reason"), max_reasons=2)
    with caplog.at_level(logging.WARNING):
        for reason in ["A", "B", "A", "C", "D", "B"]:  # C and D, past the bound, share one throttle
            throttled.warning(reason, "refused: %s", reason)
    assert [record.getMessage() for record in caplog.records] == ["refused: A", "refused: B", "refused: C"]
