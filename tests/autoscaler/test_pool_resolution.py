"""Demand as a live cluster shows it: NodePools, Pending pods and CronJobs in the fake API, read through
kubernetes-asyncio, decide which pool's headroom counts which GPUs; what fits no pool is reported."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import generate_latest

from adapters.kubernetes.watch import WatchGroup
from adapters.types import Signal
from autoscaler.app.factory import build_ops_app
from autoscaler.config.settings import ForecastSettings, KubernetesInputsSettings, KubernetesSettings, WindowSettings
from autoscaler.refresh.kube_inputs import KubernetesInputs, watch_settings
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import ForecastPools
from autoscaler.selectors import parse_selector
from autoscaler.serving.provider import MetricInfo, ServedSeries, SnapshotProvider, empty_snapshot
from autoscaler.targets.plans import MetricPlan, RefreshInputs, RefreshSettings
from autoscaler.web.shared.keys import UNPLACED
from autoscaler.web.shared.readiness import Readiness
from autoscaler.web.shared.self_metrics import SelfMetrics
from tests.adapters.test_cronjobs import make_cronjob
from tests.autoscaler.test_refresher import FlakySource
from tests.eventually import eventually
from tests.kube_objects import expression, gpu_pod_spec, nodepool, pending_pod, taint

NOW = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
GPU_TAINT = taint("nvidia.com/gpu")
TOLERATE_GPUS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
A100 = nodepool("a100", requirements=[expression(INSTANCE_TYPE, "In", "p4d.24xlarge")], taints=[GPU_TAINT])
H100 = nodepool("h100", requirements=[expression(INSTANCE_TYPE, "In", "p5.48xlarge")], taints=[GPU_TAINT])
METRICS = (MetricInfo("gpu_demand_forecast", ""), MetricInfo("gpu_headroom", ""))
PLANS = (MetricPlan("gpu_demand_forecast", "gpus", "demand"), MetricPlan("gpu_headroom", "gpus", "headroom"))
# A training window open now on every series, so that each pool's headroom is well above 0 and a
# change of requested-now shows in it one for one.
POOLS = ("a100", "h100", "")
WINDOWS = tuple(
    WindowSettings(
        name=f"train-{pool}", cron="0 * * * *", gpus=200, duration=timedelta(hours=2), labels={"nodepool": pool}
    )
    for pool in POOLS
)


class PoolsSource(FlakySource):
    """The Helios trace as the GPUs requested in pools a100, h100 and in no pool (nodepool="")."""

    async def pull(self, now: datetime) -> list[Signal]:
        (history,) = await super().pull(now)
        return [Signal(history.name, {"nodepool": pool}, history.series, history.step) for pool in POOLS]


def affine_to(instance_type: str) -> dict:
    term = {"matchExpressions": [expression(INSTANCE_TYPE, "In", instance_type)]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


@pytest.fixture
async def inputs(fake_kube, kube_api):
    fake_kube.add("nodepools", A100)
    fake_kube.add("nodepools", H100)
    kube_inputs = KubernetesInputs(
        inputs=KubernetesInputsSettings(placeholder_namespaces=("gpu-placeholders",)),
        forecast=ForecastSettings(default_lead_time=timedelta(minutes=5)),
        declared=WINDOWS,
    )
    async with WatchGroup(watch_settings(KubernetesSettings())) as group:
        kube_inputs.start(group, kube_api)
        await eventually(
            lambda: all(cache.synced for cache in group.caches.values()), message="every watch synced", timeout=10
        )
        yield kube_inputs


def pool_refresher(
    pool: ThreadPoolExecutor, plans: tuple[MetricPlan, ...], **facts
) -> tuple[Refresher, SnapshotProvider]:
    """A refresher over the three pool series, at NOW, reading the cluster's ``facts`` (RefreshInputs fields)."""
    provider = SnapshotProvider(empty_snapshot(METRICS), clock=lambda: NOW)
    refresh = RefreshSettings(interval=timedelta(minutes=1), lead_time=timedelta(minutes=5))
    refresher = Refresher(
        provider=provider,
        inputs=RefreshInputs(METRICS, plans, [PoolsSource()], refresh, **facts),
        pools=ForecastPools([pool]),
        clock=lambda: NOW,
    )
    return refresher, provider


