"""GPU demand waiting in Kueue's queues, as a live cluster shows it: Workloads, LocalQueues, ClusterQueues
and ResourceFlavors in the fake API (each checked against Kueue's vendored CRDs), read through
kubernetes-asyncio's watches, served in the demand and headroom of the pool their flavor names, and
counted once: by the Workload until its pods exist, by the pods after."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from adapters.kubernetes.watch import WatchGroup
from autoscaler.app.factory import build_ops_app
from autoscaler.config.settings import ForecastSettings, KubernetesInputsSettings, KubernetesSettings, Settings
from autoscaler.refresh.kube_inputs import KubernetesInputs, watch_settings
from autoscaler.refresh.pipeline import open_pipeline
from autoscaler.refresh.queued_record import QueuedWorkloadRecord
from autoscaler.serving.provider import SnapshotProvider
from autoscaler.web.ops import queued_views
from autoscaler.web.shared.readiness import Readiness
from autoscaler.web.shared.self_metrics import SelfMetrics
from tests.autoscaler.test_pool_resolution import A100, H100, NOW, PLANS, TOLERATE_GPUS, WINDOWS, pool_refresher, served
from tests.eventually import eventually
from tests.fakekube import FakeKube
from tests.kube_objects import gpu_pod_spec, pending_pod
from tests.kueue_objects import (
    admission_check,
    admitted,
    cluster_queue,
    condition,
    finished,
    local_queue,
    resource_flavor,
    workload,
)

JOB_UID = "0b5d7c3e-8f7a-4d7e-9a51-5f0c3b2e1a77"
JOBSET_UID = "5a1f2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
A100_FLAVOR = resource_flavor("a100", {"karpenter.sh/nodepool": "a100"}, tolerations=TOLERATE_GPUS)
TRAIN = workload("train", gpu_pod_spec(8), 2, job_uid=JOB_UID)  # 2 pods x 8 GPUs, in LocalQueue ml/team-a


def job_pod(name: str) -> dict[str, Any]:
    """A pod of the Job behind TRAIN, as Kueue starts it on flavor a100 (its node labels and tolerations)."""
    spec = gpu_pod_spec(8, node_selector={"karpenter.sh/nodepool": "a100"}, tolerations=TOLERATE_GPUS)
    pod = pending_pod(name, spec)
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": JOB_UID, "controller": True}
    ]
    return pod


async def watching(fake_kube: FakeKube, kube_api: Any) -> tuple[KubernetesInputs, WatchGroup]:
    inputs = KubernetesInputs(
        inputs=KubernetesInputsSettings(),
        forecast=ForecastSettings(default_lead_time=timedelta(minutes=5)),
        declared=WINDOWS,  # a window open on every pool's series: headroom well above 0
    )
    group = WatchGroup(watch_settings(KubernetesSettings()))
    inputs.start(group, kube_api)
    await eventually(lambda: all(c.synced or c.absent for c in group.caches.values()), message="watches synced")
    return inputs, group


@pytest.fixture
async def inputs(fake_kube: FakeKube, kube_api):
    for pool in (A100, H100):
        fake_kube.add("nodepools", pool)
    fake_kube.add("resourceflavors", A100_FLAVOR)
    fake_kube.add("clusterqueues", cluster_queue("gpu", [("a100", 32)]))
    fake_kube.add("localqueues", local_queue("team-a", "gpu"))
    kube_inputs, group = await watching(fake_kube, kube_api)
    async with group:
        yield kube_inputs


def queued_gpus(inputs: KubernetesInputs, pool: str) -> float:
    return sum(window.gpus for window in inputs.queued(NOW) if window.labels.get("nodepool") == pool)


async def test_a_workload_counts_in_its_pool_until_its_pods_exist_and_leaves_when_it_finishes(fake_kube, inputs):
    with ThreadPoolExecutor(max_workers=1) as pool:
        facts = {"pending_gpus": inputs.pending_gpus, "pending_placement": inputs.pending_placement}
        refresher, provider = pool_refresher(pool, PLANS, windows=inputs.windows, queued=inputs.queued, **facts)
        await refresher.refresh_once()
        before = served(provider)["a100"]
        assert before[0].value > 16  # headroom: so that a change of 16 shows one for one

        async def refreshed() -> tuple[float, float, str]:
            await refresher.refresh_once()
            headroom, demand = served(provider)["a100"]
            return headroom.value - before[0].value, demand.value - before[1].value, headroom.explanation

        # Pending, next in line and within the queue's 32 GPUs of quota: 16 GPUs due in a100.
        fake_kube.add("workloads", TRAIN)
        await eventually(lambda: queued_gpus(inputs, "a100") == 16, message="the Workload's 16 GPUs in a100")
        headroom, demand, explanation = await refreshed()
        assert (headroom, demand) == (pytest.approx(16), pytest.approx(16))
        assert "plus queued ml/train (16 GPUs; Kueue Workload pending in ClusterQueue gpu, flavor a100)" in explanation

        # Admitted (the queue's status now holds its 16 GPUs), the Job not started yet: still 16.
        fake_kube.modify("clusterqueues", cluster_queue("gpu", [("a100", 32)], reserved={"a100": 16}))
        fake_kube.modify("workloads", admitted(fake_kube.get("workloads", "train", "ml"), "gpu", "a100"))
        await eventually(lambda: "admitted" in inputs.queued(NOW)[0].placement, message="the Workload admitted")
        headroom, demand, explanation = await refreshed()
        assert (headroom, demand) == (pytest.approx(16), pytest.approx(16))
        assert "Kueue Workload admitted in ClusterQueue gpu, flavor a100" in explanation

        # Its pods exist and wait for a node: they count as Pending pods (requested now), the Workload no more.
        for name in ("train-0", "train-1"):
            fake_kube.add("pods", job_pod(name))
        await eventually(lambda: inputs.pending_gpus("a100") == 16, message="16 Pending GPUs in a100")
        assert inputs.queued(NOW) == []
        headroom, demand, explanation = await refreshed()
        assert (headroom, demand) == (pytest.approx(-16), pytest.approx(0))
        assert "queued" not in explanation
        assert "requested now (16 of them Pending pods waiting for NodePool a100)" in explanation

        # Running (they leave the Pending watch): the admitted Workload does not come back.
        for name in ("train-0", "train-1"):
            running = fake_kube.get("pods", name, "ml")
            assert running is not None
            fake_kube.modify(
                "pods", {**running, "spec": {**running["spec"], "nodeName": "n1"}, "status": {"phase": "Running"}}
            )
        await eventually(lambda: inputs.pending_gpus("a100") == 0, message="the pods running")
        assert inputs.queued(NOW) == []

        # Finished: it stays out.
        fake_kube.modify("workloads", finished(fake_kube.get("workloads", "train", "ml")))
        await eventually(lambda: fake_kube.get("workloads", "train", "ml") is not None, message="stored")
        headroom, demand, _ = await refreshed()
    assert (headroom, demand) == (pytest.approx(0), pytest.approx(0))
    assert inputs.queued(NOW) == []


async def test_a_pending_workload_that_finishes_leaves_demand_and_headroom(fake_kube, inputs):
    with ThreadPoolExecutor(max_workers=1) as pool:
        refresher, provider = pool_refresher(pool, PLANS, windows=inputs.windows, queued=inputs.queued)
        await refresher.refresh_once()
        before = served(provider)["a100"]
        fake_kube.add("workloads", TRAIN)
        await eventually(lambda: queued_gpus(inputs, "a100") == 16, message="the Workload's 16 GPUs in a100")
        await refresher.refresh_once()
        counted = served(provider)["a100"]
        fake_kube.modify("workloads", finished(fake_kube.get("workloads", "train", "ml")))
        await eventually(lambda: inputs.queued(NOW) == [], message="the finished Workload gone")
        await refresher.refresh_once()
    after = served(provider)["a100"]
    assert [c.value - b.value for c, b in zip(counted, before, strict=True)] == [pytest.approx(16)] * 2
    assert [a.value for a in after] == [pytest.approx(b.value) for b in before]
    assert "queued" not in after[0].explanation


async def test_an_admitted_workload_kueue_calls_pods_ready_is_not_counted(fake_kube, inputs):
    """Its pods run, though the service never saw them Pending (it started after they did)."""
    running = admitted(workload("running", gpu_pod_spec(8), 2, job_uid=JOB_UID), "gpu", "a100")
    running["status"]["conditions"].append(condition("PodsReady"))
    fake_kube.add("workloads", running)
    fake_kube.add("workloads", TRAIN)  # seen after it: once TRAIN counts, the other was seen too
    await eventually(lambda: queued_gpus(inputs, "a100") > 0, message="a Workload counted")
    assert [(w.name, w.gpus) for w in inputs.queued(NOW)] == [("train", 16)]


async def test_pods_that_run_before_the_next_look_still_take_their_workload_out(fake_kube, inputs):
    fake_kube.add("workloads", admitted(TRAIN, "gpu", "a100"))
    await eventually(lambda: queued_gpus(inputs, "a100") == 16, message="the admitted Workload counted")
    for name in ("train-0", "train-1"):
        pod = fake_kube.add("pods", job_pod(name))
        fake_kube.modify("pods", {**pod, "spec": {**pod["spec"], "nodeName": "n1"}, "status": {"phase": "Running"}})
    # Watch events arrive in order: once this pod is seen, the Job's pods came and went.
    fake_kube.add("pods", pending_pod("sentinel", gpu_pod_spec(1, tolerations=TOLERATE_GPUS)))
    await eventually(lambda: inputs.pending_gpus(None) == 1, message="the sentinel pod seen")
    assert inputs.queued(NOW) == []


async def test_a_jobsets_workload_leaves_the_count_when_its_child_jobs_pods_appear(fake_kube, inputs):
    """A JobSet owns its Workload and its child Jobs; the pods are the Jobs': found through the Job watch."""
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "trainset", "uid": JOBSET_UID,
              "controller": True}  # fmt: skip
    found = workload("trainset", gpu_pod_spec(8), 2)
    fake_kube.add("workloads", admitted({**found, "metadata": {**found["metadata"], "ownerReferences": [jobset]}},
                                        "gpu", "a100"))  # fmt: skip
    await eventually(lambda: queued_gpus(inputs, "a100") == 16, message="the JobSet's Workload counted")
    child = fake_kube.add("jobs", {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "trainset-workers-0", "namespace": "ml", "ownerReferences": [jobset]},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "train", "image": "t"}]}}},
    })  # fmt: skip
    await eventually(lambda: inputs.job("ml/trainset-workers-0") is not None, message="the child Job seen")
    for name in ("trainset-workers-0-0", "trainset-workers-0-1"):
        pod = job_pod(name)
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "trainset-workers-0",
                 "uid": child["metadata"]["uid"], "controller": True}  # fmt: skip
        fake_kube.add("pods", {**pod, "metadata": {**pod["metadata"], "ownerReferences": [owner]}})
    await eventually(lambda: inputs.pending_gpus("a100") == 16, message="its pods Pending")
    assert inputs.queued(NOW) == [] and inputs.kueue_waiting() == {}


