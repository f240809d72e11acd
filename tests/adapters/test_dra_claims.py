"""GPUs of DRA claims (``adapters.kubernetes.dra_claims``), request by request as the scheduler's allocator reads
them. Every claim, template and pod here is first checked against Kubernetes 1.37's
``resource.k8s.io/v1`` and ``v1`` schemas (kubernetes-validate, strict), so the shapes are the API's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.gpu_units import GpuUnits
from adapters.kubernetes.dra_claims import ClaimLookup, claim_spec_gpus, pod_claims
from adapters.kubernetes.dra_devices import DeviceInventory
from adapters.kubernetes.pending_pods import pending_gpus
from tests import kube_schemas

LOOKUP = ClaimLookup()
NVIDIA = "gpu.nvidia.com"


def exactly(device_class: str = NVIDIA, **fields: Any) -> dict[str, Any]:
    return {"deviceClassName": device_class, **fields}


def claim(name: str, requests: list[dict[str, Any]], *, namespace: str = "ml", **extra: Any) -> dict[str, Any]:
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, **extra.pop("metadata", {})},
        "spec": {"devices": {"requests": requests}},
        **extra,
    }
    kube_schemas.validate("resource.k8s.io", "ResourceClaim", obj)
    return obj


def template(name: str, requests: list[dict[str, Any]], *, namespace: str = "ml") -> dict[str, Any]:
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": requests}}},
    }
    kube_schemas.validate("resource.k8s.io", "ResourceClaimTemplate", obj)
    return obj


def allocated(*results: tuple[str, str]) -> dict[str, Any]:
    """``status.allocation`` with one result per (request, device)."""
    found = [{"request": request, "driver": NVIDIA, "pool": "node-1", "device": device} for request, device in results]
    return {"allocation": {"devices": {"results": found}}}


def gpus(obj: dict[str, Any]) -> tuple[float, tuple[str, ...]]:
    counted = claim_spec_gpus(obj["spec"], obj.get("status"), LOOKUP.device_classes)
    return counted.gpus, counted.problems


def test_exact_count_takes_count_devices_one_by_default():
    assert gpus(claim("two", [{"name": "gpus", "exactly": exactly(allocationMode="ExactCount", count=2)}])) == (2, ())
    assert gpus(claim("one", [{"name": "gpu", "exactly": exactly()}])) == (1, ())


def test_mig_devices_count_by_the_profile_their_selector_names():
    # As NVIDIA's quickstart gpu-test4 asks for them (kubernetes-sigs/dra-driver-nvidia-gpu).
    def mig(profile: str, name: str) -> dict[str, Any]:
        selector = {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"}}
        return {"name": name, "exactly": exactly("mig.nvidia.com", selectors=[selector])}

    counted, problems = gpus(claim("mig", [mig("1g.10gb", "a"), mig("3g.40gb", "b"), mig("2g.12gb", "c")]))
    assert (counted, problems) == (pytest.approx(1 / 7 + 3 / 7 + 2 / 4), ())
    counted, problems = gpus(claim("any-mig", [{"name": "m", "exactly": exactly("mig.nvidia.com")}]))
    assert counted == 0
    assert problems == ("request m: unreadable: device class mig.nvidia.com counts by MIG profile, and the "
                        "request's selectors name 0",)  # fmt: skip


def test_all_counts_the_devices_allocated_or_waits_for_the_pool():
    request = [{"name": "node-gpus", "exactly": exactly(allocationMode="All")}]
    unallocated = claim_spec_gpus(claim("all", request)["spec"], None, LOOKUP.device_classes)
    assert (unallocated.gpus, unallocated.problems) == (0, ())
    (pending,) = unallocated.all_requests  # resolved on a node of the pool the pod lands in
    assert (pending.name, pending.device_class, pending.per_device) == ("node-gpus", NVIDIA, 1)
    status = allocated(*[("node-gpus", f"gpu-{i}") for i in range(8)])
    assert gpus(claim("all", request, status=status)) == (8, ())


# --- allocationMode All on a node of the candidate pool (adapters.kubernetes.dra_devices) ----------------------

# NVIDIA's DeviceClasses as its Helm chart renders them (tests/data/nvidia-dra/README.md: the chart's
# deviceclass-gpu.yaml and deviceclass-mig.yaml templates, resource.k8s.io/v1).
CHART_SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == '{type}'"
GPU_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [{"cel": {"expression": CHART_SELECTOR.format(type="gpu")}}],
        "extendedResourceName": "nvidia.com/gpu",
    },
}
MIG_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "mig.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression": CHART_SELECTOR.format(type="mig")}}]},
}


def resource_slice(node: str, devices: list[tuple[str, str]], generation: int = 1) -> dict[str, Any]:
    """A slice as NVIDIA's kubelet plugin publishes one: pool and node named after the node."""
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com-{generation}"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {"name": name, "attributes": {"type": {"string": kind}, "productName": {"string": "NVIDIA A100"}}}
                for name, kind in devices
            ],
        },
    }
    kube_schemas.validate("resource.k8s.io", "ResourceSlice", obj)
    return obj


