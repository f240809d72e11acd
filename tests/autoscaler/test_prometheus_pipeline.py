"""The service on a real Prometheus (backfilled from the Helios trace): per-pool metrics served
within seconds of start; kills, restarts, slow and garbage answers never blank a value."""

from __future__ import annotations

import contextlib
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import aiohttp
import pandas as pd
import pytest

from autoscaler.app.access import build_access, client_ca_pems
from autoscaler.app.factory import create_app, update_readiness
from autoscaler.app.serving import running
from autoscaler.config.settings import Settings
from autoscaler.refresh.pipeline import Pipeline, open_pipeline
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import ForecastPools
from autoscaler.selectors import EVERYTHING, parse_selector
from autoscaler.serving.provider import SnapshotProvider, empty_snapshot
from autoscaler.targets.plans import RefreshInputs
from autoscaler.web.security.tls import ServerTLS, ensure_self_signed
from autoscaler.web.shared.readiness import Readiness
from tests.eventually import eventually
from tests.prometheus_fixture import ProxyMode

pytestmark = pytest.mark.prometheus


def service_settings(url: str, tmp_path, **forecast) -> Settings:
    return Settings.model_validate(
        {
            "server": {"bind_address": "127.0.0.1", "secure_port": 0, "http_port": 0, "shutdown_grace": "1s"},
            "auth": {"mode": "none"},
            "prometheus": {
                "url": url,
                # Two weeks of 30-second peaks take seconds on a busy 2-core machine.
                "timeout": "10s",
                "retries": 1,
                "backoff_initial": "50ms",
                "backoff_max": "100ms",
            },
            "signals": [{"name": "gpus_requested", "preset": "gpus_requested", "by": ["nodepool"], "step": "5m"}],
            "metrics": {
                "gpu_demand_forecast": {"signal": "gpus_requested", "kind": "demand", "quantile": 0.9},
                "gpu_headroom": {"signal": "gpus_requested", "kind": "headroom", "quantile": 0.9},
            },
            "forecast": {"lookback": "7d", "interval": "1s", "default_lead_time": "10m", **forecast},
            "state_dir": str(tmp_path / "state"),
        }
    )


def pool_totals(trace, step="5min") -> pd.DataFrame:
    """GPUs requested per nodepool from what the fixture wrote (Running pods on the pool's nodes)."""
    running = trace.running.T.groupby(trace.nodepool_of_vc).sum().T
    return running.resample(step).mean()


async def test_serves_per_pool_metrics_within_seconds_of_start(prometheus, tmp_path):
    settings = service_settings(prometheus.url, tmp_path)
    started = time.perf_counter()
    async with open_pipeline(settings, None) as pipeline:
        access = await build_access(settings)
        readiness = Readiness()
        api_app, ops_app = create_app(settings, pipeline=pipeline, access=access, readiness=readiness)
        tls = ServerTLS(ensure_self_signed(settings.state_dir, ("127.0.0.1",)), client_ca_pems(access))
        async with running(settings, api_app=api_app, ops_app=ops_app, tls=tls) as listening:
            base = f"https://127.0.0.1:{listening.secure_port}/apis/external.metrics.k8s.io/v1beta1/namespaces/default"
            async with aiohttp.ClientSession() as session:

                def ready() -> bool:
                    assert readiness.ready, readiness
                    return True

                await eventually(
                    ready,
                    message="the first forecast to make the service ready",
                    timeout=60 - (time.perf_counter() - started),
                    interval=0.2,
                )
                elapsed = time.perf_counter() - started
                async with session.get(
                    f"{base}/gpu_demand_forecast", ssl=False, params={"labelSelector": "nodepool in (a100,h100)"}
                ) as response:
                    assert response.status == 200
                    demand = {item["metricLabels"]["nodepool"]: item for item in (await response.json())["items"]}
                async with session.get(
                    f"{base}/gpu_headroom", ssl=False, params={"labelSelector": "nodepool=a100"}
                ) as response:
                    assert response.status == 200
                    (headroom,) = (await response.json())["items"]
                async with session.get(f"http://127.0.0.1:{listening.http_port}/readyz?verbose") as response:
                    detail = await response.text()
    assert elapsed < 30, f"first forecast took {elapsed:.1f} s"
    assert set(demand) == {"a100", "h100"}
    totals = pool_totals(prometheus.trace)
    for pool, item in demand.items():
        value = float(item["value"].removesuffix("m")) / (1000 if item["value"].endswith("m") else 1)
        recent = totals[pool].iloc[-12:]
        # A p90 forecast ten minutes out: above the recent floor, not wildly above the recent peak.
        assert recent.min() * 0.9 <= value <= recent.max() * 1.5 + 2, (pool, value, recent.tolist())
    assert headroom["metricLabels"] == {"nodepool": "a100"}
    assert "[+]signal gpus_requested: last success" in detail


@dataclass
class Harness:
    refresher: Refresher
    provider: SnapshotProvider
    pipeline: Pipeline