async def test_a_workload_whose_flavor_fits_no_pool_is_reported_unplaced(fake_kube, inputs):
    fake_kube.add("resourceflavors", resource_flavor("v100", {"karpenter.sh/nodepool": "v100"}))
    fake_kube.add("clusterqueues", cluster_queue("old", [("v100", 16)]))
    fake_kube.add("localqueues", local_queue("legacy", "old"))
    fake_kube.add("workloads", workload("stale", gpu_pod_spec(8), 1, queue="legacy"))
    await eventually(lambda: len(inputs.unplaced()) == 1, message="one unplaced demand")
    (item,) = inputs.unplaced()
    assert str(item).startswith("workload ml/stale (8 GPUs): fits no NodePool (")
    assert [w.labels for w in inputs.queued(NOW)] == [{}]  # served in the pool-less series


async def test_a_workload_kueue_provisions_through_an_admission_check_is_not_counted_twice(fake_kube, inputs):
    """Behind a ProvisioningRequest check, the autoscaler is already asked for the Workload's nodes: served
    as headroom too, they would be launched twice. A check of another controller provisions nothing."""
    fake_kube.add("admissionchecks", admission_check("provision", "kueue.x-k8s.io/provisioning-request"))
    fake_kube.add("admissionchecks", admission_check("policy", "example.com/budget-approval"))
    fake_kube.modify("clusterqueues", cluster_queue("gpu", [("a100", 32)], checks=["policy"]))
    fake_kube.add("workloads", TRAIN)
    await eventually(lambda: queued_gpus(inputs, "a100") == 16, message="counted behind a check of another kind")
    fake_kube.modify("clusterqueues", cluster_queue("gpu", [("a100", 32)], checks=["policy", "provision"]))
    await eventually(lambda: queued_gpus(inputs, "a100") == 0, message="not counted behind a ProvisioningRequest")
    # Admitted on the queue's quota, still behind the check: the ProvisioningRequest stands for its nodes.
    fake_kube.modify("clusterqueues", cluster_queue("gpu", [("a100", 32)], reserved={"a100": 16}, checks=["provision"]))
    fake_kube.modify("workloads", admitted(fake_kube.get("workloads", "train", "ml"), "gpu", "a100"))
    assert inputs.kueue is not None
    watched = inputs.kueue.caches["workloads"].objects
    await eventually(lambda: bool(watched["ml/train"].get("status", {}).get("admission")), message="seen admitted")
    assert inputs.queued(NOW) == []
    # The check removed from the queue (not from the cluster): counted again.
    fake_kube.modify("clusterqueues", cluster_queue("gpu", [("a100", 32)], reserved={"a100": 16}))
    await eventually(lambda: queued_gpus(inputs, "a100") == 16, message="counted once no check provisions it")