def nodeclaim(name: str, pool: str, node: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"karpenter.sh/nodepool": pool}}, "status": {"nodeName": node}}


def inventory(*slices: dict[str, Any]) -> DeviceInventory:
    for device_class in (GPU_CLASS, MIG_CLASS):
        kube_schemas.validate("resource.k8s.io", "DeviceClass", device_class)
    return DeviceInventory(
        {s["metadata"]["name"]: s for s in slices},
        {"gpu.nvidia.com": GPU_CLASS, "mig.nvidia.com": MIG_CLASS},
        {
            "a": nodeclaim("a", "a100", "node-1"),
            "b": nodeclaim("b", "a100", "node-2"),
            "c": nodeclaim("c", "h100", "node-3"),
        },
    )


def test_all_takes_what_the_fullest_node_of_the_pool_publishes_of_the_class():
    gpus8 = [(f"gpu-{i}", "gpu") for i in range(8)]
    devices = inventory(
        resource_slice("node-1", gpus8),
        resource_slice("node-2", [("gpu-0", "gpu"), ("gpu-1-mig-0", "mig"), ("gpu-1-mig-1", "mig")]),
        resource_slice("node-3", [("gpu-0", "gpu")] * 1),
    )
    assert devices.all_devices("gpu.nvidia.com", (), "a100") == 8
    assert devices.all_devices("mig.nvidia.com", (), "a100") == 2
    assert devices.all_devices("gpu.nvidia.com", (), "h100") == 1
    # The request's own selector narrows further (an unqualified slice attribute is the driver's).
    narrow = ({"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100'"}},)
    assert devices.all_devices("gpu.nvidia.com", narrow, "a100") == 0
    with pytest.raises(ValueError, match="no node of NodePool l4 publishes a ResourceSlice"):
        devices.all_devices("gpu.nvidia.com", (), "l4")
    with pytest.raises(ValueError, match=r"DeviceClass fpga\.example\.com not found"):
        devices.all_devices("fpga.example.com", (), "a100")
    odd = ({"cel": {"expression": "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"}},)
    with pytest.raises(ValueError, match=r"only '&&' of device\.driver and device\.attributes equalities is read"):
        devices.all_devices("gpu.nvidia.com", odd, "a100")


def test_only_the_newest_generation_of_a_pool_counts():
    old = resource_slice("node-1", [(f"gpu-{i}", "gpu") for i in range(8)], generation=1)
    new = resource_slice("node-1", [(f"gpu-{i}", "gpu") for i in range(4)], generation=2)
    assert inventory(old, new).all_devices("gpu.nvidia.com", (), "a100") == 4


def test_a_pending_pods_all_claim_counts_on_its_pool():
    devices = inventory(resource_slice("node-1", [(f"gpu-{i}", "gpu") for i in range(8)]))
    request = [{"name": "node-gpus", "exactly": exactly(allocationMode="All")}]
    lookup = ClaimLookup(templates={"ml/all": template("all", request)}, devices=devices)
    spec = {
        **pod_spec([{"name": "gpus", "resourceClaimTemplateName": "all"}]),
        "nodeSelector": {"karpenter.sh/nodepool": "a100"},
    }
    (found,) = pending_gpus([pod(spec, {})], None, lambda p: False, GpuUnits(), lookup)
    assert (found.gpus, found.claimed, found.choice.pool) == (8, 8, "a100")
    # Without ResourceSlices watched the pod's All request is named and counts nothing.
    without = ClaimLookup(templates=lookup.templates)
    assert pending_gpus([pod(spec, {})], None, lambda p: False, GpuUnits(), without) == []


