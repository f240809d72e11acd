"""Kueue's objects (``kueue.x-k8s.io``): the watches, and what one Workload, ResourceFlavor or
ClusterQueue says, read from raw JSON.

A batch Job labelled ``kueue.x-k8s.io/queue-name`` is created suspended; Kueue makes a ``Workload``
for it (``spec.podSets[]``: ``count`` pods of a ``template``) and starts the Job once the Workload
is admitted: ``status.admission`` names the ClusterQueue and, per pod set, the ResourceFlavor of
each resource (``podSetAssignments[].flavors``). Kueue then puts the flavor's ``nodeLabels`` into
the pods' ``nodeSelector`` and adds its ``tolerations``; its ``nodeTaints`` are the taints of its
nodes, which a pod set must tolerate to be given the flavor.

Versions: ``v1beta2`` (stored by Kueue 0.19), else ``v1beta1``, which older releases serve
(they agree on every field read here).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client import ApiClient, CustomObjectsApi

from adapters.gpu_units import GpuUnits
from adapters.kubernetes.gpu_requests import parse_quantity
from adapters.kubernetes.pool_matching import tolerates
from adapters.kubernetes.watch import WatchedResource

log = logging.getLogger(__name__)

GROUP = "kueue.x-k8s.io"
VERSIONS = ("v1beta2", "v1beta1")  # preferred first
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
WORKLOADS, LOCAL_QUEUES, CLUSTER_QUEUES, RESOURCE_FLAVORS, ADMISSION_CHECKS = (
    "workloads",
    "localqueues",
    "clusterqueues",
    "resourceflavors",
    "admissionchecks",
)
PLURALS = (WORKLOADS, LOCAL_QUEUES, CLUSTER_QUEUES, RESOURCE_FLAVORS, ADMISSION_CHECKS)
# Admission check controllers that provision the capacity of the Workloads they check: Kueue's
# ProvisioningRequest controller (a ProvisioningRequest that Cluster Autoscaler acts on). Kueue's
# planned CapacityBuffer check (kubernetes-sigs/kueue#5133) joins by name once it is released.
PROVISIONING_CONTROLLERS = frozenset({"kueue.x-k8s.io/provisioning-request"})


class ServedVersionList:
    """A list (and watch) call of one Kueue resource in every namespace, in the first version of
    ``VERSIONS`` the API serves: each list tries them in order (a 404 moves to the next), and the
    watch that follows uses the version that answered the list."""

    def __init__(self, api: ApiClient, plural: str) -> None:
        self.custom = CustomObjectsApi(api)
        self.plural = plural
        self.version = VERSIONS[0]

    async def __call__(self, **kwargs: Any) -> Any:
        if not kwargs.get("watch"):
            for version in VERSIONS[:-1]:
                # Called with _preload_content=False: the raw response, whatever its status.
                response = await self.custom.list_cluster_custom_object(GROUP, version, self.plural, **kwargs)
                if response.status != 404:
                    self.version = version
                    return response
                response.release()
            self.version = VERSIONS[-1]
        return await self.custom.list_cluster_custom_object(GROUP, self.version, self.plural, **kwargs)


def kueue_resource(api: ApiClient, plural: str) -> WatchedResource:
    """Kueue's ``plural`` in every namespace; the list answers 404 where Kueue is not installed."""
    return WatchedResource(plural, ServedVersionList(api, plural))