async def test_only_v1beta1_served_the_workloads_are_read_through_it(fake_kube: FakeKube, kube_api):
    for plural in ("workloads", "localqueues", "clusterqueues", "resourceflavors", "admissionchecks"):
        fake_kube.served_versions[plural] = ("v1beta1",)  # an older Kueue
    for pool in (A100, H100):
        fake_kube.add("nodepools", pool)
    fake_kube.add("resourceflavors", A100_FLAVOR)
    fake_kube.add("clusterqueues", cluster_queue("gpu", [("a100", 32)]))
    fake_kube.add("localqueues", local_queue("team-a", "gpu"))
    fake_kube.add("workloads", TRAIN)
    inputs, group = await watching(fake_kube, kube_api)
    async with group:
        await eventually(lambda: queued_gpus(inputs, "a100") == 16, message="16 GPUs read through v1beta1")
        assert inputs.health()["watch workloads"] == "synced"
    paths = {request.path for request in fake_kube.requests_for("workloads")}
    assert "/apis/kueue.x-k8s.io/v1beta1/workloads" in paths


async def test_without_kueue_nothing_is_queued_and_the_watches_say_absent(fake_kube: FakeKube, kube_api):
    fake_kube.installed -= {"workloads", "localqueues", "clusterqueues", "resourceflavors", "admissionchecks"}
    inputs, group = await watching(fake_kube, kube_api)
    async with group:
        assert inputs.queued(NOW) == []
        assert inputs.health()["watch workloads"].startswith("absent")
        assert inputs.health()["watch pending pods"] == "synced"


