"""GPUs asked for through DRA, as a live cluster shows them: ResourceClaims and ResourceClaimTemplates
(``resource.k8s.io/v1``, checked by the fake API against Kubernetes 1.37's schemas) read through
kubernetes-asyncio's watches, added to the pool Karpenter would place their pods in, for Pending pods
and for CronJob windows."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest

from adapters.kubernetes.watch import WatchGroup
from autoscaler.config.settings import ForecastSettings, KubernetesInputsSettings, KubernetesSettings
from autoscaler.refresh.kube_inputs import KubernetesInputs, watch_settings
from tests.adapters.test_cronjobs import make_cronjob
from tests.autoscaler.test_pool_resolution import (
    A100,
    H100,
    NOW,
    PLANS,
    TOLERATE_GPUS,
    WINDOWS,
    affine_to,
    pool_refresher,
    served,
)
from tests.eventually import eventually
from tests.fakekube import FakeKube
from tests.kube_objects import gpu_pod_spec, pending_pod

TWO_GPUS = {
    "name": "gpus",
    "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2},
}


def claim_spec(*requests: dict[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": list(requests)}}


def claiming_spec(claim: dict[str, str], instance_type: str = "p4d.24xlarge") -> dict[str, Any]:
    """A pod spec whose container uses the pod's one claim, placed on ``instance_type`` (pool a100)."""
    container = {"name": "train", "image": "trainer", "resources": {"claims": [{"name": claim["name"]}]}}
    return {
        "containers": [container],
        "resourceClaims": [claim],
        "restartPolicy": "Never",
        "tolerations": TOLERATE_GPUS,
        "affinity": affine_to(instance_type),
    }


@pytest.fixture
async def inputs(fake_kube: FakeKube, kube_api):
    fake_kube.add("nodepools", A100)
    fake_kube.add("nodepools", H100)
    fake_kube.add(
        "resourceclaimtemplates",
        {"metadata": {"name": "two-gpus", "namespace": "ml"}, "spec": {"spec": claim_spec(TWO_GPUS)}},
    )
    kube_inputs = KubernetesInputs(
        inputs=KubernetesInputsSettings(),
        forecast=ForecastSettings(default_lead_time=timedelta(minutes=5)),
        declared=WINDOWS,  # a window open on every pool's series: headroom well above 0
    )
    async with WatchGroup(watch_settings(KubernetesSettings())) as group:
        kube_inputs.start(group, kube_api)
        await eventually(
            lambda: all(cache.synced for cache in group.caches.values()), message="every watch synced", timeout=10
        )
        yield kube_inputs


async def test_a_pending_pod_asking_for_two_gpus_through_a_template_adds_two_to_its_pool(fake_kube, inputs):
    spec = claiming_spec({"name": "gpus", "resourceClaimTemplateName": "two-gpus"})
    fake_kube.add("pods", pending_pod("train-0", spec))
    await eventually(lambda: inputs.pending_gpus("a100") == 2, message="2 Pending GPUs in a100")
    # None of them is in the GPU signal's pool-less series (kube-state-metrics exports no claims), so
    # the refresher takes none of them out of it.
    assert inputs.pending_gpus(None) == 0
    assert inputs.health()["watch resourceclaimtemplates"] == "synced"
    # Once the resourceclaim controller made its claim (3 devices here), the claim is what counts.
    made = {
        "metadata": {"name": "train-0-gpus-x7k9m", "namespace": "ml"},
        "spec": claim_spec({**TWO_GPUS, "exactly": {**TWO_GPUS["exactly"], "count": 3}}),
    }
    fake_kube.add("resourceclaims", made)
    pod = fake_kube.get("pods", "train-0", "ml")
    assert pod is not None
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": "train-0-gpus-x7k9m"}]
    fake_kube.modify("pods", pod)
    await eventually(lambda: inputs.pending_gpus("a100") == 3, message="the generated claim's 3 GPUs")


async def test_a_cronjob_whose_template_claims_two_gpus_gets_a_two_gpu_window_in_its_pool(fake_kube, inputs):
    cronjob = make_cronjob("claiming-train", schedule="30 9 * * *")
    cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"] = claiming_spec(
        {"name": "gpus", "resourceClaimTemplateName": "two-gpus"}, "p5.48xlarge"
    )
    fake_kube.add("cronjobs", cronjob)
    await eventually(
        lambda: any(w.name == "claiming-train" for w in inputs.windows(NOW, timedelta(hours=1))),
        message="the claiming-train window",
    )
    (window,) = [w for w in inputs.windows(NOW, timedelta(hours=1)) if w.name == "claiming-train"]
    assert (window.labels["nodepool"], window.gpus, window.labels["gpu_resource"]) == ("h100", 2.0, "resourceclaims")
    assert inputs.unplaced() == []


