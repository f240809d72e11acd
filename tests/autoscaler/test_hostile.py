"""Hostile input against the running server: traversal, oversized requests, slow clients, secrets."""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import time

import aiohttp
import pytest

from autoscaler.web.shared.responses import status
from tests.autoscaler.conftest import RunningServer
from tests.eventually import eventually
from tests.hostile_clients import pipeline_without_reading
from tests.pki import Client, without_common_name

PREFIX = "/apis/external.metrics.k8s.io/v1beta1"


async def raw_request(server: RunningServer, data: bytes, client="alice", read_timeout=5.0) -> bytes:
    context = server.ssl_context(getattr(server.pki, client) if client else None)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.listening.secure_port, ssl=context)
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(65536), read_timeout)
    finally:
        writer.close()


async def still_serving(server: RunningServer) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            server.base_url + f"{PREFIX}/namespaces/default/gpu_headroom", ssl=server.ssl_context(server.pki.alice)
        ) as response,
    ):
        assert response.status == 200


@pytest.mark.parametrize(
    "path",
    [
        f"{PREFIX}/namespaces/../../../../etc/passwd",
        f"{PREFIX}/namespaces/%2e%2e/%2e%2e/etc/passwd",
        "/apis/..%2f..%2fetc%2fpasswd",
        "//etc/passwd",
        f"{PREFIX}/namespaces/default/gpu_headroom/../../../../../etc/shadow",
    ],
)
async def test_path_traversal_never_reaches_a_file(api_server, path):
    answer = await raw_request(api_server, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    status_line = answer.split(b"\r\n", 1)[0]
    assert status_line.split()[1] in (b"400", b"404"), answer[:200]
    assert b"root:" not in answer
    await still_serving(api_server)


async def test_oversized_header_is_rejected_and_the_server_keeps_serving(api_server):
    answer = await raw_request(
        api_server, b"GET /apis HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\nConnection: close\r\n\r\n"
    )
    assert answer.split(b"\r\n", 1)[0].split()[1] in (b"400", b"431")
    await still_serving(api_server)


def test_malformed_request_logs_one_line_without_the_content(caplog):
    from aiohttp.http_exceptions import LineTooLong

    from autoscaler.commands.cli import MalformedRequestFilter

    logger = logging.getLogger("test.aiohttp.server")
    logger.addFilter(MalformedRequestFilter())
    try:
        raise LineTooLong(b"Authorization: Bearer s3cr3t" * 10, 8190)
    except LineTooLong:
        with caplog.at_level(logging.DEBUG):
            logger.exception("Error handling request from %s", "127.0.0.1")
    (record,) = caplog.records
    assert (record.levelname, record.getMessage()) == ("WARNING", "malformed request refused (LineTooLong)")
    assert "s3cr3t" not in caplog.text


async def test_huge_selector_is_a_400_not_a_crash(api_server):
    selector = ",".join(f"k{i}=v" for i in range(3000))  # about 20 KB, over the URL line limit too
    answer = await raw_request(
        api_server,
        f"GET {PREFIX}/namespaces/d/gpu_headroom?labelSelector={selector} HTTP/1.1\r\n"
        "Host: x\r\nConnection: close\r\n\r\n".encode(),
    )
    assert answer.split(b"\r\n", 1)[0].split()[1] in (b"400", b"414")
    await still_serving(api_server)


async def test_selector_just_under_the_line_limit_is_parsed_and_refused_politely(api_server):
    selector = ",".join(f"k{i}=v" for i in range(700))
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            api_server.base_url + f"{PREFIX}/namespaces/d/gpu_headroom",
            params={"labelSelector": selector},
            ssl=api_server.ssl_context(api_server.pki.alice),
        ) as response,
    ):
        assert response.status == 404  # valid syntax, matches nothing
        assert (await response.json())["reason"] == "NotFound"


async def test_oversized_body_is_never_read(api_server):
    body = b"x" * (2 * 1024 * 1024)
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            api_server.base_url + f"{PREFIX}/namespaces/default/gpu_headroom",
            data=body,
            ssl=api_server.ssl_context(api_server.pki.alice),
        ) as response,
    ):
        assert response.status in (405, 413)
    await still_serving(api_server)


