"""Whole services (create_app, real sockets, a forecast worker process) publishing and reading
GPUForecasts on the fake API: a publishing and a reading replica give one answer on the external
metrics API and /metrics; a new pod with an empty state dir serves the published values at once."""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp

from autoscaler.app.access import build_access, client_ca_pems
from autoscaler.app.factory import create_app
from autoscaler.app.serving import Listening, running
from autoscaler.config.settings import Settings
from autoscaler.refresh.pipeline import Pipeline
from autoscaler.targets.plans import RefreshSettings
from autoscaler.web.security.tls import ServerTLS, ensure_self_signed
from autoscaler.web.shared.readiness import Readiness
from tests.autoscaler.test_publication import HOME, METRICS, NAMESPACE, PLANS, SHARDS, TraceSource
from tests.eventually import eventually

BASE = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default"


def settings_for(tmp_path: Path, name: str, **publication: Any) -> Settings:
    return Settings.model_validate(
        {
            "server": {"bind_address": "127.0.0.1", "secure_port": 0, "http_port": 0, "shutdown_grace": "1s"},
            "auth": {"mode": "none"},
            "forecast": {"workers": 1},
            "publication": {"enabled": True, "namespace": NAMESPACE, "shards": SHARDS, **publication},
            "state_dir": str(tmp_path / name),
        }
    )


@contextlib.asynccontextmanager
async def service(settings: Settings, kube, source: TraceSource) -> AsyncIterator[tuple[Listening, Readiness]]:
    """One replica: the pipeline is the trace source, so no Prometheus is needed."""
    pipeline = Pipeline(
        metrics=METRICS,
        plans=PLANS,
        sources=(source,),
        refresh=RefreshSettings(interval=timedelta(seconds=1), lead_time=timedelta(minutes=10)),
    )
    access = await build_access(settings)
    readiness = Readiness()
    api_app, ops_app = create_app(settings, pipeline=pipeline, access=access, readiness=readiness, kube=kube)
    tls = ServerTLS(ensure_self_signed(settings.state_dir, ("127.0.0.1",)), client_ca_pems(access))
    async with running(settings, api_app=api_app, ops_app=ops_app, tls=tls) as listening:
        yield listening, readiness


async def items(session: aiohttp.ClientSession, listening: Listening, metric: str) -> list[dict[str, Any]]:
    async with session.get(f"https://127.0.0.1:{listening.secure_port}{BASE}/{metric}", ssl=False) as response:
        assert response.status == 200, await response.text()
        return list((await response.json())["items"])


async def text(session: aiohttp.ClientSession, listening: Listening) -> str:
    async with session.get(f"http://127.0.0.1:{listening.http_port}/metrics") as response:
        return await response.text()


async def inspected(session: aiohttp.ClientSession, listening: Listening) -> list[dict[str, Any]]:
    """The inspection API's series of one metric: value, labels, timestamp, model and lead time."""
    url = f"http://127.0.0.1:{listening.http_port}/api/v1/forecasts"
    async with session.get(url) as response:
        assert response.status == 200, await response.text()
        (demand,) = [m for m in (await response.json())["metrics"] if m["metric"] == "gpu_demand_forecast"]
    keys = ("labels", "value", "timestamp", "model", "lead_time_seconds")
    return [{key: series[key] for key in keys} for series in demand["series"]]


async def served_lines(session: aiohttp.ClientSession, listening: Listening) -> list[str]:
    return sorted(re.findall(r"^gpu_autoscaler_served_value\{.*$", await text(session, listening), re.M))


