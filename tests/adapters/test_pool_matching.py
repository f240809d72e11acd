"""Pods to NodePools as Karpenter's scheduler decides: requirements, taints, limits, weights, relaxation."""

from __future__ import annotations

import pytest

from adapters.kubernetes.pool_matching import (
    choose_pool,
    karpenter_order,
    limit_refusal,
    pool_requirements,
    tolerates,
    untolerated_taint,
)
from tests.kube_objects import expression, gpu_pod_spec, nodepool, taint

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
A100 = nodepool(
    "a100", requirements=[expression(INSTANCE_TYPE, "In", "p4d.24xlarge")], taints=[taint("nvidia.com/gpu")]
)
H100 = nodepool("h100", requirements=[expression(INSTANCE_TYPE, "In", "p5.48xlarge")], taints=[taint("nvidia.com/gpu")])
CPU = nodepool("cpu", requirements=[expression("karpenter.k8s.aws/instance-category", "In", "c", "m")])
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def choose(spec, pools, gpus=1.0, *, count_in_use=True):
    return choose_pool(spec, pools, gpus, count_in_use=count_in_use)


def test_the_nodepool_label_selects_that_pool():
    spec = gpu_pod_spec(node_selector={"karpenter.sh/nodepool": "h100"}, tolerations=[GPU_TOLERATION])
    choice = choose(spec, [A100, H100, CPU])
    assert (choice.pool, choice.fits, choice.reason) == ("h100", ("h100",), "NodePool h100")


def test_instance_type_affinity_selects_the_pool_offering_it():
    spec = gpu_pod_spec(terms=[[expression(INSTANCE_TYPE, "In", "p5.48xlarge")]], tolerations=[GPU_TOLERATION])
    # A pool that leaves the instance type open would fit too (next test): this one rules GPUs out.
    cpu = nodepool("cpu", requirements=[expression(INSTANCE_TYPE, "NotIn", "p5.48xlarge", "p4d.24xlarge")])
    assert choose(spec, [A100, H100, cpu]).pool == "h100"


def test_a_pool_without_a_taint_fits_an_instance_type_it_does_not_constrain():
    spec = gpu_pod_spec(terms=[[expression(INSTANCE_TYPE, "In", "p5.48xlarge")]])
    choice = choose(spec, [A100, H100, CPU])
    assert choice.pool == "cpu"  # well-known labels a pool leaves open are the instance types' to decide
    assert "a100: taint nvidia.com/gpu=:NoSchedule is not tolerated" not in choice.reason


def test_template_labels_and_custom_requirements_must_be_defined_by_the_pool():
    labelled = nodepool("labelled", labels={"team": "vision"})
    required = nodepool("required", requirements=[expression("team", "In", "nlp", "vision")])
    spec = gpu_pod_spec(node_selector={"team": "vision"})
    assert choose(spec, [labelled, required]).fits == ("required", "labelled")
    assert choose(gpu_pod_spec(node_selector={"team": "audio"}), [labelled, required]).pool is None
    # A custom label no pool defines cannot be met; excluding values of it can.
    assert choose(gpu_pod_spec(node_selector={"rack": "r1"}), [labelled]).pool is None
    assert choose(gpu_pod_spec(terms=[[expression("rack", "NotIn", "r1")]]), [labelled]).pool == "labelled"
    assert choose(gpu_pod_spec(terms=[[expression("rack", "DoesNotExist")]]), [labelled]).pool == "labelled"


def test_gt_requirements_on_gpu_counts():
    big = nodepool("big", requirements=[expression("karpenter.k8s.aws/instance-gpu-count", "Gt", "4")])
    small = nodepool("small", requirements=[expression("karpenter.k8s.aws/instance-gpu-count", "Lt", "4")])
    spec = gpu_pod_spec(terms=[[expression("karpenter.k8s.aws/instance-gpu-count", "Gt", "6")]])
    assert choose(spec, [big, small]).pool == "big"


def test_the_pool_and_node_class_labels_are_part_of_the_pool():
    offered = pool_requirements(A100)
    assert offered["karpenter.sh/nodepool"].values == frozenset({"a100"})
    assert offered["karpenter.k8s.aws/ec2nodeclass"].values == frozenset({"default"})