async def waiting_answers(
    provider: SnapshotProvider, record: QueuedWorkloadRecord, now: datetime
) -> tuple[Any, float, str]:
    """The a100 headroom series' ``kueue_waiting_gpus`` on the inspection API, the a100 gauge on /metrics,
    and the series' page."""
    self_metrics = SelfMetrics()
    app = build_ops_app(provider=provider, readiness=Readiness(ready=True, reason="test"),
                        self_metrics=self_metrics, clock=lambda: now)  # fmt: skip
    queued_views.attach(record, app, self_metrics)
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/api/v1/forecasts/gpu_headroom", params={"labelSelector": "nodepool=a100"})
        assert response.status == 200
        (series,) = await response.json()
        metrics = await (await client.get("/metrics")).text()
        page = await client.get("/ui/gpu_headroom", params={"labelSelector": "nodepool=a100"})
        assert page.status == 200
        html = await page.text()
    (gauge,) = [f for f in text_string_to_metric_families(metrics) if f.name == "gpu_autoscaler_kueue_waiting_gpus"]
    return series["kueue_waiting_gpus"], {s.labels["nodepool"]: s.value for s in gauge.samples}["a100"], html


def waiting_box(now: float, most: float) -> str:
    return (
        '<div class="queued"><h3>Waiting in Kueue\'s queues</h3><div class="facts"><div class="fact">'
        f'<span class="name">GPUs waiting now</span><span class="number">{now:g}</span></div><div class="fact">'
        f'<span class="name">Most in the span shown</span><span class="number">{most:g}</span></div></div>'
    )


