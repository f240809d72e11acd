"""Which Kueue Workloads count as GPU demand, and where: pure functions over objects the vendored Kueue
CRDs accept (each fixture is checked against them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from adapters.gpu_units import GpuUnits
from adapters.kubernetes import kueue
from adapters.kubernetes.kueue_demand import KueueState, queued_gpus, started_workloads
from tests.kube_objects import gpu_pod_spec, nodepool, taint
from tests.kube_schemas import validate
from tests.kueue_objects import admitted, cluster_queue, finished, local_queue, resource_flavor, workload

TOLERATE_GPUS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
POOLS = [nodepool("a100", taints=[taint("nvidia.com/gpu")]), nodepool("h100", taints=[taint("nvidia.com/gpu")])]
FLAVORS = [
    resource_flavor("a100", {"karpenter.sh/nodepool": "a100"}, tolerations=TOLERATE_GPUS),
    resource_flavor("h100", {"karpenter.sh/nodepool": "h100"}, tolerations=TOLERATE_GPUS),
]


def keyed(objects: list[dict[str, Any]]) -> dict[str, Mapping[str, Any]]:
    for obj in objects:
        validate("kueue.x-k8s.io", obj["kind"], obj)
    return {kueue.namespace_of(o) + "/" + kueue.name_of(o) if kueue.namespace_of(o) else kueue.name_of(o): o
            for o in objects}  # fmt: skip


def counted(
    workloads: list[dict[str, Any]],
    queue: dict[str, Any],
    flavors: list[dict[str, Any]] = FLAVORS,
    started: frozenset[str] = frozenset(),
) -> list[tuple[str, str, str, float, str | None]]:
    state = KueueState(keyed(workloads), keyed([local_queue("team-a", "gpu")]), keyed([queue]), keyed(flavors))
    found = queued_gpus(state, lambda w: kueue.name_of(w) in started, GpuUnits(), POOLS)
    return [(q.name, q.state, q.flavor, q.gpus, q.choice.pool) for q in found]


def job(name: str, gpus: int, count: int, **options: Any) -> dict[str, Any]:
    return workload(name, gpu_pod_spec(gpus), count, **options)


def test_pending_workloads_count_in_queue_order_while_the_unused_quota_holds_them():
    # 40 GPUs of a100, 20 of them reserved: 20 left. The high-priority job goes first and takes 16; the
    # older one (16) then waits for quota, while a small one behind it fits the 4 left.
    queue = cluster_queue("gpu", [("a100", 40)], reserved={"a100": 20})
    older = job("older", 8, 2, created="2026-11-20T07:00:00Z")
    urgent = job("urgent", 8, 2, created="2026-11-20T08:30:00Z", priority=100)
    small = job("small", 1, 1, created="2026-11-20T08:40:00Z")
    assert counted([older, urgent, small], queue) == [
        ("urgent", "pending", "a100", 16.0, "a100"),
        ("small", "pending", "a100", 1.0, "a100"),
    ]


def test_a_workload_too_big_for_the_first_flavor_gets_the_next_with_room():
    queue = cluster_queue("gpu", [("a100", 8), ("h100", 32)])
    assert counted([job("big", 8, 2)], queue) == [("big", "pending", "h100", 16.0, "h100")]


def test_a_flavor_whose_node_taints_the_pods_do_not_tolerate_is_passed_over():
    reserved_for_infra = resource_flavor("a100", {"karpenter.sh/nodepool": "a100"}, node_taints=[taint("infra")])
    queue = cluster_queue("gpu", [("a100", 32), ("h100", 32)])
    assert counted([job("train", 8, 1)], queue, [reserved_for_infra, FLAVORS[1]]) == [
        ("train", "pending", "h100", 8.0, "h100")
    ]


def test_an_admitted_workload_counts_on_its_assigned_flavor_until_its_pods_are_started():
    queue = cluster_queue("gpu", [("a100", 32), ("h100", 32)], reserved={"h100": 16})
    on_h100 = admitted(job("train", 8, 2), "gpu", "h100")
    assert counted([on_h100], queue) == [("train", "admitted", "h100", 16.0, "h100")]
    assert counted([on_h100], queue, started=frozenset({"train"})) == []


@pytest.mark.parametrize(
    "gone",
    [finished(job("done", 8, 1)), {**job("off", 8, 1), "spec": {**job("off", 8, 1)["spec"], "active": False}}],
    ids=["finished", "deactivated"],
)
def test_finished_and_deactivated_workloads_never_count(gone):
    assert counted([gone], cluster_queue("gpu", [("a100", 32)])) == []


def test_a_workload_of_a_queue_that_does_not_exist_is_not_counted():
    assert counted([job("lost", 8, 1, queue="nobody")], cluster_queue("gpu", [("a100", 32)])) == []


def test_pods_are_tied_to_their_workload_through_the_job_that_owns_both():
    train = job("train", 8, 2, job_uid="job-uid-1")
    train["metadata"]["uid"] = "workload-uid-1"
    other_pod = {"metadata": {"uid": "p2", "ownerReferences": [{"uid": "job-uid-2"}]}}
    own_pod = {"metadata": {"uid": "p1", "ownerReferences": [{"uid": "job-uid-1"}]}}
    assert started_workloads([train], [other_pod]) == set()
    assert started_workloads([train], [other_pod, own_pod]) == {"workload-uid-1"}
