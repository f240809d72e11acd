"""What a pod's JSON tells the live scorecard: waiting for capacity, its wait, when it ran, its run."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from adapters.kubernetes import pod_outcomes

T = datetime(2026, 11, 20, 9, 0, tzinfo=UTC).timestamp()


def pod(phase: str = "Pending", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u1", "creationTimestamp": "2026-11-20T09:00:00Z"},
        "spec": {"containers": []},
        "status": {"phase": phase, **status},
    }


UNSCHEDULABLE = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]


def test_only_an_unbound_pending_pod_the_scheduler_found_no_node_for_waits_for_capacity() -> None:
    assert pod_outcomes.waits_for_capacity(pod(conditions=UNSCHEDULABLE))
    assert not pod_outcomes.waits_for_capacity(pod())  # not yet tried by the scheduler
    assert not pod_outcomes.waits_for_capacity(pod(conditions=[{**UNSCHEDULABLE[0], "reason": "SchedulerError"}]))
    bound = pod(conditions=UNSCHEDULABLE) | {"spec": {"nodeName": "n1"}}
    assert not pod_outcomes.waits_for_capacity(bound)
    assert not pod_outcomes.waits_for_capacity(pod("Running", conditions=UNSCHEDULABLE))


@pytest.mark.parametrize(
    "malformed",
    [{"status": "Pending"}, {"status": {"phase": "Pending", "conditions": "Unschedulable"}}, {"spec": []}, {}],
)
def test_a_malformed_pod_does_not_wait(malformed: dict[str, Any]) -> None:
    assert not pod_outcomes.waits_for_capacity(malformed)


def test_the_capacity_wait_runs_from_creation_until_scheduled() -> None:
    scheduled = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-20T09:06:30Z"}]
    assert pod_outcomes.capacity_wait_s(pod(conditions=scheduled)) == 390.0
    assert pod_outcomes.scheduled_at(pod(conditions=scheduled)) == T + 390
    assert pod_outcomes.capacity_wait_s(pod(conditions=UNSCHEDULABLE)) is None
    with pytest.raises(ValueError, match=r"lastTransitionTime: '9:06' is not a timestamp"):
        pod_outcomes.capacity_wait_s(pod(conditions=[{**scheduled[0], "lastTransitionTime": "9:06"}]))
    with pytest.raises(ValueError, match=r"lastTransitionTime: '2026-11-20T09:06:30' has no time zone"):
        pod_outcomes.capacity_wait_s(pod(conditions=[{**scheduled[0], "lastTransitionTime": "2026-11-20T09:06:30"}]))


def test_a_pod_runs_from_its_first_container_start() -> None:
    containers = [
        {"state": {"running": {"startedAt": "2026-11-20T09:08:00Z"}}},
        {"state": {"running": {"startedAt": "2026-11-20T09:07:00Z"}}},
        {"state": {"waiting": {"reason": "ContainerCreating"}}},
    ]
    assert pod_outcomes.running_at(pod("Running", containerStatuses=containers)) == T + 420
    assert pod_outcomes.running_at(pod("Running", startTime="2026-11-20T09:01:00Z")) == T + 60
    assert pod_outcomes.running_at(pod()) is None


def test_a_cronjob_run_is_its_scheduled_time_and_the_pods_it_wants() -> None:
    annotations = {pod_outcomes.SCHEDULED_ANNOTATION: "2026-11-20T09:00:00Z"}
    job = {"metadata": {"annotations": annotations}, "spec": {"parallelism": 4, "completions": 2}}
    assert pod_outcomes.cronjob_run(job) == (T, 2)
    assert pod_outcomes.cronjob_run({"metadata": {"annotations": annotations}}) == (T, 1)
    assert pod_outcomes.cronjob_run({"metadata": {}}) is None  # not made by a CronJob
    with pytest.raises(ValueError, match=r"spec.parallelism: 'four' is not a count of pods"):
        pod_outcomes.cronjob_run({"metadata": {"annotations": annotations}, "spec": {"parallelism": "four"}})
    owned = pod() | {"metadata": {"namespace": "ml", "ownerReferences": [{"kind": "Job", "name": "nightly-1"}]}}
    assert pod_outcomes.owning_job(owned) == "ml/nightly-1"
    assert pod_outcomes.owning_job(pod()) is None