def has_condition(obj: Mapping[str, Any], kind: str) -> bool:
    """Whether the object's condition ``kind`` is True."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def namespace_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace", ""))


@dataclass(frozen=True)
class Flavor:
    """A ResourceFlavor: the node labels Kueue gives the pods it admits on it, and its taints."""

    name: str
    node_labels: Mapping[str, str]
    node_taints: tuple[Mapping[str, Any], ...] = ()
    tolerations: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def of(cls, flavor: Mapping[str, Any] | None, name: str) -> Flavor:
        """The flavor as its object says (None: not known, a flavor of no labels)."""
        spec = (flavor or {}).get("spec") or {}
        labels = {str(key): str(value) for key, value in (spec.get("nodeLabels") or {}).items()}
        return cls(name, labels, tuple(spec.get("nodeTaints") or ()), tuple(spec.get("tolerations") or ()))

    def pod_spec(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """The pod spec as Kueue starts it on this flavor: its node labels added to the nodeSelector,
        its tolerations to the pod's."""
        placed = dict(spec)
        if self.node_labels:
            placed["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **self.node_labels}
        if self.tolerations:
            placed["tolerations"] = [*(spec.get("tolerations") or ()), *self.tolerations]
        return placed

    def untolerated(self, spec: Mapping[str, Any]) -> str | None:
        """The first of the flavor's node taints the pods (with the flavor's tolerations) do not tolerate."""
        tolerations = self.pod_spec(spec).get("tolerations") or ()
        for taint in self.node_taints:
            if not any(tolerates(toleration, taint) for toleration in tolerations):
                return f"taint {taint.get('key')}={taint.get('value') or ''}:{taint.get('effect')}"
        return None


def _gpus(resource: str, amount: Any, units: GpuUnits) -> float:
    """Physical GPUs of ``amount`` units of ``resource`` (0 for a resource that is not a GPU)."""
    try:
        share = units.share(resource)
        return parse_quantity(amount) * float(share) if share is not None else 0.0
    except ValueError as exc:  # a MIG name of no known shape, a garbled quantity
        log.warning("Kueue quota of %s not counted: %s", resource, exc)
        return 0.0


def nominal_gpus(cluster_queue: Mapping[str, Any], units: GpuUnits) -> dict[str, float]:
    """Each flavor's nominal GPU quota in physical GPUs, in the order the ClusterQueue tries them
    (resource groups in order, flavors in order); flavors without GPU quota are left out."""
    quota: dict[str, float] = {}
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            gpus = sum(
                _gpus(str(r.get("name")), r.get("nominalQuota", 0), units) for r in flavor.get("resources") or []
            )
            if gpus > 0:
                quota[str(flavor.get("name"))] = quota.get(str(flavor.get("name")), 0.0) + gpus
    return quota


def reserved_gpus(cluster_queue: Mapping[str, Any], units: GpuUnits) -> dict[str, float]:
    """GPUs of each flavor that admitted (quota-reserved) Workloads hold (``status.flavorsReservation``)."""
    reserved: dict[str, float] = {}
    for flavor in (cluster_queue.get("status") or {}).get("flavorsReservation") or []:
        gpus = sum(_gpus(str(r.get("name")), r.get("total", 0), units) for r in flavor.get("resources") or [])
        reserved[str(flavor.get("name"))] = gpus
    return reserved


def gpu_flavor(flavors: Mapping[str, Any], units: GpuUnits) -> str | None:
    """The flavor a pod set was admitted on for its GPUs (``podSetAssignments[].flavors``: resource ->
    flavor); for a pod set of no GPU resource (DRA alone), its first flavor."""
    for resource, flavor in flavors.items():
        try:
            if units.share(str(resource)) is not None:
                return str(flavor)
        except ValueError:
            continue
    return str(next(iter(flavors.values()))) if flavors else None


def owner_uids(obj: Mapping[str, Any]) -> set[str]:
    """The uids of the object's owners."""
    return {str(owner["uid"]) for owner in (obj.get("metadata") or {}).get("ownerReferences") or [] if owner.get("uid")}


# namespace/name of a Job -> the Job as a watch holds it (None: not known)
JobLookup = Callable[[str], Mapping[str, Any] | None]


def pod_links(pod: Mapping[str, Any], jobs: JobLookup | None = None) -> set[str]:
    """What ties a pod to its Workload: its owners' uids (a Job's pods: the Job, which owns the
    Workload too), its own (a plain pod group's Workload is owned by its pods) and, given ``jobs``,
    the owners of its Job (a JobSet owns its Workload and its child Jobs, which own the pods)."""
    metadata = pod.get("metadata") or {}
    links = owner_uids(pod) | ({str(metadata["uid"])} if metadata.get("uid") else set())
    if jobs is None:
        return links
    for owner in metadata.get("ownerReferences") or []:
        if owner.get("kind") == "Job" and (job := jobs(f"{metadata.get('namespace', '')}/{owner.get('name')}")):
            links |= owner_uids(job)
    return links


def cluster_queue_checks(cluster_queue: Mapping[str, Any]) -> set[str]:
    """The AdmissionChecks a ClusterQueue asks of its Workloads: ``spec.admissionChecks`` and
    ``spec.admissionChecksStrategy.admissionChecks[].name`` (whatever flavors the latter names)."""
    spec = cluster_queue.get("spec") or {}
    strategy = (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
    return {str(name) for name in spec.get("admissionChecks") or []} | {str(c.get("name")) for c in strategy}


def provisioning_checks(admission_checks: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """The names of the AdmissionChecks whose controller provisions capacity (``PROVISIONING_CONTROLLERS``)."""
    return {
        name_of(check)
        for check in admission_checks.values()
        if str((check.get("spec") or {}).get("controllerName", "")) in PROVISIONING_CONTROLLERS
    }


def queue_order(workloads: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Pending Workloads in the order a ClusterQueue admits them: higher ``spec.priority`` first, then
    the older (Kueue's BestEffortFIFO and StrictFIFO alike)."""

    def key(workload: Mapping[str, Any]) -> tuple[int, str, str]:
        metadata = workload.get("metadata") or {}
        priority = int((workload.get("spec") or {}).get("priority") or 0)
        return -priority, str(metadata.get("creationTimestamp", "")), name_of(workload)

    return sorted(workloads, key=key)
