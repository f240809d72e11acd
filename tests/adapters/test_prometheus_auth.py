"""What PrometheusSource sends (auth, headers) and how it classifies answers, against a scripted server.

The real Prometheus in the other test files serves no auth and cannot be made to answer 401 or a
malformed matrix, so a small aiohttp app in the test's own loop plays Prometheus here.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from aiohttp import web

from adapters.prometheus.client import (
    PrometheusAuthError,
    PrometheusBadResponse,
    PrometheusClientSettings,
    PrometheusError,
    PrometheusQueryError,
    PrometheusSource,
    PrometheusTimeout,
)
from adapters.prometheus.promql import SignalQuery

MINUTE = timedelta(minutes=1)
NOW = pd.Timestamp("2026-11-22T08:00:00Z")
MATRIX = {
    "status": "success",
    "data": {"resultType": "matrix", "result": [{"metric": {"pool": "a"}, "values": [[NOW.timestamp(), "3"]]}]},
}


def error(status: int, error_type: str, message: str) -> web.Response:
    return web.json_response({"status": "error", "errorType": error_type, "error": message}, status=status)


ANSWERS: dict[str, Any] = {
    "ok": lambda: web.json_response(MATRIX),
    "unauthorised": lambda: web.Response(status=401, text="Unauthorized"),
    "timeout": lambda: error(503, "timeout", "query timed out in expression evaluation"),
    "too_many": lambda: error(422, "execution", "query processing would load too many samples into memory"),
    "not_found": lambda: web.Response(status=404, text="404 page not found"),
    "bad_samples": lambda: web.json_response(
        {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "x", 2]]}]}}
    ),
    "no_data": lambda: web.json_response({"status": "success"}),
    "redirect": lambda: web.HTTPFound("/api/v1/query_range?query=ok&start=0&end=0&step=60s"),
}


@dataclasses.dataclass
class FakePrometheus:
    url: str
    seen: list[web.Request]


@pytest.fixture
async def fake_prometheus() -> AsyncIterator[FakePrometheus]:
    seen: list[web.Request] = []

    async def query_range(request: web.Request) -> web.StreamResponse:
        seen.append(request)
        answer = ANSWERS[request.query["query"]]()
        if isinstance(answer, web.HTTPException):
            raise answer
        return answer

    app = web.Application()
    app.router.add_get("/api/v1/query_range", query_range)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield FakePrometheus(url=f"http://127.0.0.1:{runner.addresses[0][1]}", seen=seen)
    await runner.cleanup()


def settings(url: str, **overrides: Any) -> PrometheusClientSettings:
    fast = PrometheusClientSettings(url=url, timeout_s=5.0, retries=1, backoff_initial_s=0.01, backoff_max_s=0.01)
    return dataclasses.replace(fast, **overrides)


async def pull(source: PrometheusSource, query: str = "ok") -> list[Any]:
    return await source.backfill(SignalQuery("q", query, MINUTE), NOW - 2 * MINUTE, NOW)


async def test_bearer_token_and_extra_headers_are_sent(fake_prometheus: FakePrometheus) -> None:
    configured = settings(fake_prometheus.url, bearer_token="t0ken", headers={"X-Scope-OrgID": "team-a"})
    async with PrometheusSource(configured) as source:
        (signal,) = await pull(source)
    assert signal.labels == {"pool": "a"}
    request = fake_prometheus.seen[0]
    assert request.headers["Authorization"] == "Bearer t0ken"
    assert request.headers["X-Scope-OrgID"] == "team-a"
    assert request.query["timeout"] == "5"
    assert request.query["step"] == "60s"


async def test_bearer_token_file_is_reread_so_rotation_works(fake_prometheus: FakePrometheus, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    async with PrometheusSource(settings(fake_prometheus.url, bearer_token_file=token)) as source:
        await pull(source)
        token.write_text("second\n")
        await pull(source)
    assert [r.headers["Authorization"] for r in fake_prometheus.seen] == ["Bearer first", "Bearer second"]


async def test_basic_auth_is_sent(fake_prometheus: FakePrometheus) -> None:
    async with PrometheusSource(settings(fake_prometheus.url, basic_auth=("ops", "pa:ss"))) as source:
        await pull(source)
    expected = "Basic " + base64.b64encode(b"ops:pa:ss").decode()
    assert fake_prometheus.seen[0].headers["Authorization"] == expected


@pytest.mark.parametrize(
    ("query", "raised", "attempts", "text"),
    [
        ("unauthorised", PrometheusAuthError, 1, "HTTP 401"),
        # Prometheus was up: its own timeout is named as such, and the same query is not tried again.
        ("timeout", PrometheusTimeout, 1, "Prometheus-side timeout, HTTP 503 .*: query timed out"),
        ("too_many", PrometheusQueryError, 1, "too many samples"),
        ("not_found", PrometheusBadResponse, 2, "404 page not found"),
        ("bad_samples", PrometheusBadResponse, 2, r"series \{\}: a sample is not a \[timestamp, value\] pair"),
        ("no_data", PrometheusBadResponse, 2, "not a Prometheus API result"),
    ],
)
async def test_answers_are_classified(
    fake_prometheus: FakePrometheus, query: str, raised: type[PrometheusError], attempts: int, text: str
) -> None:
    async with PrometheusSource(settings(fake_prometheus.url)) as source:
        with pytest.raises(raised, match=text) as caught:
            await pull(source, query)
    assert caught.value.attempts == attempts == len(fake_prometheus.seen)


async def test_redirects_are_followed(fake_prometheus: FakePrometheus) -> None:
    async with PrometheusSource(settings(fake_prometheus.url)) as source:
        (signal,) = await pull(source, "redirect")
    assert signal.labels == {"pool": "a"}


async def test_a_closed_source_refuses_work(fake_prometheus: FakePrometheus) -> None:
    source = PrometheusSource(settings(fake_prometheus.url))
    await source.aclose()
    with pytest.raises(PrometheusError, match="closed"):
        await pull(source)
