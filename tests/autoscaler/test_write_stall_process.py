"""Issue 38 item 7 against the running demo: the secure port's write-stall guard measures what the
peer took, so keep-alive clients reading every answer are never reset (alone or beside a gRPC
flood), while a client that stops reading still is.

Before the fix, the guard compared the bytes in flight at successive sweeps: a keep-alive client
that read every answer had one answer of the same size in flight at each sweep (unacknowledged until
its next request), which looked like a buffer that never shrank."""

from __future__ import annotations

import asyncio
import http.client
import re
import signal
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator

import grpc
import pytest

from autoscaler.keda import externalscaler_pb2 as pb
from autoscaler.keda.externalscaler_pb2_grpc import ExternalScalerStub
from autoscaler.throttled_log import ThrottledLog
from autoscaler.web.security import tls_accept
from autoscaler.web.security.tls_accept import WriteStallGuard
from tests.autoscaler.demo_process import DemoProcess
from tests.hostile_clients import pipeline_without_reading

IDLE_TIMEOUT_S = 1  # the guard sweeps every 0.5 s
API_PATH = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/gpu_headroom"
ABORTED = r"connection from 127\.0\.0\.1:\d+ aborted: \d+ bytes of answers unread for 1 s"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoProcess]:
    process = DemoProcess(
        tmp_path_factory.mktemp("write-stall"), env={"GPU_AUTOSCALER_SERVER__IDLE_TIMEOUT": f"{IDLE_TIMEOUT_S}s"}
    )
    process.start()
    yield process
    if process.process is not None and process.process.poll() is None:
        process.process.send_signal(signal.SIGTERM)  # a second signal ends the shutdown delay
        assert process.stop() == 0


def client_context(demo: DemoProcess) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(demo.state / "ca.crt"))
    context.load_cert_chain(demo.state / "client.crt", demo.state / "client.key")
    return context


def read_every_answer(demo: DemoProcess, stop: threading.Event, answers: list[int], errors: list[str]) -> None:
    """One keep-alive connection, each answer read whole before the next request, until ``stop``."""
    connection = http.client.HTTPSConnection("127.0.0.1", demo.secure_port, context=client_context(demo), timeout=30)
    try:
        while not stop.is_set():
            connection.request("GET", API_PATH)
            response = connection.getresponse()
            response.read()
            answers.append(response.status)
            time.sleep(0.01)  # as a poller: its TCP then acknowledges each answer with the next request
    except (OSError, ssl.SSLError, http.client.HTTPException) as error:
        errors.append(repr(error))
    finally:
        connection.close()


def grpc_flood(demo: DemoProcess, stop: threading.Event, calls: list[int]) -> None:
    files = {name: (demo.state / name).read_bytes() for name in ("ca.crt", "client.key", "client.crt")}
    credentials = grpc.ssl_channel_credentials(files["ca.crt"], files["client.key"], files["client.crt"])
    port = re.search(r"KEDA external scaler \(gRPC over TLS \(mutual TLS\)\) on 127\.0\.0\.1:(\d+)", demo.start_log)
    assert port, demo.start_log
    trigger = pb.ScaledObjectRef(
        name="demo", namespace="default", scalerMetadata={"metric": "gpu_headroom", "targetValue": "1"}
    )
    request = pb.GetMetricsRequest(scaledObjectRef=trigger, metricName="gpu_headroom")
    with grpc.secure_channel(f"127.0.0.1:{port.group(1)}", credentials) as channel:
        stub = ExternalScalerStub(channel)
        while not stop.is_set():
            stub.GetMetrics(request, timeout=30)
            calls.append(1)


def run_for(seconds: float, targets: list[Callable[[threading.Event], None]]) -> None:
    stop = threading.Event()
    threads = [threading.Thread(target=target, args=(stop,)) for target in targets]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)


