"""GPUs of DRA claims (``adapters.dra_claims``), request by request as the scheduler's allocator reads
them. Every claim, template and pod here is first checked against Kubernetes 1.37's
``resource.k8s.io/v1`` and ``v1`` schemas (kubernetes-validate, strict), so the shapes are the API's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.dra_claims import ClaimLookup, claim_spec_gpus, pod_claims
from adapters.gpu_units import GpuUnits
from adapters.pending_pods import pending_gpus
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


def test_all_counts_the_devices_allocated_and_nothing_before():
    request = [{"name": "node-gpus", "exactly": exactly(allocationMode="All")}]
    assert gpus(claim("all", request)) == (
        0,
        ("request node-gpus: allocationMode All: its devices are known once the claim is allocated",),
    )
    status = allocated(*[("node-gpus", f"gpu-{i}") for i in range(8)])
    assert gpus(claim("all", request, status=status)) == (8, ())


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