async def test_slow_header_client_is_dropped_and_others_are_served(api_server):
    context = api_server.ssl_context(api_server.pki.alice)
    reader, writer = await asyncio.open_connection("127.0.0.1", api_server.listening.secure_port, ssl=context)
    started = time.monotonic()
    writer.write(b"GET /apis HTTP/1.1\r\nHost: x\r\n")
    await writer.drain()
    # The slow client dribbles one header line at a time and never finishes the request.
    closed = False
    for index in range(40):
        await still_serving(api_server)
        try:
            writer.write(f"X-Slow-{index}: y\r\n".encode())
            await writer.drain()
            closed = await asyncio.wait_for(reader.read(1024), 0.1) == b""
        except TimeoutError:
            continue
        except (ConnectionError, ssl.SSLError):
            closed = True
        if closed:
            break
    writer.close()
    assert closed, "the server kept a slow client for 4 s with idle_timeout 1 s"
    assert time.monotonic() - started < 4


async def test_rejected_tokens_are_not_logged(api_server, caplog):
    with caplog.at_level(logging.DEBUG):
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                api_server.base_url + f"{PREFIX}/namespaces/default/gpu_headroom",
                headers={"Authorization": "Bearer s3cr3t-t0ken-value"},
                ssl=api_server.ssl_context(None),
            ) as response,
        ):
            assert response.status == 401
    assert "s3cr3t-t0ken-value" not in caplog.text


def test_json_log_format_is_json_per_line():
    import json

    from autoscaler.commands.cli import JsonFormatter

    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "value %s has 'quotes' and \"doubles\"", ("v",), None)
    document = json.loads(JsonFormatter().format(record))
    assert document["message"] == "value v has 'quotes' and \"doubles\""
    assert (document["level"], document["logger"]) == ("WARNING", "x")


def test_throttled_log_says_how_many_lines_it_left_out(caplog):
    from autoscaler.throttled_log import ThrottledLog

    now = [0.0]
    throttled = ThrottledLog(logging.getLogger("test.throttled"), interval_s=10, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        for moment in (0.0, 1.0, 2.0, 9.9, 10.0, 25.0):
            now[0] = moment
            throttled.warning("refused %s", "x")
    assert [record.getMessage() for record in caplog.records] == [
        "refused x",
        "refused x (3 more like it since the last line)",
        "refused x",
    ]


async def get_as(
    server: RunningServer, client: Client | None, headers: dict[str, str] | None = None
) -> tuple[int, dict]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            server.base_url + f"{PREFIX}/namespaces/default/gpu_headroom",
            ssl=server.ssl_context(client),
            headers=headers,
        ) as response,
    ):
        return response.status, await response.json(content_type=None)


async def ops_metrics(server: RunningServer) -> str:
    async with aiohttp.ClientSession() as session, session.get(server.ops_url + "/metrics") as response:
        return await response.text()


async def test_a_certificate_without_a_user_is_401(api_server, tmp_path):
    # From the client CA, no CN, only O=system:masters: kube-apiserver authenticates nobody with it.
    client = without_common_name(api_server.pki, tmp_path)
    assert await get_as(api_server, client) == (401, status(401, "Unauthorized"))
    assert 'gpu_autoscaler_auth_failures_total{code="401"} 1.0' in await ops_metrics(api_server)


async def test_a_proxy_name_not_allowed_is_counted_each_time_and_logged_once(api_server, caplog):
    with caplog.at_level(logging.INFO, logger="autoscaler.web.security.auth"):
        for _ in range(5):
            answer = await get_as(api_server, api_server.pki.proxy_not_allowed, {"X-Remote-User": "bob"})
            assert answer == (401, status(401, "Unauthorized"))
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "autoscaler.web.security.auth"] == [
        (
            "WARNING",
            "request-header client certificate CN 'someone-else' is not in the allowed names: its headers are ignored",
        )
    ]
    assert 'gpu_autoscaler_auth_failures_total{code="401"} 5.0' in await ops_metrics(api_server)


