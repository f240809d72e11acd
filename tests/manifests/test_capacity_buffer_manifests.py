"""The example CapacityBuffer, its chunk PodTemplate and the writer's RBAC hold together: the buffer
is valid under the upstream CRD (CEL rules included), its template lands on the example NodePool,
and the Roles grant exactly what the writer does (adapters/kubernetes/capacity_buffers.py,
adapters/kubernetes/leases.py)."""

from __future__ import annotations

import copy

import pytest

from tests import kube_schemas
from tests.manifests.test_manifests import one

pytestmark = pytest.mark.kubectl


def test_the_example_buffer_is_checked_against_the_upstream_crd():
    buffer = one("examples", "CapacityBuffer", "gpu-buffer")
    kube_schemas.validate("autoscaling.x-k8s.io", "CapacityBuffer", buffer)
    without_replicas = copy.deepcopy(buffer)
    del without_replicas["spec"]["replicas"]
    with pytest.raises(kube_schemas.Refused, match="If podTemplateRef is set, replicas or limits must also be set"):
        kube_schemas.validate("autoscaling.x-k8s.io", "CapacityBuffer", without_replicas)


def test_the_buffer_chunk_lands_on_the_example_gpu_pool():
    buffer = one("examples", "CapacityBuffer", "gpu-buffer")
    template = one("examples", "PodTemplate", buffer["spec"]["podTemplateRef"]["name"])
    assert template["metadata"]["namespace"] == buffer["metadata"]["namespace"]
    spec = template["template"]["spec"]
    pool = one("examples", "NodePool", spec["nodeSelector"]["karpenter.sh/nodepool"])
    taints = pool["spec"]["template"]["spec"]["taints"]
    assert all(any(t["key"] == taint["key"] and t["effect"] == taint["effect"] for t in spec["tolerations"])
               for taint in taints)  # fmt: skip
    assert spec["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "1"}
    # An extended resource, never a DRA claim: DRA-backed buffers are not provisioned upstream yet
    # (kubernetes-sigs/karpenter#3189; docs/kubernetes.md, "Dynamic Resource Allocation").
    assert "resourceClaims" not in spec and "claims" not in spec["containers"][0]["resources"]
    # The writer names a template it creates <buffer>-chunk: this one is what it would have made.
    assert template["metadata"]["name"] == f"{buffer['metadata']['name']}-chunk"


def rules_of(role: str, namespace: str) -> dict[tuple[str, str], set[str]]:
    found = one("examples", "Role", role)
    assert found["metadata"]["namespace"] == namespace
    return {(group, resource): set(rule["verbs"]) for rule in found["rules"]
            for group in rule["apiGroups"] for resource in rule["resources"]}  # fmt: skip


def test_the_roles_grant_what_the_writer_does_and_no_more():
    buffers = rules_of("gpu-autoscaler-capacity-buffers", "gpu-placeholders")
    assert buffers == {
        ("autoscaling.x-k8s.io", "capacitybuffers"): {"get", "list", "watch", "create", "patch"},
        ("", "podtemplates"): {"get", "create"},
    }
    assert rules_of("gpu-autoscaler-actuator-lease", "gpu-autoscaler") == {
        ("coordination.k8s.io", "leases"): {"get", "create", "update"}
    }
    service_account = one("base", "ServiceAccount", "gpu-autoscaler")
    for binding in ("gpu-autoscaler-capacity-buffers", "gpu-autoscaler-actuator-lease"):
        subjects = one("examples", "RoleBinding", binding)["subjects"]
        assert subjects == [{"kind": "ServiceAccount", "name": service_account["metadata"]["name"],
                             "namespace": service_account["metadata"]["namespace"]}]  # fmt: skip
