"""GPU demand waiting in Kueue's queues, before any pod of it exists, and the NodePool it lands in.

Counted (docs/kueue.md):

- a Workload Kueue admitted (``status.admission``, condition ``QuotaReserved``) while none of its pods
  exists: it is about to start them. Its pod sets land on the flavors ``podSetAssignments`` name;
- a pending Workload that is next in line and fits its ClusterQueue's quota now: the ClusterQueue's
  pending Workloads (through their LocalQueue, ``spec.queueName``) in queue order (``kueue.queue_order``),
  each given the first flavor of the queue (in the queue's order) with GPU quota whose node taints
  its pods tolerate and whose unused nominal GPU quota (nominal less ``status.flavorsReservation``,
  less what the Workloads before it in this count took) holds its GPUs; one that fits no flavor
  waits for quota (the cluster's policy), and is not counted, while those after it still may be.

Not counted: a Workload that finished (``Finished``) or is deactivated (``spec.active: false``), one
whose pods exist (``pods_started``): they are Pending pods or running, counted as such; and one whose
capacity Kueue has provisioned by an admission check (its ClusterQueue, or its own
``status.admissionChecks``, names an AdmissionCheck of a ``kueue.PROVISIONING_CONTROLLERS``
controller): a ProvisioningRequest already asks the autoscaler for its nodes, and counting it as
headroom too would launch them twice.

Uncensored (``queued_gpus(..., uncensored=True)``), the demand waiting whatever the quota: every
pending Workload of an existing queue and every admitted one whose pods do not exist yet, those
behind a provisioning check included; a series of its own, never served (docs/kueue.md).

A pod set's GPUs are ``count`` pods of its template (``adapters.kubernetes.pod_templates``); its pool
is the one Karpenter would launch them in (``adapters.kubernetes.pool_matching``) once Kueue has put
the flavor's node labels and tolerations into the template. Pure functions over raw JSON.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from adapters.gpu_units import GpuUnits
from adapters.kubernetes import kueue
from adapters.kubernetes.dra_claims import ClaimLookup
from adapters.kubernetes.kueue import Flavor
from adapters.kubernetes.pod_templates import GpuTemplate, template_gpus
from adapters.kubernetes.pool_matching import NodePool, PoolChoice

log = logging.getLogger(__name__)

Objects = Mapping[str, Mapping[str, Any]]  # a watch's objects: namespace/name (or name) -> object


@dataclass(frozen=True)
class QueuedGpus:
    """The GPUs of one pod set of a Workload that has no pod yet, and the pool they land in."""

    namespace: str
    name: str  # the Workload's
    state: str  # "admitted", "quota reserved" (admission checks pending) or "pending" (next in line)
    cluster_queue: str
    pod_set: str
    flavor: str
    gpus: float
    choice: PoolChoice

    def describe(self) -> str:
        """The Workload, its queue and flavor, as the explanation names them."""
        text = f"Kueue Workload {self.state} in ClusterQueue {self.cluster_queue}, flavor {self.flavor}"
        if self.pod_set != "main":
            text += f", pod set {self.pod_set}"
        return text if len(self.choice.fits) == 1 else f"{text}; {self.choice.reason}"


@dataclass(frozen=True)
class KueueState:
    """What the Kueue watches hold."""

    workloads: Objects
    local_queues: Objects
    cluster_queues: Objects
    flavors: Objects
    admission_checks: Objects = dataclass_field(default_factory=dict)

    @functools.cached_property
    def _provisioning_checks(self) -> set[str]:
        # Once per state, not once per Workload: the same AdmissionChecks answer for every one.
        return kueue.provisioning_checks(self.admission_checks)

    def provisioned(self, workload: Mapping[str, Any], cluster_queue: str) -> bool:
        """Whether an admission check of a provisioning controller stands for the Workload's capacity."""
        checks = self._provisioning_checks
        if not checks:
            return False
        own = {str(c.get("name")) for c in (workload.get("status") or {}).get("admissionChecks") or []}
        queue = kueue.cluster_queue_checks(self.cluster_queues.get(cluster_queue) or {})
        return bool(checks & (own | queue))


@dataclass(frozen=True)
class _Placing:
    """How pod sets are counted and placed: the units, the claims and the NodePools (None: unknown)."""

    units: GpuUnits
    claims: ClaimLookup | None
    nodepools: Sequence[NodePool] | None


def _pod_sets(workload: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    """(name, count, pod spec) of each pod set; ``count`` defaults to 1 as the CRD does."""
    return [
        (str(ps.get("name") or "main"), int(ps.get("count", 1)), (ps.get("template") or {}).get("spec") or {})
        for ps in (workload.get("spec") or {}).get("podSets") or []
    ]


def _template(
    workload: Mapping[str, Any], spec: Mapping[str, Any], count: int, placing: _Placing
) -> GpuTemplate | None:
    what = f"Workload {kueue.namespace_of(workload)}/{kueue.name_of(workload)}"
    try:
        return template_gpus(spec, kueue.namespace_of(workload), count, placing.units, placing.claims, what)
    except ValueError as exc:  # a quantity the API would not have accepted, a MIG name of no known shape
        log.warning("%s not counted: %s", what, exc)
        return None


def _counted(
    workload: Mapping[str, Any],
    state: str,
    queue: str,
    placed: list[tuple[str, Flavor, GpuTemplate]],
    placing: _Placing,
) -> list[QueuedGpus]:
    found: list[QueuedGpus] = []
    for pod_set, flavor, template in placed:
        choice = template.pool(placing.nodepools, count_in_use=True)
        gpus = template.run_gpus(choice.pool, placing.claims)
        if gpus > 0:
            namespace, name = kueue.namespace_of(workload), kueue.name_of(workload)
            found.append(QueuedGpus(namespace, name, state, queue, pod_set, flavor.name, gpus, choice))
    return found


def _admitted(workload: Mapping[str, Any], state: KueueState, placing: _Placing) -> list[QueuedGpus]:
    admission = (workload.get("status") or {}).get("admission") or {}
    assignments = {str(a.get("name")): a for a in admission.get("podSetAssignments") or []}
    placed: list[tuple[str, Flavor, GpuTemplate]] = []
    for pod_set, count, spec in _pod_sets(workload):
        assignment = assignments.get(pod_set) or {}
        flavor_name = kueue.gpu_flavor(assignment.get("flavors") or {}, placing.units)
        flavor = Flavor.of(state.flavors.get(flavor_name or ""), flavor_name or "none")
        pods = int(assignment.get("count", count))
        template = _template(workload, flavor.pod_spec(spec), pods, placing)
        if template is not None:
            placed.append((pod_set, flavor, template))
    state_now = "admitted" if kueue.has_condition(workload, "Admitted") else "quota reserved"
    return _counted(workload, state_now, str(admission.get("clusterQueue", "")), placed, placing)


def _next_in_line(
    waiting: Sequence[Mapping[str, Any]],
    cluster_queue: Mapping[str, Any],
    state: KueueState,
    placing: _Placing,
    uncensored: bool = False,
) -> list[QueuedGpus]:
    """The pending Workloads of one ClusterQueue that fit its unused nominal GPU quota, in queue order;
    ``uncensored``: all of them, each on the first flavor it would be given were its quota unused."""
    quota = kueue.nominal_gpus(cluster_queue, placing.units)
    reserved = kueue.reserved_gpus(cluster_queue, placing.units)
    unused = {flavor: math.inf if uncensored else gpus - reserved.get(flavor, 0.0) for flavor, gpus in quota.items()}
    found: list[QueuedGpus] = []
    for workload in kueue.queue_order(waiting):
        left, placed = dict(unused), list[tuple[str, Flavor, GpuTemplate]]()
        for pod_set, count, spec in _pod_sets(workload):
            template = _template(workload, spec, count, placing)
            if template is None:
                continue
            fits = [Flavor.of(state.flavors.get(name), name) for name, gpus in left.items() if gpus >= template.gpus]
            flavor = next((f for f in fits if f.untolerated(spec) is None), None)
            if flavor is None:
                placed = []  # the Workload is admitted whole or not at all: it waits for quota
                break
            left[flavor.name] -= template.gpus
            placed.append((pod_set, flavor, _template(workload, flavor.pod_spec(spec), count, placing) or template))
        if placed:
            unused = left
            found += _counted(workload, "pending", kueue.name_of(cluster_queue), placed, placing)
    return found


def queued_gpus(
    state: KueueState,
    pods_started: Callable[[Mapping[str, Any]], bool],
    units: GpuUnits,
    nodepools: Sequence[NodePool] | None,
    claims: ClaimLookup | None = None,
    *,
    uncensored: bool = False,
) -> list[QueuedGpus]:
    """Every pod set counted (module docstring); ``pods_started``: whether a Workload's pods exist.

    ``uncensored``: the demand waiting, whatever the quota and the provisioning checks say: every
    pending Workload of an existing queue (on the first flavor of its queue it tolerates that has GPU
    quota, as if the quota were unused) and every admitted one whose pods do not exist yet."""
    placing = _Placing(units, claims, nodepools)
    found: list[QueuedGpus] = []
    pending: dict[str, list[Mapping[str, Any]]] = {}
    for workload in state.workloads.values():
        spec, status = workload.get("spec") or {}, workload.get("status") or {}
        if kueue.has_condition(workload, "Finished") or spec.get("active") is False:
            continue
        if status.get("admission") and kueue.has_condition(workload, "QuotaReserved"):
            queue_name = str(status["admission"].get("clusterQueue", ""))
            if not pods_started(workload) and (uncensored or not state.provisioned(workload, queue_name)):
                found += _admitted(workload, state, placing)
            continue
        local_queue = state.local_queues.get(f"{kueue.namespace_of(workload)}/{spec.get('queueName', '')}")
        queue_name = str(((local_queue or {}).get("spec") or {}).get("clusterQueue", ""))
        if uncensored or not state.provisioned(workload, queue_name):
            pending.setdefault(queue_name, []).append(workload)
    for queue_name, waiting in sorted(pending.items()):
        cluster_queue = state.cluster_queues.get(queue_name)
        if cluster_queue is not None:  # no ClusterQueue (or LocalQueue): Kueue admits none of them
            found += _next_in_line(waiting, cluster_queue, state, placing, uncensored)
    return found


def admitted_pools(
    workload: Mapping[str, Any],
    state: KueueState,
    units: GpuUnits,
    nodepools: Sequence[NodePool] | None,
    claims: ClaimLookup | None = None,
) -> list[str]:
    """The pools an admitted (quota-reserved) Workload's GPUs land in, as ``queued_gpus`` places them,
    most GPUs first; none for a Workload not admitted, of no GPU, or that fits no pool."""
    if not (workload.get("status") or {}).get("admission"):
        return []
    gpus: dict[str, float] = {}
    for item in _admitted(workload, state, _Placing(units, claims, nodepools)):
        if item.choice.pool:
            gpus[item.choice.pool] = gpus.get(item.choice.pool, 0.0) + item.gpus
    return sorted(gpus, key=lambda pool: (-gpus[pool], pool))


def started_workloads(
    workloads: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], jobs: kueue.JobLookup | None = None
) -> set[str]:
    """The uids of the Workloads some of whose pods are among ``pods`` (matched by owner: ``kueue.pod_links``,
    through ``jobs`` to a JobSet)."""
    links = set().union(*(kueue.pod_links(pod, jobs) for pod in pods))
    if not links:
        return set()
    return {
        str((workload.get("metadata") or {}).get("uid")) for workload in workloads if kueue.owner_uids(workload) & links
    }