async def test_a_claim_two_pods_share_adds_its_gpus_once(fake_kube, inputs):
    fake_kube.add("resourceclaims", {"metadata": {"name": "shared", "namespace": "ml"}, "spec": claim_spec(TWO_GPUS)})
    anywhere = {"containers": [{"name": "read", "image": "reader", "resources": {"claims": [{"name": "gpus"}]}}]}
    anywhere |= {"resourceClaims": [{"name": "gpus", "resourceClaimName": "shared"}], "tolerations": TOLERATE_GPUS}
    for name in ("reader-0", "reader-1"):
        fake_kube.add("pods", pending_pod(name, anywhere))
    # Watch events arrive in order: once the pod made last is seen, both readers were.
    fake_kube.add("pods", pending_pod("last", gpu_pod_spec(1, tolerations=TOLERATE_GPUS)))
    await eventually(lambda: "ml/last" in inputs.pending_placement("h100"), message="the last pod seen")
    assert inputs.pending_gpus("h100") == 2 + 1
    assert inputs.pending_placement("h100").count("ml/reader-") == 1  # the other adds no GPU


async def test_claimed_gpus_join_their_pool_and_are_not_taken_out_of_the_pool_less_series(fake_kube, inputs):
    with ThreadPoolExecutor(max_workers=1) as pool:
        facts = {"pending_gpus": inputs.pending_gpus, "pending_placement": inputs.pending_placement}
        refresher, provider = pool_refresher(pool, PLANS, windows=inputs.windows, **facts)
        await refresher.refresh_once()
        before = served(provider)
        spec = claiming_spec({"name": "gpus", "resourceClaimTemplateName": "two-gpus"})
        fake_kube.add("pods", pending_pod("train-0", spec))
        await eventually(lambda: inputs.pending_gpus("a100") == 2, message="2 Pending GPUs in a100")
        await refresher.refresh_once()
    after = served(provider)
    assert before["a100"][0].value > 2  # so that a change of 2 shows one for one
    assert after["a100"][0].value == pytest.approx(before["a100"][0].value - 2)
    assert "requested now (2 of them Pending pods waiting for NodePool a100)" in after["a100"][0].explanation
    # kube-state-metrics never put them in the pool-less series: nothing is moved out of it.
    assert after[""][0].value == before[""][0].value


async def test_a_claim_that_cannot_be_resolved_is_named_in_the_log_and_the_rest_still_count(fake_kube, inputs, caplog):
    caplog.set_level(logging.WARNING, logger="adapters.kubernetes.pending_pods")
    fake_kube.add("pods", pending_pod("lost", claiming_spec({"name": "gpus", "resourceClaimTemplateName": "gone"})))
    fake_kube.add("pods", pending_pod("fine", claiming_spec({"name": "gpus", "resourceClaimTemplateName": "two-gpus"})))
    await eventually(lambda: inputs.pending_gpus("a100") == 2, message="the resolvable pod's 2 GPUs")
    assert "Pending pod ml/lost: claim gpus: ResourceClaimTemplate ml/gone not found (not counted)" in caplog.text


async def test_a_cluster_without_dra_serves_the_rest(fake_kube: FakeKube, kube_api):
    fake_kube.installed -= {"resourceclaims", "resourceclaimtemplates"}  # before Kubernetes 1.34
    fake_kube.add("pods", pending_pod("whole", gpu_pod_spec(1, node_selector={"karpenter.sh/nodepool": "a100"})))
    kube_inputs = KubernetesInputs(inputs=KubernetesInputsSettings(), forecast=ForecastSettings())
    async with WatchGroup(watch_settings(KubernetesSettings())) as group:
        kube_inputs.start(group, kube_api)
        absent = kube_inputs.health
        await eventually(lambda: absent().get("watch resourceclaims", "").startswith("absent"), message="404: absent")
        assert absent()["watch resourceclaimtemplates"].startswith("absent")
        assert kube_inputs.health()["watch pending pods"] == "synced"
        await eventually(lambda: kube_inputs.pending_gpus(None) == 1, message="the whole GPU of the pod")


async def test_an_all_claim_counts_what_a_node_of_its_pool_publishes(fake_kube, inputs):
    """allocationMode All, unallocated: the GPUs of the DeviceClass a node of the candidate pool
    publishes in its ResourceSlices (the NodeClaim says which node is the pool's)."""
    from tests.adapters.test_dra_claims import GPU_CLASS, resource_slice
    from tests.adapters.test_nodeclaims import nodeclaim

    launched = nodeclaim("a100-abc", 120, pool="a100")
    launched["status"]["nodeName"] = "ip-10-0-1-7"
    fake_kube.add("nodeclaims", launched)
    fake_kube.add("deviceclasses", GPU_CLASS)
    fake_kube.add("resourceslices", resource_slice("ip-10-0-1-7", [(f"gpu-{i}", "gpu") for i in range(8)]))
    every_gpu = {"name": "node-gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}
    fake_kube.add(
        "resourceclaimtemplates",
        {"metadata": {"name": "whole-node", "namespace": "ml"}, "spec": {"spec": claim_spec(every_gpu)}},
    )
    fake_kube.add(
        "pods", pending_pod("node-0", claiming_spec({"name": "gpus", "resourceClaimTemplateName": "whole-node"}))
    )
    await eventually(lambda: inputs.pending_gpus("a100") == 8, message="8 GPUs of a whole a100 node")
    assert inputs.health()["watch resourceslices"] == "synced"