async def test_workloads_waiting_are_a_signal_of_their_own_until_their_pods_exist(fake_kube, inputs):
    """Pending, then admitted without pods: 16 GPUs waiting in a100, recorded at the next refresh; 0 once
    its pods exist and once it finishes. Never in the history the forecasts learn from."""
    record = QueuedWorkloadRecord(inputs.kueue_waiting, timedelta(hours=1))
    minute = iter(range(100))
    with ThreadPoolExecutor(max_workers=1) as pool:
        refresher, provider = pool_refresher(pool, PLANS, queued=inputs.queued, record_queued=record.record)
        refresher.clock = lambda: NOW + timedelta(minutes=next(minute))
        await refresher.refresh_once()  # minute 0: nothing waits
        history = served(provider)["a100"][1].provenance.history  # type: ignore[union-attr]
        fake_kube.add("workloads", TRAIN)
        await eventually(lambda: inputs.kueue_waiting() == {"a100": 16}, message="the Workload seen pending")
        await refresher.refresh_once()  # minute 1
        fake_kube.modify("clusterqueues", cluster_queue("gpu", [("a100", 32)], reserved={"a100": 16}))
        fake_kube.modify("workloads", admitted(fake_kube.get("workloads", "train", "ml"), "gpu", "a100"))
        await eventually(lambda: "admitted" in inputs.queued(NOW)[0].placement, message="the Workload admitted")
        await refresher.refresh_once()  # minute 2
        for name in ("train-0", "train-1"):
            fake_kube.add("pods", job_pod(name))
        await eventually(lambda: inputs.pending_gpus("a100") == 16, message="its pods Pending")
        await refresher.refresh_once()  # minute 3
        fake_kube.modify("workloads", finished(fake_kube.get("workloads", "train", "ml")))
        await eventually(lambda: inputs.kueue.caches["workloads"].objects["ml/train"]["status"]["conditions"][-1]  # type: ignore[union-attr]
                         ["type"] == "Finished", message="seen finished")  # fmt: skip
        await refresher.refresh_once()  # minute 4
        after = served(provider)["a100"][1].provenance.history  # type: ignore[union-attr]
    stamps = [f"2026-11-20T09:0{m}:00Z" for m in range(5)]
    queued, gauge, html = await waiting_answers(provider, record, NOW + timedelta(minutes=4))
    assert (queued, gauge) == ({"timestamps": stamps, "values": [0.0, 16.0, 16.0, 0.0, 0.0]}, 0.0)
    assert waiting_box(0, 16) in html and "Kueue waiting" in html  # the box, and the chart's line
    assert after.equals(history)  # the demand history holds none of it


