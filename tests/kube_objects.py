"""Valid Karpenter and core objects for tests (the fake API validates what it stores against the
upstream schemas, so fixtures must be objects a real cluster would accept)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

NODE_CLASS_REF = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
READY = {
    "type": "Ready",
    "status": "True",
    "reason": "Ready",
    "message": "",
    "lastTransitionTime": "2026-01-01T00:00:00Z",
}


def expression(key: str, operator: str, *values: str) -> dict[str, Any]:
    found: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        found["values"] = list(values)
    return found


def taint(key: str, effect: str = "NoSchedule", value: str | None = None) -> dict[str, str]:
    found = {"key": key, "effect": effect}
    if value is not None:
        found["value"] = value
    return found


def nodepool(
    name: str,
    *,
    requirements: Sequence[Mapping[str, Any]] = (),
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    startup_taints: Sequence[Mapping[str, str]] = (),
    weight: int | None = None,
    limits: Mapping[str, str] | None = None,
    ready: bool = True,
    gpus_in_use: str | None = None,
) -> dict[str, Any]:
    """A karpenter.sh/v1 NodePool as Karpenter's status controller leaves it (Ready unless told)."""
    template_spec: dict[str, Any] = {"nodeClassRef": dict(NODE_CLASS_REF), "requirements": list(requirements)}
    if taints:
        template_spec["taints"] = list(taints)
    if startup_taints:
        template_spec["startupTaints"] = list(startup_taints)
    template: dict[str, Any] = {"spec": template_spec}
    if labels:
        template["metadata"] = {"labels": dict(labels)}
    spec: dict[str, Any] = {"template": template}
    if weight is not None:
        spec["weight"] = weight
    if limits is not None:
        spec["limits"] = dict(limits)
    status: dict[str, Any] = {"conditions": [READY if ready else {**READY, "status": "False", "reason": "NotReady"}]}
    if gpus_in_use is not None:
        status["resources"] = {"nvidia.com/gpu": gpus_in_use}
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": spec,
        "status": status,
    }


def nodeclaim_spec(pool: str | None = None) -> dict[str, Any]:
    """The spec Karpenter writes on a NodeClaim it launches (the CRD requires both fields)."""
    requirements = [expression("karpenter.sh/nodepool", "In", pool)] if pool else []
    return {"nodeClassRef": dict(NODE_CLASS_REF), "requirements": requirements}


def gpu_pod_spec(
    gpus: int = 1,
    *,
    node_selector: Mapping[str, str] | None = None,
    terms: Sequence[Sequence[Mapping[str, Any]]] = (),
    preferred: Sequence[tuple[int, Sequence[Mapping[str, Any]]]] = (),
    tolerations: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A pod spec asking for ``gpus`` whole GPUs, placed by selector, affinity terms and tolerations."""
    spec: dict[str, Any] = {
        "containers": [{"name": "train", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        "restartPolicy": "Never",
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    affinity: dict[str, Any] = {}
    if terms:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchExpressions": list(term)} for term in terms]
        }
    if preferred:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": weight, "preference": {"matchExpressions": list(term)}} for weight, term in preferred
        ]
    if affinity:
        spec["affinity"] = {"nodeAffinity": affinity}
    if tolerations:
        spec["tolerations"] = list(tolerations)
    return spec


def pending_pod(
    name: str, spec: Mapping[str, Any], *, namespace: str = "ml", labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A pod the scheduler has not bound yet (no spec.nodeName), as the API serves it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": dict(spec),
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }
