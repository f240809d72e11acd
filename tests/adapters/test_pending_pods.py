"""Pending GPU pods: which wait for Karpenter, how many GPUs, and in which pool they land."""

from __future__ import annotations

from adapters.gpu_units import GpuUnits
from adapters.kubernetes.pending_pods import pending_gpus, unplaced, waiting_for_a_node
from adapters.kubernetes.pool_matching import UnplacedDemand
from tests.kube_objects import expression, gpu_pod_spec, nodepool, pending_pod, taint

A = nodepool("a", taints=[taint("nvidia.com/gpu")], labels={"gpu": "a100"})
B = nodepool("b", labels={"gpu": "h100"})
TOLERATE = [{"key": "nvidia.com/gpu", "operator": "Exists"}]


def nobody_is_a_placeholder(pod) -> bool:
    return False


def test_only_pods_without_a_node_wait_for_karpenter():
    waiting = pending_pod("w", gpu_pod_spec())
    bound = pending_pod("b", {**gpu_pod_spec(), "nodeName": "node-1"})
    running = {**pending_pod("r", gpu_pod_spec()), "status": {"phase": "Running"}}
    assert [waiting_for_a_node(p) for p in (waiting, bound, running)] == [True, False, False]


def test_each_waiting_pod_is_resolved_to_its_pool():
    pods = [
        pending_pod("to-a", gpu_pod_spec(4, terms=[[expression("gpu", "In", "a100")]], tolerations=TOLERATE)),
        pending_pod("to-b", gpu_pod_spec(2, node_selector={"gpu": "h100"})),
        pending_pod("nowhere", gpu_pod_spec(8, node_selector={"gpu": "a100"})),  # does not tolerate a's taint
        pending_pod("cpu", {"containers": [{"name": "c", "image": "x"}]}),
    ]
    found = pending_gpus(pods, [A, B], nobody_is_a_placeholder)
    assert [(p.name, p.gpus, p.choice.pool) for p in found] == [
        ("to-a", 4, "a"),
        ("to-b", 2, "b"),
        ("nowhere", 8, None),
    ]
    assert unplaced(found) == [
        UnplacedDemand(
            "pending_pod",
            "ml",
            "nowhere",
            8,
            "fits no NodePool (a: taint nvidia.com/gpu=:NoSchedule is not tolerated; "
            "b: the pod needs gpu In [a100], its nodes have gpu In [h100])",
        )
    ]


def test_placeholders_are_left_out():
    pods = [pending_pod("p", gpu_pod_spec(node_selector={"gpu": "h100"}), namespace="gpu-placeholders")]
    assert pending_gpus(pods, [B], lambda pod: pod["metadata"]["namespace"] == "gpu-placeholders") == []


def test_without_nodepools_only_a_nodepool_selector_names_a_pool():
    pods = [
        pending_pod("named", gpu_pod_spec(node_selector={"karpenter.sh/nodepool": "a"})),
        pending_pod("affine", gpu_pod_spec(terms=[[expression("gpu", "In", "a100")]])),
    ]
    found = pending_gpus(pods, None, nobody_is_a_placeholder)
    assert [(p.name, p.choice.pool) for p in found] == [("named", "a"), ("affine", None)]


def test_slices_count_in_physical_gpus_as_the_signal_counts_them():
    mig = gpu_pod_spec()
    mig["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": "2"}}
    shared = gpu_pod_spec()
    shared["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu.shared": "2"}}
    pods = [pending_pod("mig", mig), pending_pod("shared", shared)]
    sliced = GpuUnits.of(time_slicing={"nvidia.com/gpu.shared": 4})
    found = pending_gpus(pods, None, nobody_is_a_placeholder, sliced)
    assert [(p.name, p.gpus) for p in found] == [("mig", 2 / 7), ("shared", 0.5)]
    # Without the device plugin's replicas the shared resource is not a GPU, as the signal does not
    # select it then either.
    assert [(p.name, p.gpus) for p in pending_gpus(pods, None, nobody_is_a_placeholder)] == [("mig", 2 / 7)]
