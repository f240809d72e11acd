"""NodePool limits against the nodes Karpenter would launch (every limited resource), and the
fallback past a pool whose launches keep failing."""

from __future__ import annotations

from adapters.kubernetes.pool_matching import choose_pool, limit_refusal, with_observations
from tests.kube_objects import gpu_pod_spec, nodepool

EIGHT_GPU_NODE = {"nvidia.com/gpu": 8.0, "cpu": 96.0, "memory": 1152 * 2**30}


def test_a_one_gpu_pod_does_not_fit_four_gpus_left_when_the_pool_only_has_eight_gpu_nodes():
    pool = nodepool("a", limits={"nvidia.com/gpu": "16"}, gpus_in_use="12")
    assert limit_refusal(pool, 1, count_in_use=True) is None  # node size unknown: the pod's own GPUs
    sized = with_observations(pool, [EIGHT_GPU_NODE])
    assert limit_refusal(sized, 1, count_in_use=True) == (
        "no node size of the pool fits its limits (nvidia.com/gpu 4 of 16 left; nodes seen: nvidia.com/gpu 8)"
    )
    assert limit_refusal(sized, 1, count_in_use=False) is None  # a future run: the whole limit


def test_every_limited_resource_counts():
    pool = nodepool("a", limits={"cpu": "64"})
    assert limit_refusal(pool, 8, count_in_use=False) is None  # no node size known: cpu cannot be judged
    sized = with_observations(pool, [EIGHT_GPU_NODE])
    assert limit_refusal(sized, 8, count_in_use=False) == (
        "no node size of the pool fits its limits (cpu 64 of 64 left; nodes seen: cpu 96)"
    )
    used = nodepool("b", limits={"memory": "1Ti"})
    used["status"]["resources"] = {"memory": "2Ti"}
    assert limit_refusal(used, 1, count_in_use=True) == f"limits exceeded: memory {2 * 2**40:g} of {2**40:g}"


def test_a_smaller_node_size_that_fits_the_room_is_enough():
    small = {"nvidia.com/gpu": 1.0, "cpu": 8.0}
    pool = with_observations(nodepool("a", limits={"nvidia.com/gpu": "16"}, gpus_in_use="12"), [EIGHT_GPU_NODE, small])
    assert limit_refusal(pool, 1, count_in_use=True) is None
    assert limit_refusal(pool, 8, count_in_use=True) is not None


def test_demand_moves_past_a_pool_whose_launches_keep_failing():
    first = with_observations(nodepool("first", weight=20), [], "its last 3 launches failed (InsufficientCapacity x3)")
    second = with_observations(nodepool("second", weight=10), [])
    choice = choose_pool(gpu_pod_spec(), [second, first], 1, count_in_use=False)
    assert (choice.pool, choice.fits) == ("second", ("first", "second"))
    assert choice.reason == (
        "NodePools first (weight 20), second (weight 10) fit; Karpenter tries first first, but its launches keep "
        "failing (first: its last 3 launches failed (InsufficientCapacity x3)): Karpenter falls back to second "
        "(weight 10)"
    )
    alone = choose_pool(gpu_pod_spec(), [first], 1, count_in_use=False)
    assert alone.pool == "first"  # nowhere else to go: Karpenter keeps trying it
    assert "keep failing" in alone.reason
