"""Issue 30's cases against the running demo (one process for the module): restored values from the
future or not numbers, malformed gRPC, refused handshakes on both ports, and SIGTERM ending gRPC
streams at once although a shutdown delay keeps the process serving."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
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
