"""CronJobs and NodeClaims in a fake Kubernetes API, read through kubernetes-asyncio, change what the
service serves: windows raise gpu_headroom one lead time ahead; learned lead times replace defaults."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from adapters.kubernetes.watch import WatchGroup
from autoscaler.config.settings import ForecastSettings, KubernetesInputsSettings, KubernetesSettings
from autoscaler.policy import LeadTime
from autoscaler.refresh.kube_inputs import KubernetesInputs, watch_settings
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import ForecastPools
from autoscaler.selectors import parse_selector
from autoscaler.serving.provider import MetricInfo, SnapshotProvider, empty_snapshot
from autoscaler.targets.plans import MetricPlan, RefreshInputs, RefreshSettings
from tests.adapters.test_cronjobs import make_cronjob
from tests.adapters.test_nodeclaims import nodeclaim
from tests.autoscaler.test_refresher import FlakySource
from tests.eventually import eventually
from tests.kube_objects import nodepool

METRICS = (MetricInfo("gpu_demand_forecast", ""), MetricInfo("gpu_headroom", ""))
PLANS = (MetricPlan("gpu_demand_forecast", "gpus", "demand"), MetricPlan("gpu_headroom", "gpus", "headroom"))


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class PoolSource(FlakySource):
    """The Helios trace as the requested GPUs of node pool "a100"."""

    def __init__(self) -> None:
        super().__init__()
        self.replay.labels = {"nodepool": "a100"}


@pytest.fixture
async def inputs(fake_kube, kube_api):
    settings = KubernetesInputs(
        inputs=KubernetesInputsSettings(),
        forecast=ForecastSettings(default_lead_time=timedelta(minutes=5), lead_time_margin=timedelta(seconds=30)),
    )
    async with WatchGroup(watch_settings(KubernetesSettings())) as group:
        settings.start(group, kube_api)
        yield settings, group


async def wait_synced(group: WatchGroup) -> None:
    def synced() -> bool:
        waiting = {name: cache.last_error for name, cache in group.caches.items() if not (cache.synced or cache.absent)}
        assert not waiting, f"not synced yet (last errors): {waiting}"
        return True

    await eventually(synced, message="every watch to sync or find its resource absent")


def build_refresher(
    inputs: KubernetesInputs, now: datetime, pool: ThreadPoolExecutor
) -> tuple[Refresher, SnapshotProvider]:
    provider = SnapshotProvider(empty_snapshot(METRICS), clock=lambda: now)
    refresher = Refresher(
        provider=provider,
        inputs=RefreshInputs(
            metrics=METRICS,
            plans=PLANS,
            sources=[PoolSource()],
            refresh=RefreshSettings(interval=timedelta(minutes=1), lead_time=timedelta(minutes=5)),
            windows=inputs.windows,
            lead_time=inputs.lead_time,
        ),
        pools=ForecastPools([pool]),
        clock=lambda: now,
    )
    return refresher, provider


async def test_cronjob_window_raises_headroom_one_lead_time_ahead(fake_kube, inputs):
    kube_inputs, group = inputs
    # 16 GPUs (4 pods x 4) at 02:00 Europe/Berlin on node pool a100.
    cronjob = make_cronjob(
        "nightly",
        schedule="0 2 * * *",
        timezone="Europe/Berlin",
        containers=[{"name": "t", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
        job_spec={"parallelism": 4},
        node_selector={"karpenter.sh/nodepool": "a100"},
    )
    fake_kube.add("cronjobs", cronjob)
    fake_kube.add("nodepools", nodepool("a100"))  # the pool the selector names must exist
    await wait_synced(group)
    for _ in range(200):
        if [pool["metadata"]["name"] for pool in kube_inputs.nodepools() or []] == ["a100"]:
            break
        await asyncio.sleep(0.02)
    fire = datetime(2026, 11, 20, 1, 0, tzinfo=UTC)  # 02:00 CET
    with ThreadPoolExecutor(max_workers=2) as pool:
        values = {}
        for label, now in (
            ("long before", fire - timedelta(hours=2)),
            ("within lead time", fire - timedelta(minutes=4)),
        ):
            refresher, provider = build_refresher(kube_inputs, now, pool)
            await refresher.refresh_once()
            (headroom,) = provider.get_metric("default", "gpu_headroom", parse_selector("nodepool=a100"))
            (demand,) = provider.get_metric("default", "gpu_demand_forecast", parse_selector("nodepool=a100"))
            values[label] = (headroom, demand)
    before, within = values["long before"], values["within lead time"]
    assert "ml/nightly (16 GPUs)" not in before[1].explanation
    assert "plus scheduled windows ml/nightly (16 GPUs)" in within[1].explanation
    # The window's 16 GPUs sit on top of the statistical forecast, so headroom covers them.
    assert within[0].value >= 16
    assert within[1].value - 16 >= 0


async def test_suspended_cronjob_adds_nothing(fake_kube, inputs):
    kube_inputs, group = inputs
    fake_kube.add(
        "cronjobs",
        make_cronjob("off", schedule="*/5 * * * *", suspend=True, node_selector={"karpenter.sh/nodepool": "a100"}),
    )
    await wait_synced(group)
    now = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    assert kube_inputs.windows(now, timedelta(hours=1)) == []


async def test_lead_time_learned_from_nodeclaims(fake_kube, inputs):
    kube_inputs, group = inputs
    created = datetime(2026, 11, 19, tzinfo=UTC)
    for index, seconds in enumerate([200, 210, 220, 230, 240, 250, 260, 270, 280, 400]):
        fake_kube.add(
            "nodeclaims", nodeclaim(f"gpu-{index}", seconds, pool="a100", created=created + timedelta(hours=index))
        )
    await wait_synced(group)

    def learned_from_all_ten() -> LeadTime:
        lead = kube_inputs.lead_time({"nodepool": "a100"})
        assert lead.source == "p90 of 10 NodeClaim launches of pool a100 plus margin", lead
        return lead

    lead = await eventually(learned_from_all_ten, message="the a100 lead time learned from all ten NodeClaims")
    # p90 of the ten launch times (linear interpolation) plus the 30 s margin
    assert 280 + 30 <= lead.value.total_seconds() <= 400 + 30
    other = kube_inputs.lead_time({"nodepool": "h100"})
    assert (other.value, other.source) == (
        timedelta(minutes=5),
        "configured default (no NodeClaim has become ready yet)",
    )


async def test_without_karpenter_the_default_lead_time_is_used_and_said(fake_kube, inputs):
    kube_inputs, group = inputs
    fake_kube.installed.discard("nodeclaims")
    await group.aclose()
    api = await fake_kube.api_client()
    async with api, WatchGroup(watch_settings(KubernetesSettings())) as fresh:
        kube_inputs.start(fresh, api)
        await wait_synced(fresh)
        lead = kube_inputs.lead_time({"nodepool": "a100"})
    assert lead.source == "configured default (Karpenter absent)"
    assert lead.value == timedelta(minutes=5)


async def test_headroom_capped_by_quota_and_nodepool_limit(fake_kube, kube_api, inputs):
    kube_inputs, group = inputs
    now = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
    requested_now = float(PoolSource().replay.history(now, timedelta(hours=1)).series.iloc[-1])
    fake_kube.add(
        "resourcequotas",
        {
            "metadata": {"name": "gpu", "namespace": "gpu-placeholders"},
            "spec": {"hard": {"requests.nvidia.com/gpu": "3"}},
            "status": {"hard": {"requests.nvidia.com/gpu": "3"}, "used": {"requests.nvidia.com/gpu": "1"}},
        },
    )
    fake_kube.add("nodepools", nodepool("a100", limits={"nvidia.com/gpu": str(int(requested_now) + 2)}))
    poller = asyncio.create_task(kube_inputs.poll_limits(kube_api, ["gpu-placeholders"], timedelta(seconds=30)))
    try:
        await eventually(
            lambda: len(kube_inputs.caps("gpu-placeholders", {"nodepool": "a100"}, 0.0)) == 2,
            message="the placeholder quota and the a100 NodePool limit to be read",
        )
        big_window = make_cronjob(
            "big",
            schedule="5 9 * * *",
            containers=[{"name": "t", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
            job_spec={"parallelism": 8},
            node_selector={"karpenter.sh/nodepool": "a100"},
        )
        fake_kube.add("cronjobs", big_window)
        await wait_synced(group)
        await eventually(
            lambda: [w for w in kube_inputs.windows(now, timedelta(hours=1)) if w.name == "big"],
            message="the window of CronJob big, from the watch",
        )
        plans = (
            MetricPlan("gpu_headroom", "gpus", "headroom", placeholder_namespace="gpu-placeholders"),
            MetricPlan("gpu_demand_forecast", "gpus", "demand"),
        )
        with ThreadPoolExecutor(max_workers=1) as pool:
            provider = SnapshotProvider(empty_snapshot(METRICS), clock=lambda: now)
            refresher = Refresher(
                provider=provider,
                inputs=RefreshInputs(
                    metrics=METRICS,
                    plans=plans,
                    sources=[PoolSource()],
                    refresh=RefreshSettings(interval=timedelta(minutes=1), lead_time=timedelta(minutes=10)),
                    windows=kube_inputs.windows,
                    lead_time=kube_inputs.lead_time,
                    caps=lambda plan, labels, requested: kube_inputs.caps(
                        plan.placeholder_namespace, labels, requested
                    ),
                ),
                pools=ForecastPools([pool]),
                clock=lambda: now,
            )
            await refresher.refresh_once()
    finally:
        poller.cancel()
    (headroom,) = provider.get_metric("default", "gpu_headroom", parse_selector("nodepool=a100"))
    (demand,) = provider.get_metric("default", "gpu_demand_forecast", parse_selector("nodepool=a100"))
    # 64 GPUs of the window open within the lead time; the pool may grow by 2 and the quota holds 3.
    assert demand.value >= 64
    assert headroom.value == 2
    assert f"capped at 2 by NodePool a100 limit {int(requested_now) + 2} GPUs minus" in headroom.explanation
    assert kube_inputs.caps("gpu-placeholders", {}, 0.0)[0].reason == (
        "ResourceQuota gpu-placeholders/gpu (requests.nvidia.com/gpu hard 3)"
    )
