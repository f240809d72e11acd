"""The external metrics API runs on its own loop: a blocked ops port does not hold its answers.

A real server (``running``), real sockets: the ops port gets a handler that blocks the main loop for
seconds (as a chart drawn on the loop would), and an HPA's request over TLS is answered meanwhile.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from aiohttp import web

from autoscaler.app.access import build_access, client_ca_pems
from autoscaler.app.api_loop import LoopThread
from autoscaler.app.factory import create_app
from autoscaler.app.serving import Listening, running
from autoscaler.refresh.pipeline import Pipeline
from autoscaler.serving.provider import SnapshotProvider
from autoscaler.targets.plans import RefreshSettings
from autoscaler.web.security.auth import AccessControl, AccessDenied, Authorizer, User
from autoscaler.web.security.tls import ServerTLS, ServingFiles
from autoscaler.web.shared.readiness import Readiness
from tests.autoscaler.conftest import METRICS, NOW, fixed_snapshot, server_settings
from tests.pki import PKI

METRIC_PATH = "/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/gpu_demand_forecast"
BLOCKED_S = 3.0
API_THREAD = "external-metrics-api"


@asynccontextmanager
async def serving(
    pki: PKI,
    tmp_path: Path,
    ops_routes: dict[str, web.RequestHandler] | None = None,
    authorizer: Authorizer | None = None,
) -> AsyncIterator[Listening]:
    settings = server_settings(pki, tmp_path)
    access = await build_access(settings)
    if authorizer is not None:
        access = AccessControl(authenticator=access.authenticator, authorizer=authorizer)
    pipeline = Pipeline(
        metrics=METRICS, plans=(), sources=(), refresh=RefreshSettings(timedelta(minutes=1), timedelta(minutes=5))
    )
    provider = SnapshotProvider(fixed_snapshot(), clock=lambda: NOW + timedelta(seconds=30))
    api_app, ops_app = create_app(
        settings, pipeline=pipeline, access=access, provider=provider, readiness=Readiness(ready=True)
    )
    for path, handler in (ops_routes or {}).items():
        ops_app.router.add_get(path, handler)
    tls = ServerTLS(ServingFiles(pki.serving_cert, pki.serving_key), client_ca_pems(access))
    async with running(settings, api_app=api_app, ops_app=ops_app, tls=tls) as listening:
        yield listening


def https_get(pki: PKI, port: int, namespace: str = "default") -> tuple[int, dict[str, object]]:
    """One GET of the metric with alice's client certificate, from the calling thread."""
    import ssl

    context = ssl.create_default_context(cafile=str(pki.client_ca))
    context.load_cert_chain(pki.alice.cert, pki.alice.key)
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=BLOCKED_S * 3)
    try:
        connection.request("GET", METRIC_PATH.format(namespace=namespace))
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


async def test_the_api_answers_while_the_ops_loop_is_blocked(pki: PKI, tmp_path: Path) -> None:
    blocking, unblocked_at = threading.Event(), [0.0]

    async def slow_chart(request: web.Request) -> web.Response:
        blocking.set()
        time.sleep(BLOCKED_S)  # noqa: ASYNC251 - the point: the main loop does nothing else meanwhile
        unblocked_at[0] = time.monotonic()
        return web.Response(text="drawn")

    async with serving(pki, tmp_path, {"/slow-chart": slow_chart}) as listening:
        ops = threading.Thread(
            target=lambda: urllib.request.urlopen(
                f"http://127.0.0.1:{listening.http_port}/slow-chart", timeout=30
            ).read()
        )

        def hpa_while_blocked() -> tuple[int, dict[str, object], float, float]:
            ops.start()
            assert blocking.wait(10), "the slow handler never started"
            started = time.monotonic()
            status, body = https_get(pki, listening.secure_port)
            return status, body, started, time.monotonic()

        # A thread of its own: this test's loop is the main loop, which the handler blocks.
        status, body, started, answered = await asyncio.to_thread(hpa_while_blocked)
        await asyncio.to_thread(ops.join, 30)
        assert status == 200, body
        assert [item["value"] for item in body["items"]] == ["12", "3250m"]  # type: ignore[attr-defined]
        assert answered < unblocked_at[0], "answered only after the ops loop was free again"
        assert answered - started < 1.0, f"the answer took {answered - started:.2f} s"
    assert not any(thread.name == API_THREAD for thread in threading.enumerate()), (
        "the API's thread outlived the server"
    )


class RecordingAuthorizer:
    """An authorizer of a kind the API loop does not know (it might use a client of the main loop)."""

    def __init__(self) -> None:
        self.loops: list[asyncio.AbstractEventLoop] = []

    async def authorize(self, user: User, *, namespace: str, metric: str) -> None:
        self.loops.append(asyncio.get_running_loop())
        if namespace != "default":
            raise AccessDenied(403, f"{user.username} may not read {namespace}")


async def test_an_authorizer_of_unknown_kind_is_asked_on_the_main_loop(pki: PKI, tmp_path: Path) -> None:
    authorizer = RecordingAuthorizer()
    async with serving(pki, tmp_path, authorizer=authorizer) as listening:
        allowed = await asyncio.to_thread(https_get, pki, listening.secure_port)
        denied = await asyncio.to_thread(https_get, pki, listening.secure_port, "kube-system")
    assert allowed[0] == 200, allowed
    assert denied[0] == 403 and denied[1]["message"] == "alice may not read kube-system", denied
    assert authorizer.loops == [asyncio.get_running_loop()] * 2


async def test_the_switch_interval_is_held_while_any_loop_thread_runs_and_restored_after_the_last():
    before = sys.getswitchinterval()
    first, second = LoopThread("first", switch_interval_s=0.0003), LoopThread("second", switch_interval_s=0.0002)
    first.start()
    assert sys.getswitchinterval() == pytest.approx(0.0003)
    second.start()
    assert sys.getswitchinterval() == pytest.approx(0.0002)  # the shorter one
    await first.stop()  # stopped in the order started, not the reverse: the other still runs
    assert sys.getswitchinterval() == pytest.approx(0.0002)
    assert await second.run(asyncio.sleep(0, result="ran")) == "ran"
    await second.stop()
    assert sys.getswitchinterval() == before