# ----------------------------------------------------------------------------- taints


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}, True),
        ({"key": "gpu", "value": "yes"}, True),  # operator defaults to Equal, empty effect matches all
        ({"key": "gpu", "value": "no"}, False),
        ({"key": "gpu", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),  # empty key with Exists tolerates everything
        ({"key": "gpu", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
        ({"key": "gpu", "operator": "Gt", "value": "1"}, False),  # "yes" is not a number
    ],
)
def test_tolerations_as_kubernetes_matches_them(toleration, tolerated):
    assert tolerates(toleration, taint("gpu", value="yes")) is tolerated


@pytest.mark.parametrize(
    ("operator", "bound", "tolerated"),
    [("Lt", "950", True), ("Lt", "900", False), ("Gt", "800", True), ("Gt", "900", False), ("Lt", "0950", False)],
)
def test_numeric_toleration_operators_compare_the_taint_with_the_bound(operator, bound, tolerated):
    # Lt: the taint's value is below the toleration's; values must be plain decimal integers.
    assert tolerates({"key": "slo", "operator": operator, "value": bound}, taint("slo", value="900")) is tolerated


def test_startup_taints_never_block_and_taints_do():
    pool = nodepool("gpu", startup_taints=[taint("nvidia.com/gpu-driver")], taints=[taint("dedicated", value="ml")])
    assert untolerated_taint(pool, []) == "taint dedicated=ml:NoSchedule is not tolerated"
    assert untolerated_taint(pool, [{"key": "dedicated", "value": "ml"}]) is None


def test_prefer_no_schedule_taints_give_way_only_after_every_pool_was_tried():
    soft = nodepool("soft", taints=[taint("spot", effect="PreferNoSchedule")], weight=50)
    hard = nodepool("hard", taints=[taint("gpu")], weight=10)
    # Karpenter checks every taint, PreferNoSchedule too; relaxing tolerates those last.
    assert choose(gpu_pod_spec(tolerations=[{"key": "gpu", "operator": "Exists"}]), [soft, hard]).pool == "hard"
    assert choose(gpu_pod_spec(), [soft, hard]).pool == "soft"


# ----------------------------------------------------------------------------- limits


def test_gpu_limits_count_what_the_pool_holds_for_pods_waiting_now():
    pool = nodepool("gpu", limits={"nvidia.com/gpu": "16"}, gpus_in_use="12")
    assert limit_refusal(pool, 4, count_in_use=True) is None
    assert limit_refusal(pool, 8, count_in_use=True) == "limit 16 nvidia.com/gpu, 12 in use: no room for 8"
    assert limit_refusal(pool, 8, count_in_use=False) is None  # a future run: the whole limit
    assert limit_refusal(pool, 32, count_in_use=False) == "limit 16 nvidia.com/gpu: no room for 32"


def test_node_limits_and_pools_without_limits():
    full = nodepool("full", limits={"nodes": "3"})
    full["status"]["nodes"] = 3
    assert limit_refusal(full, 1, count_in_use=True) == "node limit 3 reached"
    assert limit_refusal(full, 1, count_in_use=False) is None
    assert limit_refusal(nodepool("open"), 1000, count_in_use=True) is None


def test_a_full_pool_passes_the_pod_to_the_next_one():
    preferred = nodepool("reserved", weight=90, limits={"nvidia.com/gpu": "8"}, gpus_in_use="8")
    fallback = nodepool("on-demand", weight=10)
    choice = choose(gpu_pod_spec(gpus=2), [preferred, fallback], gpus=2)
    assert choice.pool == "on-demand"
    assert choose(gpu_pod_spec(gpus=2), [preferred, fallback], gpus=2, count_in_use=False).pool == "reserved"


# ----------------------------------------------------------------------------- order


def test_karpenter_order_is_weight_then_name_descending():
    pools = [nodepool("alpha", weight=10), nodepool("zeta"), nodepool("beta", weight=10), nodepool("gamma")]
    assert [p["metadata"]["name"] for p in karpenter_order(pools)] == ["beta", "alpha", "zeta", "gamma"]


def test_several_pools_the_heaviest_wins_and_the_choice_is_explained():
    pools = [nodepool("spot", weight=10), nodepool("reserved", weight=50), nodepool("default")]
    choice = choose(gpu_pod_spec(), pools)
    assert choice.fits == ("reserved", "spot", "default")
    assert choice.reason == (
        "NodePools reserved (weight 50), spot (weight 10), default (weight 0) fit; Karpenter tries reserved first"
    )


def test_required_terms_are_tried_in_order_across_all_pools():
    light = nodepool("light", labels={"tier": "b"}, weight=1)
    heavy = nodepool("heavy", labels={"tier": "c"}, weight=100)
    spec = gpu_pod_spec(
        terms=[[expression("tier", "In", "a")], [expression("tier", "In", "b")], [expression("tier", "In", "c")]]
    )
    # Term 0 fits nothing; term 1 fits light, which wins although heavy fits term 2.
    assert choose(spec, [light, heavy]).pool == "light"


def test_the_heaviest_preferred_term_counts_until_relaxed():
    spot = nodepool("spot", requirements=[expression("karpenter.sh/capacity-type", "In", "spot")], weight=1)
    demand = nodepool("on-demand", requirements=[expression("karpenter.sh/capacity-type", "In", "on-demand")], weight=9)
    prefer_spot = gpu_pod_spec(
        preferred=[
            (1, [expression("karpenter.sh/capacity-type", "In", "on-demand")]),
            (50, [expression("karpenter.sh/capacity-type", "In", "spot")]),
        ]
    )
    assert choose(prefer_spot, [spot, demand]).pool == "spot"
    impossible = gpu_pod_spec(preferred=[(50, [expression("karpenter.sh/capacity-type", "In", "reserved")])])
    assert choose(impossible, [spot, demand]).pool == "on-demand"


# ----------------------------------------------------------------------------- none fits


def test_pools_karpenter_does_not_provision_from_are_skipped_with_a_reason():
    static = nodepool("static")
    static["spec"]["replicas"] = 2
    deleting = nodepool("deleting")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    choice = choose(gpu_pod_spec(), [static, deleting, nodepool("unready", ready=False)])
    assert choice.pool is None
    assert choice.reason == (
        "fits no NodePool (deleting: being deleted; static: static (spec.replicas is set); unready: not Ready)"
    )


def test_every_pool_says_why_it_does_not_fit():
    spec = gpu_pod_spec(gpus=8, terms=[[expression(INSTANCE_TYPE, "In", "p5.48xlarge")]])
    small = nodepool("small", limits={"nvidia.com/gpu": "4"})
    choice = choose(spec, [A100, small], gpus=8)
    assert choice == choice.__class__(
        None,
        (),
        "fits no NodePool (a100: taint nvidia.com/gpu=:NoSchedule is not tolerated; "
        "small: limit 4 nvidia.com/gpu, 0 in use: no room for 8)",
    )
    assert choose(spec, []).reason == "no NodePool exists"


def test_a_pod_with_an_unknown_operator_raises():
    with pytest.raises(ValueError, match="unknown operator"):
        choose(gpu_pod_spec(terms=[[expression("zone", "Near", "a")]]), [CPU])
