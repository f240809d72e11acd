"""/readyz?verbose and the page name each metric with no value and why, on a real Prometheus behind a
proxy that holds one signal's queries past the timeout: the query running, then its timeout, then
the value once Prometheus answers again. A signal whose query has no series is named, and never
holds readiness back."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from html import escape
from pathlib import Path

import aiohttp
import pytest

from autoscaler.app.access import build_access, client_ca_pems
from autoscaler.app.factory import REFRESHER, create_app
from autoscaler.app.serving import running
from autoscaler.config.settings import Settings
from autoscaler.refresh.pipeline import open_pipeline
from autoscaler.refresh.refresher import Refresher
from autoscaler.web.security.tls import ServerTLS, ensure_self_signed
from autoscaler.web.shared.readiness import Readiness
from tests.eventually import eventually
from tests.prometheus_fixture import FaultProxy, PrometheusServer, ProxyMode

pytestmark = pytest.mark.prometheus

# What the proxy holds: the request-rate signal's queries.
SLOW = "http_requests_total"


def settings_for(url: str, tmp_path: Path) -> Settings:
    return Settings.model_validate(
        {
            "server": {"bind_address": "127.0.0.1", "secure_port": 0, "http_port": 0, "shutdown_grace": "1s"},
            "auth": {"mode": "none"},
            "prometheus": {"url": url, "timeout": "4s", "retries": 0},
            "signals": [
                {"name": "gpus_requested", "preset": "gpus_requested", "by": ["nodepool"], "step": "5m"},
                # No liveness: the session's counters end where its backfill does, and a test that runs
                # minutes later would see their exporter as dead; what is tested is the query's timeout.
                {
                    "name": "requests",
                    "preset": "request_rate",
                    "metric": SLOW,
                    "by": ["service"],
                    "step": "5m",
                    "liveness": False,
                },
                # No exporter writes this: the query answers, with no series.
                {"name": "absent", "query": "sum by (nodepool) (no_such_exporter_metric)", "by": ["nodepool"]},
            ],
            "metrics": {
                "gpu_demand_forecast": {"signal": "gpus_requested", "kind": "demand", "quantile": 0.9},
                "request_demand": {"signal": "requests", "kind": "demand", "quantile": 0.9},
                "absent_demand": {"signal": "absent", "kind": "demand", "quantile": 0.9},
            },
            # One refresh an hour: between refreshes what /readyz says holds still; the test wakes it.
            "forecast": {"lookback": "2d", "interval": "1h", "default_lead_time": "10m", "reselect_every": "1d"},
            "state_dir": str(tmp_path / "state"),
        }
    )


@dataclass
class Service:
    session: aiohttp.ClientSession
    ops: str
    readiness: Readiness
    refresher: Refresher

    async def get(self, path: str) -> tuple[int, str]:
        async with self.session.get(self.ops + path) as response:
            return response.status, await response.text()


@pytest.fixture
async def service(fault_proxy: FaultProxy, tmp_path: Path) -> AsyncIterator[Service]:
    # Held past the 4 s timeout from the first request on: the first refresh serves the other signals.
    fault_proxy.set_mode(ProxyMode.DELAY, delay_s=6.0, matching=SLOW)
    settings = settings_for(fault_proxy.url, tmp_path)
    async with open_pipeline(settings, None) as pipeline:
        access = await build_access(settings)
        readiness = Readiness()
        api_app, ops_app = create_app(settings, pipeline=pipeline, access=access, readiness=readiness)
        tls = ServerTLS(ensure_self_signed(settings.state_dir, ("127.0.0.1",)), client_ca_pems(access))
        async with (
            running(settings, api_app=api_app, ops_app=ops_app, tls=tls) as listening,
            aiohttp.ClientSession() as session,
        ):
            ops = f"http://127.0.0.1:{listening.http_port}"
            yield Service(session, ops, readiness, api_app[REFRESHER])


def stamp(service: Service, signal: str) -> str:
    return f"{service.refresher.stats.last_success[signal]:%Y-%m-%dT%H:%M:%SZ}"


async def test_readyz_names_the_query_that_times_out_until_it_answers(
    service: Service, fault_proxy: FaultProxy, prometheus: PrometheusServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="autoscaler.app.factory")
    stats = service.refresher.stats

    async def query_running() -> str:
        under_way = stats.running.get("requests")
        assert under_way is not None and under_way[0] == "query", stats.running
        status, body = await service.get("/readyz?verbose")
        since = f"{under_way[1]:%Y-%m-%dT%H:%M:%SZ}"
        line = f"[-]metric request_demand failed: no value yet: signal requests: query running since {since}"
        assert (status, line in body.splitlines(), body.splitlines()[-1]) == (503, True, "readyz check failed"), body
        return body

    # The first refresh: nothing served yet, and the slow query shows as running.
    await eventually(query_running, message="the request-rate query to show as running", timeout=30, interval=0.1)

    def timed_out() -> str:
        assert service.readiness.ready
        return stats.last_error["requests"]

    error = await eventually(timed_out, message="the first refresh to end", timeout=60, interval=0.1)
    # Whichever of the signal's two queries gave up first is named, with its kind and the client's words.
    assert re.fullmatch(r"pull failed: QueryFailed: query 'requests(:alive)?' failed \(timeout\): .+", error), error
    served = f"[+]signal gpus_requested: last success {stamp(service, 'gpus_requested')}"
    assert await service.get("/readyz?verbose") == (
        200,
        "[+]snapshot: forecasts served\n"
        "[+]tls ok\n"
        "[-]signal absent: failing: pull returned no series (no success yet)\n"
        f"{served}\n"
        f"[-]signal requests: failing: {error} (no success yet)\n"
        "[-]metric absent_demand failed: no value: signal absent: pull returned no series\n"
        "[+]metric gpu_demand_forecast ok (3 series)\n"
        f"[-]metric request_demand failed: no value yet: signal requests: {error}\n"
        "readyz check passed\n",
    )
    # The probe itself: served values make the pod ready; the signal with no series does not hold it.
    assert await service.get("/readyz") == (200, "ok")
    missing = "no value yet: absent_demand, request_demand (see /readyz?verbose)"
    assert f"first forecast served; ready; {missing}" in caplog.messages
    status, page = await service.get("/")
    assert status == 200
    assert f'<span class="muted">{escape(f"no value yet: signal requests: {error}")}</span>' in page
    assert f'<span class="muted">{escape("no value: signal absent: pull returned no series")}</span>' in page

    fault_proxy.set_mode(ProxyMode.PASS_THROUGH)
    service.refresher.wake()

    assert prometheus.trace is not None
    services = len(prometheus.trace.requests_total.columns)

    async def recovered() -> bool:
        assert "requests" in stats.last_success, stats
        assert await service.get("/readyz?verbose") == (
            200,
            "[+]snapshot: forecasts served\n"
            "[+]tls ok\n"
            "[-]signal absent: failing: pull returned no series (no success yet)\n"
            f"[+]signal gpus_requested: last success {stamp(service, 'gpus_requested')}\n"
            f"[+]signal requests: last success {stamp(service, 'requests')}\n"
            "[-]metric absent_demand failed: no value: signal absent: pull returned no series\n"
            "[+]metric gpu_demand_forecast ok (3 series)\n"
            f"[+]metric request_demand ok ({services} series)\n"
            "readyz check passed\n",
        )
        return True

    # Polled: the refresh that recovers ends between a few awaits (the snapshot, then the check lines).
    await eventually(recovered, message="the request-rate signal to be served", timeout=60, interval=0.1)
    status, page = await service.get("/")
    assert status == 200 and "no value yet" not in page
    assert "first values of request_demand; no value yet: absent_demand (see /readyz?verbose)" in caplog.messages