def served(provider: SnapshotProvider) -> dict[str, tuple[ServedSeries, ServedSeries]]:
    """(gpu_headroom, gpu_demand_forecast) of each pool."""

    def one(metric: str, pool: str) -> ServedSeries:
        (series,) = provider.get_metric("default", metric, parse_selector(f"nodepool={pool}"))
        return series

    return {pool: (one("gpu_headroom", pool), one("gpu_demand_forecast", pool)) for pool in POOLS}


async def test_pending_pods_count_in_the_requested_now_of_the_pool_karpenter_would_place_them_in(fake_kube, inputs):
    with ThreadPoolExecutor(max_workers=2) as pool:
        refresher, provider = pool_refresher(pool, PLANS, windows=inputs.windows, pending_gpus=inputs.pending_gpus)
        await refresher.refresh_once()
        before = served(provider)
        # Two pods of 4 GPUs choose A100 instances by affinity and tolerate the pool's taint.
        for name in ("train-0", "train-1"):
            spec = gpu_pod_spec(4, tolerations=TOLERATE_GPUS)
            fake_kube.add("pods", pending_pod(name, {**spec, "affinity": affine_to("p4d.24xlarge")}))
        # Never demand: a placeholder, and a pod already bound to a node (its pool's series has it).
        placeholder = gpu_pod_spec(1, node_selector={"karpenter.sh/nodepool": "a100"}, tolerations=TOLERATE_GPUS)
        fake_kube.add("pods", pending_pod("hold-0", placeholder, namespace="gpu-placeholders"))
        bound = {**gpu_pod_spec(2, tolerations=TOLERATE_GPUS), "nodeName": "n1", "affinity": affine_to("p4d.24xlarge")}
        fake_kube.add("pods", pending_pod("pulling", bound))
        await eventually(lambda: inputs.pending_gpus(None) == 8, message="8 Pending GPUs without a pool")
        await refresher.refresh_once()
    after = served(provider)
    for pool_name in POOLS:
        assert after[pool_name][1].value == before[pool_name][1].value  # the same demand forecast
        assert before[pool_name][0].value > 8  # so that a change of 8 shows one for one
    assert after["a100"][0].value == pytest.approx(before["a100"][0].value - 8)
    assert "requested now (8 of them Pending pods waiting for NodePool a100)" in after["a100"][0].explanation
    assert after["h100"][0].value == before["h100"][0].value
    # The pool-less series counts Pending pods too (they have no node): those now in a100 leave it.
    assert after[""][0].value == pytest.approx(before[""][0].value + 8)
    assert "less 8 of Pending pods counted in their NodePools" in after[""][0].explanation
    assert inputs.pending_gpus("") == 0


async def test_a_cronjob_choosing_its_pool_by_instance_type_gets_a_window_on_that_pool(fake_kube, inputs):
    cronjob = make_cronjob("h100-train", schedule="30 9 * * *", job_spec={"parallelism": 2})
    pod_spec = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    pod_spec.update(affinity=affine_to("p5.48xlarge"), tolerations=TOLERATE_GPUS)
    fake_kube.add("cronjobs", cronjob)
    await eventually(
        lambda: any(w.name == "h100-train" for w in inputs.windows(NOW, timedelta(hours=1))),
        message="the h100-train window",
    )
    (window,) = [w for w in inputs.windows(NOW, timedelta(hours=1)) if w.name == "h100-train"]
    assert (window.labels["nodepool"], window.gpus, window.placement) == ("h100", 2.0, "")
    assert inputs.unplaced() == []


