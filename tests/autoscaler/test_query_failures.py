"""A signal's failed query names itself and its kind of failure, as /readyz?verbose shows it: a scripted
Prometheus on loopback answers each query as its PromQL says (the real one cannot answer 401)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pandas as pd
import pytest
from aiohttp import web

from adapters.prometheus.client import PrometheusClientSettings, PrometheusSource
from adapters.prometheus.promql import SignalQuery
from autoscaler.refresh.sources import PrometheusSignalSource, QueryFailed
from tests.prometheus_fixture import free_port

NOW = pd.Timestamp("2026-11-22T08:00:00Z").to_pydatetime()


def error(status: int, error_type: str, message: str) -> web.Response:
    return web.json_response({"status": "error", "errorType": error_type, "error": message}, status=status)


ANSWERS = {
    "timeout": lambda: error(503, "timeout", "query timed out in expression evaluation"),
    "unauthorised": lambda: web.Response(status=401, text="Unauthorized"),
    "too_many": lambda: error(422, "execution", "query processing would load too many samples into memory"),
    "internal": lambda: web.Response(status=500, text="internal error"),
    "not_found": lambda: web.Response(status=404, text="404 page not found"),
}


@pytest.fixture
async def scripted() -> AsyncIterator[str]:
    async def query_range(request: web.Request) -> web.Response:
        return ANSWERS[request.query["query"]]()

    app = web.Application()
    app.router.add_get("/api/v1/query_range", query_range)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def failure(url: str, promql: str) -> QueryFailed:
    settings = PrometheusClientSettings(url=url, timeout_s=5.0, retries=0)
    async with PrometheusSource(settings) as prometheus:
        source = PrometheusSignalSource(
            prometheus, SignalQuery("demand", promql, timedelta(minutes=1)), timedelta(hours=1)
        )
        with pytest.raises(QueryFailed) as caught:
            await source.pull(NOW)
    return caught.value


@pytest.mark.parametrize(
    ("promql", "kind", "said"),
    [
        # The signal's name, then the PromQL the client sent (here the scripted case's name).
        (
            "timeout",
            "timeout",
            "query 'timeout': Prometheus-side timeout, HTTP 503 from {at}: query timed out in expression evaluation",
        ),
        ("unauthorised", "refused", "query 'unauthorised': HTTP 401 from {at}: Unauthorized"),
        ("too_many", "rejected", "execution: query processing would load too many samples into memory"),
        ("internal", "error answer", "query 'internal': HTTP 500 from {at}: internal error"),
        ("not_found", "bad answer", "query 'not_found': HTTP 404 from {at}: 404 page not found"),
    ],
)
async def test_a_failed_query_says_which_and_what_kind(scripted: str, promql: str, kind: str, said: str) -> None:
    failed = await failure(scripted, promql)
    assert str(failed) == f"query 'demand' failed ({kind}): " + said.format(at=f"{scripted}/api/v1/query_range")
    assert (failed.query, failed.kind) == ("demand", kind)


async def test_a_prometheus_nobody_listens_on_is_unreachable() -> None:
    failed = await failure(f"http://127.0.0.1:{free_port()}", "up")
    assert str(failed).startswith("query 'demand' failed (unreachable): query 'up': cannot reach Prometheus: ")
    assert str(failed).endswith("Connection refused"), str(failed)  # refused, not said to have timed out
    assert failed.kind == "unreachable"
