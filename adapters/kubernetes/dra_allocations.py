"""GPUs that DRA gives each node pool now: the devices its nodes publish (held) and the devices
allocated claims take for their pods (used). kube-state-metrics exports neither (docs/kubernetes.md,
"Dynamic Resource Allocation"), so the scorecard's held and used and the GPU demand history add them
from the watches.

- **Used**: a ResourceClaim with an allocation (``status.allocation``) that is reserved for a pod
  (``status.reservedFor``) counts its allocation's results, as ``dra_claims`` counts claims (the
  DeviceClass map; a claim several pods share counts once). The claim the scheduler makes for a
  DRA-backed extended resource never counts: the pod's ``nvidia.com/gpu`` already does. A Pending
  pod's claim is not allocated yet and counts with Pending pods instead. Claims in the placeholder
  namespaces are capacity held ahead, not use.
- **Held**: the devices of the DeviceClasses the map gives a number that the nodes publish in their
  current ResourceSlices. Classes counted by MIG profile are left out: their devices are slices of
  GPUs whose whole devices may be published too, and would be counted twice.
- **Pools**: a claim is on the node its allocation's node selector names (``metadata.name``), a slice
  on its ``spec.nodeName``; a node is in the pool of the NodeClaim that launched it. A node no
  NodeClaim names (or a claim on no single node) is in pool ``""``, as the PromQL presets put
  series of nodes without a pool label.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from adapters.kubernetes.dra_claims import EXTENDED_RESOURCE_CLAIM, MIG_PROFILE, ClaimLookup, claim_spec_gpus


@dataclass(frozen=True)
class PoolGpus:
    """GPUs DRA devices hold and allocated claims use in each pool, and what could not be counted."""

    held: Mapping[str, float] = field(default_factory=dict)
    used: Mapping[str, float] = field(default_factory=dict)
    problems: tuple[str, ...] = ()


def allocated_node(allocation: Mapping[str, Any]) -> str:
    """The one node an allocation's node selector names; ``""`` for none or several (network devices)."""
    terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
    nodes = {
        str(value)
        for term in terms
        for requirement in term.get("matchFields") or []
        if requirement.get("key") == "metadata.name" and requirement.get("operator") == "In"
        for value in requirement.get("values") or []
    }
    return nodes.pop() if len(nodes) == 1 else ""


def used_gpus(lookup: ClaimLookup, placeholder_namespaces: Collection[str] = ()) -> dict[str, float]:
    """GPUs allocated claims reserved for pods take, per node (module docstring)."""
    per_node: dict[str, float] = {}
    for claim in lookup.claims.values():
        status = claim.get("status") or {}
        allocation = status.get("allocation")
        metadata = claim.get("metadata") or {}
        if metadata.get("namespace") in placeholder_namespaces:
            continue
        if not allocation or not status.get("reservedFor"):
            continue
        if (metadata.get("annotations") or {}).get(EXTENDED_RESOURCE_CLAIM) == "true":
            continue
        gpus = claim_spec_gpus(claim.get("spec") or {}, status, lookup.device_classes).gpus
        if gpus > 0:
            node = allocated_node(allocation)
            per_node[node] = per_node.get(node, 0.0) + gpus
    return per_node


def held_gpus(lookup: ClaimLookup) -> tuple[dict[str, float], list[str]]:
    """GPUs of the devices each node publishes (module docstring), and why a class could not be read."""
    per_node: dict[str, float] = {}
    problems: list[str] = []
    if lookup.devices is None:
        return per_node, problems
    for device_class, per_device in sorted(lookup.device_classes.items()):
        if per_device == MIG_PROFILE:
            continue
        try:
            published = lookup.devices.class_devices(device_class)
        except ValueError as error:
            if lookup.devices.device_classes.get(device_class) is not None:
                problems.append(str(error))
            continue  # a class of the map that this cluster does not define holds nothing
        for node, devices in published.items():
            per_node[node] = per_node.get(node, 0.0) + devices * float(per_device)
    return per_node, problems


def pool_gpus(lookup: ClaimLookup, placeholder_namespaces: Collection[str] = ()) -> PoolGpus:
    """What DRA holds and uses in each pool now (module docstring)."""
    node_pools = lookup.devices.node_pools() if lookup.devices is not None else {}
    held, problems = held_gpus(lookup)
    used = used_gpus(lookup, placeholder_namespaces)
    return PoolGpus(_by_pool(held, node_pools), _by_pool(used, node_pools), tuple(problems))


def _by_pool(per_node: Mapping[str, float], node_pools: Mapping[str, str]) -> dict[str, float]:
    pools: dict[str, float] = {}
    for node, gpus in per_node.items():
        pool = node_pools.get(node, "")
        pools[pool] = pools.get(pool, 0.0) + gpus
    return pools
