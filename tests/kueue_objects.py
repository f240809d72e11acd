"""Kueue objects (``kueue.x-k8s.io/v1beta2``) as Kueue leaves them, for the fake API, which checks each
against Kueue's vendored CRDs (``tests/data/schemas/kueue.x-k8s.io_*.yaml``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

API_VERSION = "kueue.x-k8s.io/v1beta2"
GPU = "nvidia.com/gpu"


def condition(
    kind: str, status: str = "True", reason: str = "Test", at: str = "2026-11-20T08:00:00Z"
) -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": "", "lastTransitionTime": at}


def resource_flavor(
    name: str,
    node_labels: Mapping[str, str],
    *,
    node_taints: Sequence[Mapping[str, str]] = (),
    tolerations: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": dict(node_labels)}
    if node_taints:
        spec["nodeTaints"] = list(node_taints)
    if tolerations:
        spec["tolerations"] = list(tolerations)
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cluster_queue(
    name: str,
    quotas: Sequence[tuple[str, int]],
    reserved: Mapping[str, int] | None = None,
    checks: Sequence[str] = (),
) -> dict[str, Any]:
    """A ClusterQueue with a nominal GPU quota per flavor (in this order), the GPUs admitted Workloads
    hold of each (``status.flavorsReservation``), and the AdmissionChecks it asks (v1beta2 names them in
    ``admissionChecksStrategy``)."""
    flavors = [{"name": flavor, "resources": [{"name": GPU, "nominalQuota": gpus}]} for flavor, gpus in quotas]
    queue: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": [GPU], "flavors": flavors}]},
    }
    if checks:
        queue["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": check} for check in checks]}
    if reserved:
        queue["status"] = {
            "flavorsReservation": [
                {"name": flavor, "resources": [{"name": GPU, "total": str(gpus), "borrowed": "0"}]}
                for flavor, gpus in reserved.items()
            ]
        }
    return queue


def admission_check(name: str, controller: str) -> dict[str, Any]:
    """An AdmissionCheck run by ``controller`` (``kueue.x-k8s.io/provisioning-request``: Kueue's
    ProvisioningRequest check)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "spec": {"controllerName": controller},
    }


def local_queue(name: str, cluster: str, namespace: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster},
    }


def workload(
    name: str,
    pod_spec: Mapping[str, Any],
    count: int,
    *,
    queue: str = "team-a",
    namespace: str = "ml",
    job_uid: str = "",
    priority: int | None = None,
    created: str = "2026-11-20T08:00:00Z",
) -> dict[str, Any]:
    """The pending Workload Kueue makes for a Job of ``count`` pods of ``pod_spec`` (owned by that Job)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "creationTimestamp": created}
    if job_uid:
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job_uid, "controller": True}
        metadata["ownerReferences"] = [owner]
    spec: dict[str, Any] = {
        "queueName": queue,
        "podSets": [{"name": "main", "count": count, "template": {"spec": dict(pod_spec)}}],
    }
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": API_VERSION, "kind": "Workload", "metadata": metadata, "spec": spec}


def admitted(
    found: Mapping[str, Any],
    cluster: str,
    flavor: str,
    *,
    reserved_at: str = "2026-11-20T08:00:00Z",
    admitted_at: str | None = "2026-11-20T08:00:00Z",
    checks: Sequence[str] = (),
) -> dict[str, Any]:
    """The Workload once Kueue reserved quota for it on ``flavor`` at ``reserved_at`` and admitted it at
    ``admitted_at`` (None: not yet, its admission ``checks`` pending; they are Ready once it is)."""
    pod_set = found["spec"]["podSets"][0]
    assignment = {"name": pod_set["name"], "flavors": {GPU: flavor}, "count": pod_set["count"]}
    conditions = [condition("QuotaReserved", at=reserved_at)]
    if admitted_at is not None:
        conditions.append(condition("Admitted", at=admitted_at))
    else:
        conditions.append(condition("Admitted", "False", "UnsatisfiedChecks", at=reserved_at))
    status: dict[str, Any] = {
        "admission": {"clusterQueue": cluster, "podSetAssignments": [assignment]},
        "conditions": conditions,
    }
    if checks:
        state, at = ("Ready", admitted_at) if admitted_at is not None else ("Pending", reserved_at)
        status["admissionChecks"] = [
            {"name": check, "state": state, "lastTransitionTime": at, "message": ""} for check in checks
        ]
    return {**found, "status": status}


def finished(found: Mapping[str, Any]) -> dict[str, Any]:
    status = dict(found.get("status") or {})
    status["conditions"] = [*status.get("conditions", []), condition("Finished", reason="Succeeded")]
    return {**found, "status": status}