@pytest.fixture
async def refresher_on(tmp_path):
    """Builds a refresher on the given Prometheus URL; everything it opened is closed after the test."""
    async with contextlib.AsyncExitStack() as stack:

        async def build(url: str) -> Harness:
            settings = service_settings(url, tmp_path, reselect_every="1d")
            pipeline = await stack.enter_async_context(open_pipeline(settings, None))
            pool = stack.enter_context(ThreadPoolExecutor(max_workers=2))
            provider = SnapshotProvider(empty_snapshot(pipeline.metrics))
            refresher = Refresher(
                provider=provider,
                inputs=RefreshInputs(
                    metrics=pipeline.metrics,
                    plans=pipeline.plans,
                    sources=pipeline.sources,
                    refresh=pipeline.refresh,
                ),
                pools=ForecastPools([pool]),
            )
            return Harness(refresher, provider, pipeline)

        yield build


def served(provider: SnapshotProvider, pool: str) -> tuple[float, datetime]:
    (series,) = provider.get_metric("default", "gpu_demand_forecast", parse_selector(f"nodepool={pool}"))
    return series.value, series.timestamp


async def test_prometheus_killed_then_restarted(prometheus_restartable, refresher_on):
    harness = await refresher_on(prometheus_restartable.url)
    refresher, provider = harness.refresher, harness.provider
    await refresher.refresh_once()
    value, stamp = served(provider, "a100")
    succeeded = refresher.stats.last_success["gpus_requested"]
    assert value > 0
    prometheus_restartable.kill()
    await refresher.refresh_once()
    # Still served, unchanged and non-zero; the age shows the outage and so does readiness detail.
    assert served(provider, "a100") == (value, stamp)
    assert refresher.stats.failures["gpus_requested"] == 1
    # Whichever of the signal's three queries failed first is named (gpus_requested, its :alive or :pools).
    assert re.fullmatch(
        r"pull failed: QueryFailed: query 'gpus_requested(:alive|:pools)?' failed \(unreachable\): "
        r"query '.+': cannot reach Prometheus: .+Connection refused",
        refresher.stats.last_error["gpus_requested"],
    )
    readiness = Readiness(ready=True)
    update_readiness(readiness, refresher, harness.pipeline)
    assert readiness.checks["signal gpus_requested"].startswith("failing: ")
    prometheus_restartable.start()
    await refresher.refresh_once()
    new_value, new_stamp = served(provider, "a100")
    # Served from a fresh pull again, stamped with its newest data point (no older than before).
    assert new_stamp >= stamp and new_value > 0
    assert refresher.stats.last_success["gpus_requested"] > succeeded
    assert "gpus_requested" not in refresher.stats.last_error


@pytest.mark.parametrize(
    ("mode", "delay_s", "kind"),
    [
        (ProxyMode.HTTP_500, 0.0, "error answer"),
        (ProxyMode.INVALID_JSON, 0.0, "bad answer"),
        (ProxyMode.TRUNCATED, 0.0, "bad answer"),
        (ProxyMode.CONNECTION_DROP, 0.0, "bad answer"),
        (ProxyMode.DELAY, 12.0, "timeout"),  # past the 10 s timeout
    ],
)
async def test_bad_answers_keep_the_last_good_values(fault_proxy, refresher_on, mode, delay_s, kind):
    harness = await refresher_on(fault_proxy.url)
    refresher, provider = harness.refresher, harness.provider
    await refresher.refresh_once()
    before = served(provider, "h100")
    succeeded = refresher.stats.last_success["gpus_requested"]
    fault_proxy.set_mode(mode, delay_s=delay_s)
    await refresher.refresh_once()
    assert served(provider, "h100") == before
    assert before[0] > 0
    assert refresher.stats.failures["gpus_requested"] == 1
    # The error names the kind of failure (and the query: whichever of the three failed first).
    assert re.match(
        rf"pull failed: QueryFailed: query 'gpus_requested[:a-z]*' failed \({kind}\): ",
        refresher.stats.last_error["gpus_requested"],
    )
    fault_proxy.set_mode(ProxyMode.PASS_THROUGH)
    await refresher.refresh_once()
    assert refresher.stats.last_success["gpus_requested"] > succeeded
    assert served(provider, "h100")[1] >= before[1]


async def test_incremental_pulls_read_only_new_points(fault_proxy, refresher_on):
    harness = await refresher_on(fault_proxy.url)
    refresher, provider = harness.refresher, harness.provider
    await refresher.refresh_once()
    first = fault_proxy.requests_seen
    await refresher.refresh_once()
    # 7 days at 5 minutes fits one request; the next pull is a single small request too, for the
    # signal, for kube-state-metrics's liveness and for the known pools each.
    assert fault_proxy.requests_seen - first == 3
    history = provider.snapshot.series["gpu_demand_forecast"][0].provenance.history
    assert history.index[-1] - history.index[0] >= timedelta(days=6, hours=23)
    assert history.index.tz == UTC or str(history.index.tz) == "UTC"
    assert len(provider.get_metric("x", "gpu_headroom", EVERYTHING)) == 3  # a100, h100, and pending ("")