def send_without_reading(server: RunningServer, limit_s: float) -> tuple[float, str]:
    """Pipeline requests and never read an answer; (seconds until the server cut us off, how)."""
    context = server.ssl_context(server.pki.alice)
    path = f"{PREFIX}/namespaces/default/gpu_headroom"
    return pipeline_without_reading(server.listening.secure_port, context, path, limit_s)


async def test_a_client_that_never_reads_is_cut_off_after_the_idle_timeout(api_server, caplog):
    with caplog.at_level(logging.WARNING, logger="autoscaler.web.security.tls_accept"):
        elapsed, how = await asyncio.to_thread(send_without_reading, api_server, 15.0)
    assert how in ("ConnectionResetError", "SSLEOFError", "BrokenPipeError"), how
    assert elapsed < 6  # idle_timeout is 1 s in the fixture: stalled for 1 s, seen within the next 0.5 s
    (record,) = caplog.records
    assert re.fullmatch(
        r"connection from 127\.0\.0\.1:\d+ aborted: \d+ bytes of answers unread for 1 s", record.getMessage()
    ), record.getMessage()
    await still_serving(api_server)
    assert "gpu_autoscaler_connections_aborted_total 1.0" in await ops_metrics(api_server)


async def test_a_selector_bound_go_would_not_parse_is_a_400(api_server):
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            api_server.base_url + f"{PREFIX}/namespaces/default/gpu_headroom",
            params={"labelSelector": "pool>1_000"},
            ssl=api_server.ssl_context(api_server.pki.alice),
        ) as response,
    ):
        assert response.status == 400
        assert (await response.json())["message"] == (
            "invalid labelSelector: for '>' the value must be an integer, got '1_000'"
        )


class _Transport:
    """What WriteStallGuard reads of a transport: a write buffer that stays full, or a broken one."""

    def __init__(self, size: int, broken: bool = False) -> None:
        self.size, self.broken, self.aborted, self.closed = size, broken, False, False

    def is_closing(self) -> bool:
        return self.aborted or self.closed

    def get_write_buffer_size(self) -> int:
        if self.broken:
            raise RuntimeError("a transport in a state nobody expected")
        return self.size

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 5555) if name == "peername" else None

    def abort(self) -> None:
        self.aborted = True


async def test_a_broken_connection_does_not_end_the_write_stall_guard(caplog):
    from autoscaler.web.security.tls_accept import WriteStallGuard

    guard = WriteStallGuard(0.2)
    broken, stalled = _Transport(100, broken=True), _Transport(100)
    guard.watch(broken)  # type: ignore[arg-type]
    guard.watch(stalled)  # type: ignore[arg-type]
    task = asyncio.create_task(guard.run())
    try:
        await eventually(lambda: stalled.aborted, message="the stalled connection aborted", timeout=5)
    finally:
        task.cancel()
    assert "write-stall guard: a connection's write buffer could not be read; not watched" in caplog.text


def test_a_connection_closed_with_answers_unread_is_still_aborted(monkeypatch):
    """aiohttp closes an idle keep-alive connection; its close then waits for the peer to take the
    answers queued: a peer that reads nothing would hold it for good. The guard aborts it still, and
    forgets a closing one with nothing waiting."""
    from autoscaler.throttled_log import ThrottledLog
    from autoscaler.web.security import tls_accept
    from autoscaler.web.security.tls_accept import WriteStallGuard

    monkeypatch.setattr(tls_accept, "_stalls", ThrottledLog(tls_accept.log))  # its own throttle
    now = [0.0]
    guard = WriteStallGuard(1.0, clock=lambda: now[0])
    stalled, drained = _Transport(4096), _Transport(0)
    for transport in (stalled, drained):
        transport.closed = True
        guard.watch(transport)  # type: ignore[arg-type]
    for _ in range(3):
        now[0] += 0.5
        guard.sweep()
    assert (stalled.aborted, drained.aborted, guard.aborted) == (True, False, 1)
    assert guard._watched == {}