async def test_demand_that_fits_no_pool_is_reported_in_readyz_metrics_and_the_page(fake_kube, inputs):
    # Neither asks for a pool it tolerates: the GPU pools are tainted.
    fake_kube.add("pods", pending_pod("stray", gpu_pod_spec(3, node_selector={"karpenter.sh/nodepool": "a100"})))
    cronjob = make_cronjob("stray-train", job_spec={"parallelism": 4})
    cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["affinity"] = affine_to("p5.48xlarge")
    fake_kube.add("cronjobs", cronjob)
    await eventually(lambda: len(inputs.unplaced()) == 2, message="two unplaced demands")

    line = inputs.health()["unplaced gpu demand"]
    assert line.startswith("warning: 7 GPUs fit no NodePool: ")
    assert "pending_pod ml/stray (3 GPUs): fits no NodePool (a100: taint nvidia.com/gpu=:NoSchedule" in line
    assert "cronjob ml/stray-train (4 GPUs): fits no NodePool (" in line
    readiness = Readiness(ready=True, reason="forecasts served", checks=inputs.health())
    assert "[-]unplaced gpu demand: warning: 7 GPUs fit no NodePool" in readiness.verbose()
    assert inputs.pending_gpus("") == 3  # it stays in the pool-less series, where Prometheus has it

    metrics = SelfMetrics()
    metrics.watch_unplaced(inputs.unplaced)
    exposition = generate_latest(metrics.registry).decode()
    assert 'gpu_autoscaler_unplaced_gpus{kind="pending_pod"} 3.0' in exposition
    assert 'gpu_autoscaler_unplaced_gpus{kind="cronjob"} 4.0' in exposition

    app = build_ops_app(provider=SnapshotProvider(empty_snapshot(METRICS)), readiness=readiness, self_metrics=metrics)
    app[UNPLACED] = inputs.unplaced
    async with TestClient(TestServer(app)) as client:
        for path in ("/", "/ui/gpu_headroom"):
            html = await (await client.get(path)).text()
            assert "7 GPUs of demand fit no NodePool, so no pool's headroom provisions for them" in html
            assert "pending_pod ml/stray (3 GPUs)" in html


async def test_without_unplaced_demand_the_metric_is_zero_and_nothing_is_said(inputs):
    metrics = SelfMetrics()
    metrics.watch_unplaced(inputs.unplaced)
    exposition = generate_latest(metrics.registry).decode()
    assert 'gpu_autoscaler_unplaced_gpus{kind="pending_pod"} 0.0' in exposition
    assert "unplaced gpu demand" not in inputs.health()
    assert inputs.health()["watch nodepools"] == "synced"
    assert inputs.health()["watch pending pods"] == "synced"


async def test_a_pending_pod_several_pools_fit_counts_in_karpenters_first_and_the_choice_is_explained(
    fake_kube, inputs
):
    # No affinity and a toleration of the GPU taint: both pools fit; equal weights go by name, descending.
    fake_kube.add("pods", pending_pod("anywhere", gpu_pod_spec(2, tolerations=TOLERATE_GPUS)))
    await eventually(lambda: inputs.pending_gpus("h100") == 2, message="2 Pending GPUs in h100")
    choice = "ml/anywhere: NodePools h100 (weight 0), a100 (weight 0) fit; Karpenter tries h100 first"
    assert (inputs.pending_placement("h100"), inputs.pending_placement("a100")) == (choice, "")
    with ThreadPoolExecutor(max_workers=1) as pool:
        headroom_only = (MetricPlan("gpu_headroom", "gpus", "headroom"),)
        facts = {"pending_gpus": inputs.pending_gpus, "pending_placement": inputs.pending_placement}
        refresher, provider = pool_refresher(pool, headroom_only, **facts)
        await refresher.refresh_once()
    (headroom,) = provider.get_metric("default", "gpu_headroom", parse_selector("nodepool=h100"))
    assert f"requested now (2 of them Pending pods waiting for NodePool h100; {choice})" in headroom.explanation