async def test_a_publishing_and_a_reading_replica_give_one_answer(fake_kube, kube_api, tmp_path):
    publishing = settings_for(tmp_path, "a", serve_from="objects")
    reading = settings_for(tmp_path, "b", serve_from="objects", publish=False)
    reader_api = await fake_kube.api_client()
    reader_api.user_agent = "reading-replica"
    async with (
        contextlib.AsyncExitStack() as stack,
        service(publishing, kube_api, TraceSource()) as (a, ready_a),
        service(reading, reader_api, TraceSource()) as (b, ready_b),
        aiohttp.ClientSession() as session,
    ):
        stack.push_async_callback(reader_api.close)

        async def one_answer() -> bool:
            assert ready_a.ready and ready_b.ready, (ready_a, ready_b)
            for metric in ("gpu_demand_forecast", "gpu_headroom"):
                mine, theirs = await items(session, a, metric), await items(session, b, metric)
                assert mine and mine == theirs, (mine, theirs)
            summaries = [await inspected(session, replica) for replica in (a, b)]
            assert summaries[0] == summaries[1] and summaries[0][0]["model"], summaries
            lines = await served_lines(session, a)
            assert len(lines) == 2 and lines == await served_lines(session, b), lines
            return True

        await eventually(one_answer, message="both replicas serve the published items", timeout=60, interval=0.2)
        assert ready_b.reason.startswith("serving published forecasts")

        async def every_shard_written() -> bool:
            # The publisher writes in the background: the shards holding the served series may land
            # before the empty ones, so the count is awaited, not read once.
            written = re.search(
                r'^gpu_autoscaler_gpuforecast_writes_total\{outcome="written"\} (\S+)$', await text(session, a), re.M
            )
            assert written is not None and float(written.group(1)) >= SHARDS, written
            return True

        await eventually(every_shard_written, message="every shard's object written once", timeout=30)
        assert "gpu_autoscaler_gpuforecast_writes" not in await text(session, b)  # the reader writes nothing
    # Only the publishing replica wrote; the reader listed and watched.
    by_reader = [r for r in fake_kube.requests_for("gpuforecasts") if r.headers.get("User-Agent") == "reading-replica"]
    assert {(r.method, r.watch) for r in by_reader} == {("GET", False), ("GET", True)}
    assert {r.method for r in fake_kube.requests_for("gpuforecasts")} == {"GET", "POST", "PUT"}


async def test_a_new_pod_with_an_empty_state_dir_serves_the_published_values_at_once(fake_kube, kube_api, tmp_path):
    async with (
        service(settings_for(tmp_path, "old"), kube_api, TraceSource()) as (old, ready_old),
        aiohttp.ClientSession() as session,
    ):

        async def published() -> list[dict[str, Any]]:
            assert ready_old.ready
            served = await items(session, old, "gpu_demand_forecast")
            forecast = fake_kube.get("gpuforecasts", HOME, NAMESPACE)
            assert forecast is not None, "not created yet"  # the publisher writes in the background
            # Created first, its status written next (a subresource): both are awaited.
            assert "status" in forecast, "status not written yet"
            status = forecast["status"]
            assert abs(status["items"][0]["value"] - _value(served[0]["value"])) < 0.001
            return served

        last = await eventually(published, message="the old pod to publish what it serves", timeout=60, interval=0.2)
    # The old pod is gone. The new one cannot reach Prometheus: all it can serve is what was published.
    source = TraceSource()
    source.failing = True
    assert not (tmp_path / "new").exists()
    async with (
        service(settings_for(tmp_path, "new"), kube_api, source) as (new, ready_new),
        aiohttp.ClientSession() as session,
    ):
        assert ready_new.ready and "published in GPUForecasts" in ready_new.reason
        assert await items(session, new, "gpu_demand_forecast") == last


def _value(quantity: str) -> float:
    return float(quantity.removesuffix("m")) / (1000 if quantity.endswith("m") else 1)


async def test_two_sharded_services_split_the_shards_and_give_one_answer(fake_kube, kube_api, tmp_path):
    """The app factory's wiring: with publication.sharding each service takes its share of the shard
    Leases, fits and publishes those, and serves every shard from the objects."""
    from tests.autoscaler.test_sharded_refresh import POOLS, PoolsSource

    sharded = {"serve_from": "objects", "sharding": {"enabled": True}}
    other_api = await fake_kube.api_client()
    async with (
        contextlib.AsyncExitStack() as stack,
        service(settings_for(tmp_path, "a", **sharded), kube_api, PoolsSource()) as (a, ready_a),
        service(settings_for(tmp_path, "b", **sharded), other_api, PoolsSource()) as (b, ready_b),
        aiohttp.ClientSession() as session,
    ):
        stack.push_async_callback(other_api.close)

        def holders() -> list[str]:
            names = [f"gpu-autoscaler-shard-{shard}-of-{SHARDS}" for shard in range(SHARDS)]
            return [
                (fake_kube.get("leases", name, NAMESPACE) or {}).get("spec", {}).get("holderIdentity") for name in names
            ]

        async def one_answer() -> bool:
            assert ready_a.ready and ready_b.ready, (ready_a, ready_b)
            counts = sorted(Counter(holders()).values())
            assert counts == [2, 2], holders()
            for metric in ("gpu_demand_forecast", "gpu_headroom"):
                mine, theirs = await items(session, a, metric), await items(session, b, metric)
                assert sorted(i["metricLabels"]["pool"] for i in mine) == sorted(POOLS), mine
                assert mine == theirs, (mine, theirs)
            return True

        await eventually(one_answer, message="balanced and one answer", timeout=90, interval=0.5)