def test_first_available_counts_the_preferred_alternative_until_one_is_allocated():
    request = {
        "name": "gpu",
        "firstAvailable": [
            {"name": "big", "deviceClassName": NVIDIA, "allocationMode": "ExactCount", "count": 4},
            {"name": "small", "deviceClassName": NVIDIA, "count": 2},
        ],
    }
    assert gpus(claim("either", [request])) == (4, ())
    fell_back = allocated(("gpu/small", "gpu-0"), ("gpu/small", "gpu-1"))
    assert gpus(claim("either", [request], status=fell_back)) == (2, ())


def test_admin_access_takes_no_device_and_unknown_classes_are_named():
    admin = {"name": "monitor", "exactly": exactly(adminAccess=True, allocationMode="All")}
    nic = {"name": "nic", "exactly": exactly("rdma.example.com")}
    assert gpus(claim("mixed", [admin, nic, {"name": "gpu", "exactly": exactly()}])) == (
        1,
        ("request nic: device class rdma.example.com is not in the DeviceClass map",),
    )


def test_a_claim_the_api_would_refuse_is_refused_by_the_fakes_schema():
    with pytest.raises(kube_schemas.Refused, match="count"):
        claim("bad", [{"name": "gpus", "exactly": exactly(count="two")}])
    with pytest.raises(kube_schemas.Refused, match="deviceClass"):  # a misspelt field: 400 unknown field
        claim("bad", [{"name": "gpus", "exactly": {"deviceClass": NVIDIA}}])


def pod_spec(claims: list[dict[str, Any]]) -> dict[str, Any]:
    container = {"name": "main", "image": "trainer", "resources": {"claims": [{"name": c["name"]} for c in claims]}}
    return {"containers": [container], "resourceClaims": claims, "restartPolicy": "Never"}


def pod(spec: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}, "spec": spec}
    obj["status"] = {"phase": "Pending", **status}
    kube_schemas.validate("", "Pod", obj)
    return obj


def test_a_template_claim_resolves_through_the_pods_status_and_falls_back_to_the_template():
    two = [{"name": "gpus", "exactly": exactly(count=2)}]
    lookup = ClaimLookup(
        claims={"ml/p-gpus-x7k9m": claim("p-gpus-x7k9m", [{"name": "gpus", "exactly": exactly(count=3)}])},
        templates={"ml/two-gpus": template("two-gpus", two)},
    )
    spec = pod_spec([{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}])
    generated = {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "p-gpus-x7k9m"}]}
    assert pod_claims(spec, pod(spec, generated)["status"], "ml", lookup).own == 3  # the claim, once made
    assert pod_claims(spec, pod(spec, {})["status"], "ml", lookup).own == 2  # not made yet: its template
    not_needed = {"resourceClaimStatuses": [{"name": "gpus"}]}
    assert pod_claims(spec, pod(spec, not_needed)["status"], "ml", lookup).own == 0


def test_missing_objects_and_the_extended_resource_claim():
    spec = pod_spec([{"name": "a", "resourceClaimName": "gone"}, {"name": "b", "resourceClaimTemplateName": "gone"}])
    resolved = pod_claims(spec, pod(spec, {})["status"], "ml", LOOKUP)
    assert (resolved.own, dict(resolved.shared)) == (0, {})
    assert resolved.problems == (
        "claim a: ResourceClaim ml/gone not found",
        "claim b: ResourceClaimTemplate ml/gone not found",
    )


# --- NVIDIA's demo specs (tests/data/nvidia-dra, vendored unchanged) ------------------------------------

UPSTREAM = Path(__file__).resolve().parents[1] / "data" / "nvidia-dra"
KINDS = {"Pod": "", "ResourceClaim": "resource.k8s.io", "ResourceClaimTemplate": "resource.k8s.io"}


def upstream(name: str) -> list[dict[str, Any]]:
    """The file's objects, each checked against the API's schema (a Deployment's pod template as a Pod)."""
    docs = [doc for doc in yaml.safe_load_all((UPSTREAM / name).read_text()) if doc]
    for doc in docs:
        if doc["kind"] in KINDS:
            kube_schemas.validate(KINDS[doc["kind"]], doc["kind"], doc)
        elif doc["kind"] == "Deployment":
            as_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t"}, "spec": template_spec(doc)}
            kube_schemas.validate("", "Pod", as_pod)
    return docs