async def test_a_workload_beyond_its_quota_waits_in_the_signal_though_no_window_serves_it(fake_kube, inputs):
    """Uncensored: 24 GPUs that the queue's 32 cannot hold beside 16 admitted are demand waiting all the
    same, though only what fits is served ahead (as a window); those behind a provisioning check too."""
    record = QueuedWorkloadRecord(inputs.kueue_waiting, timedelta(hours=1))
    fake_kube.modify("clusterqueues", cluster_queue("gpu", [("a100", 32)], reserved={"a100": 16}))
    fake_kube.add("workloads", admitted(TRAIN, "gpu", "a100"))
    fake_kube.add("workloads", workload("big", gpu_pod_spec(8), 3))
    await eventually(lambda: inputs.kueue_waiting() == {"a100": 40}, message="both Workloads waiting")
    assert [(w.name, w.gpus) for w in inputs.queued(NOW)] == [("train", 16)]
    fake_kube.add("admissionchecks", admission_check("provision", "kueue.x-k8s.io/provisioning-request"))
    fake_kube.modify("clusterqueues", cluster_queue("gpu", [("a100", 32)], reserved={"a100": 16}, checks=["provision"]))
    await eventually(lambda: inputs.queued(NOW) == [], message="none served behind a ProvisioningRequest")
    assert inputs.kueue_waiting() == {"a100": 40}
    with ThreadPoolExecutor(max_workers=1) as pool:
        refresher, provider = pool_refresher(pool, PLANS, queued=inputs.queued, record_queued=record.record)
        await refresher.refresh_once()
    queued, gauge, html = await waiting_answers(provider, record, NOW)
    assert (queued, gauge) == ({"timestamps": ["2026-11-20T09:00:00Z"], "values": [40.0]}, 40.0)
    assert waiting_box(40, 40) in html


@pytest.mark.parametrize("kueue_on", [True, False])
async def test_the_pipeline_serves_what_kueue_queues_unless_it_is_off(
    fake_kube: FakeKube, kube_api, tmp_path, kueue_on
):
    fake_kube.add("resourceflavors", A100_FLAVOR)
    fake_kube.add("clusterqueues", cluster_queue("gpu", [("a100", 32)]))
    fake_kube.add("localqueues", local_queue("team-a", "gpu"))
    fake_kube.add("workloads", TRAIN)
    settings = Settings.model_validate(
        {"server": {"bind_address": "127.0.0.1"}, "auth": {"mode": "none"}, "state_dir": str(tmp_path),
         "inputs": {"kueue": kueue_on}, "prometheus": {"url": "http://127.0.0.1:9", "timeout": "1s", "retries": 0}}
    )  # fmt: skip
    async with open_pipeline(settings, kube_api) as pipeline:
        # Without the Workload watch, the scorecard reads Kueue's own wait histograms from Prometheus.
        assert pipeline.scorecard is not None and (pipeline.scorecard.kueue_histograms is None) == kueue_on
        if kueue_on:
            await eventually(lambda: [w.gpus for w in pipeline.queued(NOW)] == [16], message="the Workload served")
            assert pipeline.queued_workloads is not None and pipeline.record_queued == pipeline.queued_workloads.record
        else:
            assert pipeline.health is not None
            await eventually(lambda: pipeline.health()["watch pending pods"] == "synced", message="watches synced")
            assert pipeline.queued(NOW) == [] and "watch workloads" not in pipeline.health()
            assert pipeline.queued_workloads is None
