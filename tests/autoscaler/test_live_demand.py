"""Demand as a live cluster shows it (issue #15), on a real Prometheus holding kube-state-metrics and
dcgm-exporter series (``tests.cluster_scenario``): empty pools fall to 0, a dead exporter is a failure
that ages the values (never a 0), pools that disappear stop being served, slices count as their share
of a GPU, and the shipped example leaves the placeholders out."""

from __future__ import annotations

import logging
import math
import shutil
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

from adapters.kubernetes.watch import WatchGroup
from adapters.prometheus.client import PrometheusClientSettings, PrometheusSource
from adapters.types import Signal
from autoscaler.app.factory import build_api_app, update_readiness
from autoscaler.config.settings import ForecastSettings, KubernetesInputsSettings, KubernetesSettings
from autoscaler.config.settings_loader import load_settings
from autoscaler.refresh.kube_inputs import KubernetesInputs, watch_settings
from autoscaler.refresh.pipeline import known_pools
from autoscaler.refresh.sources import PrometheusSignalSource, SourceDown, signal_query
from autoscaler.serving.provider import MetricNotFound
from autoscaler.simulation.hpa import SYNC_PERIOD_S, HPASpec, milli_value, placeholder_replicas
from autoscaler.web.security.auth import AccessControl
from autoscaler.web.shared.readiness import Readiness
from autoscaler.web.shared.self_metrics import SelfMetrics
from tests.autoscaler.live_cluster import (
    MIG_POOL_GPUS,
    MINUTE,
    STEP,
    LiveCluster,
    Service,
    live_cluster,
    running_service,
    service_settings,
)
from tests.eventually import eventually
from tests.kube_objects import nodepool

pytestmark = pytest.mark.prometheus
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gpu-autoscaler.yaml"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    with live_cluster(tmp_path_factory.mktemp("live-cluster")) as running:
        yield running


