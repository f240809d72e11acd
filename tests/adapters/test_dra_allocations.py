"""GPUs DRA holds and uses in each pool now (``adapters.kubernetes.dra_allocations``): the devices nodes
publish, the claims allocated and reserved for pods, each node in its NodeClaim's pool. Claims and
slices are checked against Kubernetes 1.37's ``resource.k8s.io/v1`` schemas first."""

from __future__ import annotations

from typing import Any

from adapters.kubernetes.dra_allocations import PoolGpus, allocated_node, pool_gpus
from adapters.kubernetes.dra_claims import EXTENDED_RESOURCE_CLAIM, ClaimLookup
from tests import kube_schemas
from tests.adapters.test_dra_claims import NVIDIA, inventory, resource_slice


def allocated_claim(
    name: str, node: str | None, devices: int, *, reserved: bool = True, extended: bool = False, namespace: str = "ml"
) -> dict[str, Any]:
    """A ResourceClaim the scheduler allocated on ``node`` (None: on no single node), reserved for a pod."""
    annotations = {EXTENDED_RESOURCE_CLAIM: "true"} if extended else {}
    request = {"name": "gpus", "exactly": {"deviceClassName": NVIDIA, "count": devices}}
    results = [
        {"request": "gpus", "driver": NVIDIA, "pool": node or "fabric", "device": f"gpu-{i}"} for i in range(devices)
    ]
    allocation: dict[str, Any] = {"devices": {"results": results}}
    if node is not None:
        on_node = {"key": "metadata.name", "operator": "In", "values": [node]}
        allocation["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [on_node]}]}
    status: dict[str, Any] = {"allocation": allocation}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": f"{name}-pod", "uid": f"uid-{name}"}]
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {"devices": {"requests": [request]}},
        "status": status,
    }
    kube_schemas.validate("resource.k8s.io", "ResourceClaim", obj)
    return obj


def lookup(*claims: dict[str, Any], slices: tuple[dict[str, Any], ...] = ()) -> ClaimLookup:
    found = {f"{c['metadata']['namespace']}/{c['metadata']['name']}": c for c in claims}
    return ClaimLookup(claims=found, devices=inventory(*slices))


def test_allocated_claims_reserved_for_pods_are_used_in_their_nodes_pools() -> None:
    claims = (
        allocated_claim("train", "node-1", 2),
        allocated_claim("serve", "node-2", 1),  # node-1 and node-2 are both a100's
        allocated_claim("eval", "node-3", 4),
        allocated_claim("done", "node-3", 8, reserved=False),  # its pods are gone: nothing uses it
        allocated_claim("extended", "node-3", 1, extended=True),  # the pod's nvidia.com/gpu counts it
        allocated_claim("fabric", None, 3),  # on no single node: pool ""
        allocated_claim("elsewhere", "node-9", 1),  # a node no NodeClaim launched: pool ""
        allocated_claim("ahead", "node-1", 4, namespace="gpu-placeholders"),  # held ahead, not used
    )
    assert pool_gpus(lookup(*claims), ["gpu-placeholders"]).used == {"a100": 3.0, "h100": 4.0, "": 4.0}


def test_held_are_the_devices_of_classes_counted_by_number_not_their_mig_slices() -> None:
    gpus8 = [(f"gpu-{i}", "gpu") for i in range(8)]
    slices = (
        resource_slice("node-1", gpus8),
        resource_slice("node-2", [("gpu-0", "gpu"), ("gpu-1-mig-0", "mig"), ("gpu-1-mig-1", "mig")]),
        resource_slice("node-3", gpus8[:4], generation=1),
        resource_slice("node-3", gpus8, generation=2),  # the newest generation replaces the older
    )
    assert pool_gpus(lookup(slices=slices)) == PoolGpus(held={"a100": 9.0, "h100": 8.0}, used={}, problems=())


def test_a_node_selector_naming_no_single_node_is_no_node() -> None:
    two = {"key": "metadata.name", "operator": "In", "values": ["node-1", "node-2"]}
    assert allocated_node({"nodeSelector": {"nodeSelectorTerms": [{"matchFields": [two]}]}}) == ""
    assert allocated_node({}) == ""