def template_spec(deployment: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def lookup_of(docs: list[dict[str, Any]], **extra: dict[str, Any]) -> ClaimLookup:
    def keyed(kind: str) -> dict[str, dict[str, Any]]:
        return {f"{d['metadata']['namespace']}/{d['metadata']['name']}": d for d in docs if d["kind"] == kind}

    return ClaimLookup(claims={**keyed("ResourceClaim"), **extra}, templates=keyed("ResourceClaimTemplate"))


def pending_total(docs: list[dict[str, Any]], lookup: ClaimLookup, status: dict[str, Any] | None = None) -> float:
    pods = [{**d, "status": {"phase": "Pending", **(status or {})}} for d in docs if d["kind"] == "Pod"]
    for pod_object in pods:
        kube_schemas.validate("", "Pod", pod_object)  # the status too
    return sum(p.gpus for p in pending_gpus(pods, None, lambda pod: False, GpuUnits(), lookup))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("gpu-test1.yaml", 2),  # two pods, a template claim each
        ("gpu-test2.yaml", 1),  # two containers share one pod's claim
        ("gpu-test3.yaml", 1),  # two pods share one ResourceClaim: its GPU counts once
    ],
)
def test_nvidias_quickstart_pods_count_as_their_claims_ask(name, expected):
    docs = upstream(name)
    assert pending_total(docs, lookup_of(docs)) == expected


def test_a_deployments_mig_template_counts_its_slices_per_pod():
    docs = upstream("gpu-test4.yaml")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    per_pod = pod_claims(template_spec(deployment), {}, "gpu-test4", lookup_of(docs))
    assert per_pod.own == pytest.approx(1 / 7 + 1 / 7 + 2 / 7 + 3 / 7)  # one whole GPU's slices
    assert per_pod.problems == ()


def test_the_extended_resources_claim_is_not_counted_a_second_time():
    docs = upstream("gpu-full.yaml")
    # The claim the scheduler makes, and the pod's status, as the file's comments show them.
    generated = claim(
        "gpu-full-pod-extended-resources-x7k9m",
        [{"name": "container-0-request-0", "exactly": exactly(allocationMode="ExactCount", count=1)}],
        namespace="extended-resource-gpu-full",
        metadata={"annotations": {"resource.kubernetes.io/extended-resource-claim": "true"}},
        status=allocated(("container-0-request-0", "gpu-0")),
    )
    status = {
        "extendedResourceClaimStatus": {
            "resourceClaimName": generated["metadata"]["name"],
            "requestMappings": [
                {
                    "containerName": "cuda-container",
                    "requestName": "container-0-request-0",
                    "resourceName": "nvidia.com/gpu",
                }
            ],
        }
    }
    lookup = lookup_of(docs, **{f"extended-resource-gpu-full/{generated['metadata']['name']}": generated})
    assert pending_total(docs, lookup, status) == 1  # the container's nvidia.com/gpu, once


def test_a_cronjobs_all_claims_count_per_pod_on_its_pool():
    from datetime import UTC, datetime, timedelta

    from adapters.kubernetes.cronjobs import CronWindowSettings, windows_for_cronjob

    devices = inventory(resource_slice("node-1", [(f"gpu-{i}", "gpu") for i in range(8)]))
    request = [{"name": "node-gpus", "exactly": exactly(allocationMode="All")}]
    lookup = ClaimLookup(templates={"ml/all": template("all", request)}, devices=devices)
    spec = pod_spec([{"name": "gpus", "resourceClaimTemplateName": "all"}])
    spec["nodeSelector"] = {"karpenter.sh/nodepool": "a100"}
    job = {"parallelism": 2, "template": {"spec": spec}}
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "whole-nodes", "namespace": "ml"},
        "spec": {"schedule": "0 2 * * *", "jobTemplate": {"spec": job}},
    }
    kube_schemas.validate("batch", "CronJob", cron)
    now = datetime(2026, 11, 20, 1, 0, tzinfo=UTC)
    (window,) = windows_for_cronjob(cron, [], now, CronWindowSettings(horizon=timedelta(hours=2)), None, lookup)
    assert (window.gpus, window.labels["nodepool"], window.labels["gpu_resource"]) == (16, "a100", "resourceclaims")