async def test_a_pool_that_empties_after_its_window_falls_to_zero(cluster: LiveCluster) -> None:
    end = cluster.last_window_end
    moments = pd.date_range(end - pd.Timedelta(hours=3, minutes=20), end + pd.Timedelta(minutes=30), freq=STEP)
    headroom: list[float] = []
    async with running_service(service_settings(cluster.server.url)) as service:
        for moment in moments:
            await service.at(moment)
            headroom.append(service.served("gpu_headroom", "a100").value)
            if moment == end - pd.Timedelta(minutes=30):
                assert service.served("gpu_demand_forecast", "a100").value == pytest.approx(16)
            if moment == end + STEP:  # the first point that shows the pool empty: [end, end + 5 min)
                demand = service.served("gpu_demand_forecast", "a100")
                assert (demand.value, headroom[-1]) == (0.0, 0.0), demand.explanation
                assert demand.timestamp == end + STEP  # as old as that point, not stamped with the refresh
                assert demand.provenance is not None and demand.provenance.history.iloc[-1] == 0.0
    # The placeholder HPA, as the simulator computes it: up before the window (the pool's nightly
    # demand is forecast), back to 0 once it has ended.
    syncs = np.arange(0.0, (moments[-1] - moments[0]).total_seconds() + 1, SYNC_PERIOD_S)
    usage = np.asarray([milli_value(value) for value in headroom])[(syncs // STEP.total_seconds()).astype(int)]
    replicas = placeholder_replicas(syncs, usage, HPASpec(min_replicas=0))
    assert replicas.max() >= 16
    released = moments[0] + pd.Timedelta(seconds=float(syncs[np.flatnonzero(replicas)[-1]] + SYNC_PERIOD_S))
    assert replicas[-1] == 0 and released <= end + STEP + pd.Timedelta(seconds=300 + SYNC_PERIOD_S)


async def test_a_pool_empty_for_three_hours_is_served_as_zero_and_fresh(cluster: LiveCluster) -> None:
    """The issue's reproduction: two 8-GPU pods for four days, gone for three hours, served as 16."""
    async with running_service(service_settings(cluster.server.url)) as service:
        await service.at(cluster.repro)
        demand = service.served("gpu_demand_forecast", "v100")
    assert demand.value == 0.0, demand.explanation
    assert cluster.repro - demand.timestamp <= STEP
    assert demand.provenance is not None and demand.provenance.history.max() == 16.0


async def test_a_dead_kube_state_metrics_is_a_failure_not_zero_and_goes_stale(cluster: LiveCluster) -> None:
    dead = cluster.ksm_down
    async with running_service(service_settings(cluster.server.url)) as service:
        await service.at(dead - 10 * MINUTE)
        last_good = service.served("gpu_demand_forecast", "h100")
        assert last_good.value == pytest.approx(4.0) and service.refresher.stats.failures == {}
        for moment in pd.date_range(dead - 9 * MINUTE, dead + 14 * MINUTE, freq=MINUTE):
            snapshot = await service.at(moment)
            served = service.served("gpu_demand_forecast", "h100")
            assert served.value == pytest.approx(4.0), moment  # never 0 because the exporter died
        # Prometheus still has the last samples for its 5-minute lookback; then the pulls fail.
        assert served.timestamp <= dead + STEP + MINUTE
        assert service.refresher.stats.last_error["gpus_requested"].startswith(
            "pull failed: SourceDown: its exporter shows no sign of life since"
        )
        assert service.refresher.stats.failures["gpus_requested"] >= 5  # every refresh from dead + 10 min
        assert snapshot.last_error is not None and "SourceDown" in snapshot.last_error
        readiness = Readiness(ready=True)
        update_readiness(readiness, service.refresher, service.pipeline)  # what /readyz?verbose shows
        assert readiness.checks["signal gpus_requested"].startswith("failing: pull failed: SourceDown: ")
        # Past the 15-minute TTL the declared fallbacks apply: error (503) for demand, hold for headroom.
        await service.at(served.timestamp + timedelta(minutes=15, seconds=1))
        demand, headroom = await read_api(service, "gpu_demand_forecast"), await read_api(service, "gpu_headroom")
    assert demand[0] == 503 and "is stale" in demand[1]["message"]
    assert headroom[0] == 200 and headroom[1]["items"][0]["value"] == "0"


async def read_api(service: Service, metric: str) -> tuple[int, dict]:
    """What an HPA reads for ``metric{nodepool=h100}`` on the external metrics API."""
    app = build_api_app(
        provider=service.provider,
        access=AccessControl(authenticator=None, authorizer=None),
        readiness=Readiness(ready=True),
        self_metrics=SelfMetrics(),
    )
    async with TestClient(TestServer(app)) as client:
        path = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/default/{metric}"
        response = await client.get(path, params={"labelSelector": "nodepool=h100"})
        return response.status, await response.json()


async def test_a_pool_that_disappears_stops_being_served(cluster: LiveCluster, caplog) -> None:
    caplog.set_level(logging.INFO)
    async with running_service(service_settings(cluster.server.url, lookback="1d")) as service:
        await service.at(cluster.t4_gone + pd.Timedelta(hours=1))
        t4 = service.served("gpu_demand_forecast", "t4")  # known: its node is gone, its history is not
        assert t4.value == 0.0 and t4.timestamp == cluster.t4_gone + pd.Timedelta(hours=1)
        await service.at(cluster.t4_gone + pd.Timedelta(days=1, hours=1))
        with pytest.raises(MetricNotFound):
            service.served("gpu_demand_forecast", "t4")
        assert service.served("gpu_demand_forecast", "h100").value == pytest.approx(4.0)
    messages = [record.getMessage() for record in caplog.records]
    assert any("{'nodepool': 't4'} is no longer served: no node carries that pool's label" in m for m in messages)


async def test_slices_count_as_their_share_of_a_physical_gpu(cluster: LiveCluster) -> None:
    settings = service_settings(cluster.server.url, time_slicing={"nvidia.com/gpu.shared": 4})
    signals = await pull(cluster, signal_query(settings.signals[0]), cluster.repro)
    mig = pools(signals)["mig"]
    assert mig.iloc[-1] == pytest.approx(MIG_POOL_GPUS)  # 7/7 + 3/7 + 2 x 2/4 + 4/4


async def test_the_shipped_example_leaves_the_placeholders_out(cluster: LiveCluster) -> None:
    example = load_settings(EXAMPLE, environ={})
    (spec,) = [signal for signal in example.signals if signal.name == "gpus_requested"]
    as_shipped = await pull(cluster, signal_query(spec), cluster.repro)
    counting_everything = await pull(
        cluster, signal_query(spec.model_copy(update={"exclude_namespaces": ()})), cluster.repro
    )
    assert pools(counting_everything)["h100"].iloc[-1] == 6.0  # two 1-GPU placeholders beside 4 GPUs
    assert pools(as_shipped)["h100"].iloc[-1] == 4.0
    headroom = example.metrics["gpu_headroom"]
    assert headroom.signal == spec.name and headroom.placeholder_namespace in spec.exclude_namespaces


async def test_a_dead_dcgm_exporter_is_a_failed_pull(cluster: LiveCluster) -> None:
    settings = service_settings(cluster.server.url, preset="gpu_utilization", by=["node"], exclude_namespaces=[])
    query = signal_query(settings.signals[0])
    utilization = await pull(cluster, query, cluster.dcgm_down)
    assert {signal.labels["node"] for signal in utilization} >= {"h100-1", "mig-1"}
    with pytest.raises(SourceDown, match="no sign of life since"):
        await pull(cluster, query, cluster.dcgm_down + pd.Timedelta(minutes=10))


async def pull(cluster: LiveCluster, query, now: pd.Timestamp) -> list[Signal]:
    """One first pull (the last two hours) of ``query`` by the service's source, at ``now``."""
    async with PrometheusSource(PrometheusClientSettings(cluster.server.url, timeout_s=30)) as prometheus:
        source = PrometheusSignalSource(prometheus, query, timedelta(hours=2))
        return await source.pull(now.to_pydatetime())


def pools(signals: list[Signal]) -> dict[str, pd.Series]:
    found = {signal.labels["nodepool"]: signal.series for signal in signals}
    assert all(not math.isnan(series.iloc[-1]) for series in found.values())
    return found


async def test_the_shipped_alerts_fire_when_kube_state_metrics_stops(cluster: LiveCluster, tmp_path: Path) -> None:
    """The service's own /metrics while kube-state-metrics is dead and Prometheus answers, minute by
    minute, fed to ``promtool test rules`` with the shipped PrometheusRule."""
    dead, origin = cluster.ksm_down, cluster.ksm_down - 10 * MINUTE
    scraped: dict[str, list[str]] = {}
    async with running_service(service_settings(cluster.server.url)) as service:
        metrics = SelfMetrics()
        metrics.watch_snapshots(lambda: service.provider.snapshot, service.clock)
        metrics.watch_refreshes(lambda: service.refresher.stats)
        for minute, moment in enumerate(pd.date_range(origin, dead + 30 * MINUTE, freq=MINUTE)):
            await service.at(moment)
            record_scrape(scraped, minute, metrics, origin)
    # Newest data point dead + 5 min: older than the 900 s TTL after dead + 20 min, firing 5 min later.
    # Last success dead + 9 min: over 10 minutes old after dead + 19 min, firing 5 min later.
    stale = [
        {"severity": "warning", "namespace": "gpu-autoscaler", "metric": name}
        for name in ("gpu_demand_forecast", "gpu_headroom")
    ]
    failing = [{"severity": "warning", "namespace": "gpu-autoscaler", "signal": "gpus_requested"}]
    expected = [
        ("GpuAutoscalerForecastStale", 29, []),
        ("GpuAutoscalerForecastStale", 37, stale),
        ("GpuAutoscalerPullsFailing", 27, []),
        ("GpuAutoscalerPullsFailing", 36, failing),
    ]
    assert_alerts(tmp_path, scraped, expected)


def record_scrape(scraped: dict[str, list[str]], minute: int, metrics: SelfMetrics, origin: pd.Timestamp) -> None:
    """Add one scrape of the service's registry, as Prometheus labels it, to ``scraped`` (one value per
    minute per series; "_" where a series was missing). Times are seconds since ``origin``, as
    promtool's clock starts at 0."""
    wanted = ("gpu_autoscaler_series_age_seconds", "gpu_autoscaler_refresh_failures_total")
    for family in metrics.registry.collect():
        for sample in family.samples:
            value = sample.value
            if sample.name == "gpu_autoscaler_last_success_timestamp_seconds":
                value -= origin.timestamp()
            elif sample.name not in wanted:
                continue
            labels = {"namespace": "gpu-autoscaler", "pod": "a", **sample.labels}
            key = sample.name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
            scraped.setdefault(key, ["_"] * minute).append(f"{value:g}")
    for values in scraped.values():
        values.extend(["_"] * (minute + 1 - len(values)))


def assert_alerts(tmp_path: Path, scraped: dict[str, list[str]], expected: list[tuple[str, int, list]]) -> None:
    from tests.manifests.test_manifests import rule_groups

    promtool = shutil.which("promtool")
    assert promtool is not None
    groups = [{**group, "rules": [dict(rule) for rule in group["rules"]]} for group in rule_groups()]
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)  # templates, checked by tests/manifests; not pinned here
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    checks = [
        {"eval_time": f"{at}m", "alertname": name, "exp_alerts": [{"exp_labels": labels} for labels in alerts]}
        for name, at, alerts in expected
    ]
    inputs = [{"series": series, "values": " ".join(values)} for series, values in scraped.items()]
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": inputs, "alert_rule_test": checks}],
    }
    (tmp_path / "ksm_down_test.yaml").write_text(yaml.safe_dump(test))
    result = subprocess.run(
        [promtool, "test", "rules", "ksm_down_test.yaml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


async def test_a_nodepool_with_no_node_yet_is_known_from_the_nodepool_watch(cluster: LiveCluster, fake_kube, kube_api):
    """A pool Karpenter has not launched a node for has no kube_node_labels series and no history:
    the NodePool watch makes it known, so it is 0 (not missing) and its Pending pods have a series."""
    fake_kube.add("nodepools", nodepool("b200"))
    inputs = KubernetesInputs(inputs=KubernetesInputsSettings(), forecast=ForecastSettings(), declared=())
    query = signal_query(service_settings(cluster.server.url).signals[0])
    moment = cluster.last_window_end + pd.Timedelta(minutes=30)
    async with (
        WatchGroup(watch_settings(KubernetesSettings())) as group,
        PrometheusSource(PrometheusClientSettings(cluster.server.url, timeout_s=30)) as prometheus,
    ):
        inputs.start(group, kube_api)
        await eventually(lambda: inputs.nodepools() is not None, message="the NodePools listed", timeout=10)
        without = await PrometheusSignalSource(prometheus, query, timedelta(hours=2)).pull(moment.to_pydatetime())
        watched = PrometheusSignalSource(prometheus, query, timedelta(hours=2), known_pools(inputs))
        with_watch = await watched.pull(moment.to_pydatetime())
    assert "b200" not in pools(without)
    b200 = pools(with_watch)["b200"]
    assert (b200 == 0).all() and len(b200) > 0
    assert pools(with_watch).keys() - {"b200"} == pools(without).keys()