def readers_then_flood(demo: DemoProcess, readers: int) -> tuple[list[int], list[str], list[int]]:
    """``readers`` clients reading for 10 s (20 sweeps); a gRPC flood beside them for the last 4 s."""
    answers: list[int] = []
    errors: list[str] = []
    calls: list[int] = []
    flood = threading.Thread(target=lambda: run_for(4, [lambda stop: grpc_flood(demo, stop, calls)] * 2))
    threading.Timer(6, flood.start).start()
    run_for(10, [lambda stop: read_every_answer(demo, stop, answers, errors)] * readers)
    flood.join(timeout=60)
    return answers, errors, calls


async def test_keep_alive_clients_reading_every_answer_are_never_reset(demo):
    await demo.wait_ready()
    log_before = len(demo.lines)
    answers, errors, calls = await asyncio.to_thread(readers_then_flood, demo, 4)
    assert errors == []  # each of the four connections lived through 10 idle timeouts
    assert len(answers) > 400 and set(answers) == {200}, (len(answers), set(answers))
    assert len(calls) > 20  # the flood did run beside the readers
    await asyncio.sleep(1)  # a last sweep
    assert not re.search(ABORTED, "".join(demo.lines[log_before:]))


def send_without_reading(demo: DemoProcess, limit_s: float) -> tuple[float, str]:
    """Pipeline requests and never read an answer; (seconds until the server cut us off, how)."""
    return pipeline_without_reading(demo.secure_port, client_context(demo), API_PATH, limit_s)


async def test_a_client_that_stops_reading_is_still_reset(demo):
    await demo.wait_ready()
    elapsed, how = await asyncio.to_thread(send_without_reading, demo, 20.0)
    assert how in ("ConnectionResetError", "SSLEOFError", "BrokenPipeError"), how
    assert elapsed < 3 * IDLE_TIMEOUT_S + 4  # its receive buffer fills, then idle_timeout, then a sweep
    await demo.wait_for_log(ABORTED)


class _Socket:
    """The kernel's counts for one connection: bytes queued unacknowledged, bytes acknowledged."""

    def __init__(self) -> None:
        self.queued, self.acknowledged, self.linger = 391, 0, b""

    def fileno(self) -> int:
        return -1  # SIOCOUTQ fails on it: only the transport's buffer is counted there

    def getsockopt(self, level: int, name: int, size: int) -> bytes:
        return bytes(120) + self.acknowledged.to_bytes(8, "little") + bytes(size - 128)

    def setsockopt(self, level: int, name: int, value: bytes) -> None:
        self.linger = value  # the abort's reset


class _Transport:
    def __init__(self) -> None:
        self.sock, self.aborted = _Socket(), False

    def is_closing(self) -> bool:
        return self.aborted

    def get_write_buffer_size(self) -> int:
        return self.sock.queued  # one answer of the same size waiting at every sweep

    def get_extra_info(self, name: str) -> object:
        return {"socket": self.sock, "peername": ("127.0.0.1", 5555)}.get(name)

    def abort(self) -> None:
        self.aborted = True


@pytest.mark.skipif(not hasattr(socket, "TCP_INFO"), reason="acknowledged bytes are read from Linux's TCP_INFO")
def test_the_rule_is_bytes_taken_not_the_size_waiting(monkeypatch):
    # Its own throttle, so this abort's log line does not hold back another test's within 10 s.
    monkeypatch.setattr(tls_accept, "_stalls", ThrottledLog(tls_accept.log))
    now = [0.0]
    guard = WriteStallGuard(1.0, clock=lambda: now[0])
    reading, stalled = _Transport(), _Transport()
    guard.watch(reading)  # type: ignore[arg-type]
    guard.watch(stalled)  # type: ignore[arg-type]
    for _ in range(10):  # five idle timeouts, 391 bytes waiting on both at every sweep
        now[0] += 0.5
        reading.sock.acknowledged += 391
        guard.sweep()
    assert not reading.aborted and stalled.aborted and guard.aborted == 1
    assert stalled.sock.linger == struct.pack("ii", 1, 0)
