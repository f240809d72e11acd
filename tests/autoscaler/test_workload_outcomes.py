"""Kueue Workloads' queue waits as the watches' events tell them (``scorecard.workloads``): each wait once,
in the Workload's pools, whatever order the two watches deliver in."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from adapters.kubernetes.watch import WatchCache, WatchEvent
from autoscaler.scorecard.workloads import WorkloadOutcomes
from tests.kube_objects import gpu_pod_spec, pending_pod
from tests.kueue_objects import admitted, condition, workload

JOB_UID = "job-uid"
TRAIN = {**workload("train", gpu_pod_spec(8), 2, job_uid=JOB_UID, created="2026-11-20T08:00:00Z")}
TRAIN["metadata"] = {**TRAIN["metadata"], "uid": "wl-uid"}
AT_0800 = 1795161600.0  # 2026-11-20T08:00:00Z


def stamp(minute: float) -> str:
    whole, seconds = divmod(round(minute * 60), 60)
    return f"2026-11-20T08:{whole:02d}:{seconds:02d}Z"


class Recorder:
    def __init__(self, pools: Sequence[str] | None = ("a100",)) -> None:
        self.pools = pools
        self.waits: list[tuple[str, str, float, float]] = []
        self.outcomes = WorkloadOutcomes(pools=self.pools_of, record=self.record)
        self.cache = WatchCache("workloads")

    def pools_of(self, _: Mapping[str, Any]) -> Sequence[str] | None:
        return self.pools

    def record(self, pool: str, kind: str, at_s: float, seconds: float) -> None:
        self.waits.append((pool, kind, at_s - AT_0800, seconds))

    def workload(self, obj: Mapping[str, Any], kind: str = "MODIFIED") -> None:
        self.outcomes.on_workload_change(self.cache, WatchEvent(kind, obj))

    def pod_running(self, name: str, minute: float) -> None:
        pod = pending_pod(name, gpu_pod_spec(8))
        pod["metadata"] |= {"uid": f"pod-{name}", "ownerReferences": [{"kind": "Job", "name": "train", "uid": JOB_UID}]}
        started = {"running": {"startedAt": stamp(minute)}}
        pod["status"] = {"phase": "Running", "startTime": stamp(minute), "containerStatuses": [{"state": started}]}
        self.outcomes.on_pod_change(WatchCache("pending pods"), WatchEvent("DELETED", pod))


def reserved_then_admitted(recorder: Recorder, reserved: float, admitted_at: float, checks: Sequence[str]) -> None:
    recorder.workload(TRAIN, "ADDED")
    recorder.workload(admitted(TRAIN, "gpu", "a100", reserved_at=stamp(reserved), admitted_at=None, checks=checks))
    recorder.workload(
        admitted(TRAIN, "gpu", "a100", reserved_at=stamp(reserved), admitted_at=stamp(admitted_at), checks=checks)
    )


def test_without_admission_checks_there_is_no_admission_check_wait_and_capacity_runs_from_admission() -> None:
    recorder = Recorder()
    reserved_then_admitted(recorder, 10, 10, checks=())
    recorder.pod_running("train-0", 12)
    recorder.pod_running("train-0", 12)  # the same pod again: still one of two
    assert recorder.waits == [("a100", "quota", 600.0, 600.0)]
    recorder.pod_running("train-1", 14.5)
    recorder.workload(admitted(TRAIN, "gpu", "a100", reserved_at=stamp(10), admitted_at=stamp(10)))  # seen again
    assert recorder.waits == [("a100", "quota", 600.0, 600.0), ("a100", "capacity", 870.0, 270.0)]


def test_pods_seen_running_before_the_workload_is_seen_admitted_count_once_it_is() -> None:
    recorder = Recorder()
    recorder.workload(TRAIN, "ADDED")
    recorder.pod_running("train-0", 16)
    recorder.pod_running("train-1", 17)
    reserved_then_admitted(recorder, 10, 15, checks=("budget",))
    assert recorder.waits == [
        ("a100", "quota", 600.0, 600.0),
        ("a100", "admission_check", 900.0, 300.0),
        ("a100", "capacity", 1020.0, 120.0),
    ]


def test_pools_not_known_yet_are_looked_up_again_and_a_workload_of_no_pool_records_nothing() -> None:
    recorder = Recorder(pools=None)
    reserved_then_admitted(recorder, 10, 10, checks=())
    assert recorder.waits == [] and list(recorder.outcomes.unresolved) == ["wl-uid"]
    recorder.pools = ["a100", "h100"]  # the watches have listed: its GPUs land in two pools
    recorder.outcomes.retry()
    assert recorder.waits == [("a100", "quota", 600.0, 600.0), ("h100", "quota", 600.0, 600.0)]
    assert not recorder.outcomes.unresolved
    nowhere = Recorder(pools=())
    reserved_then_admitted(nowhere, 10, 10, checks=())
    assert nowhere.waits == [] and not nowhere.outcomes.unresolved


def test_an_evicted_workload_forgets_its_pods_and_waits_from_its_next_admission() -> None:
    recorder = Recorder()
    reserved_then_admitted(recorder, 10, 10, checks=())
    recorder.pod_running("train-0", 12)
    evicted = admitted(TRAIN, "gpu", "a100", reserved_at=stamp(10), admitted_at=stamp(10))
    evicted["status"]["conditions"].append(condition("Evicted", at=stamp(13)))
    recorder.workload(evicted)
    again = admitted(TRAIN, "gpu", "a100", reserved_at=stamp(20), admitted_at=stamp(20))
    recorder.workload(again)
    recorder.pod_running("train-2", 21)
    assert [kind for _, kind, _, _ in recorder.waits] == ["quota"]  # train-0 ran in the first admission
    recorder.pod_running("train-3", 25)
    assert recorder.waits[-1] == ("a100", "capacity", 1500.0, 300.0)


def test_a_clock_behind_gives_no_negative_wait() -> None:
    recorder = Recorder()
    early = {**TRAIN, "metadata": {**TRAIN["metadata"], "creationTimestamp": stamp(10.5)}}
    recorder.workload(admitted(early, "gpu", "a100", reserved_at=stamp(10), admitted_at=stamp(10)))
    assert recorder.waits == [("a100", "quota", 600.0, 0.0)]


def test_a_malformed_workload_is_named_and_costs_only_its_own_waits(caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder()
    bad = admitted(TRAIN, "gpu", "a100", reserved_at="yesterday", admitted_at=stamp(10))
    with caplog.at_level(logging.WARNING):
        recorder.workload(bad)
    assert recorder.waits == []
    assert "Workload ml/train: status.conditions[QuotaReserved].lastTransitionTime: 'yesterday' is not a timestamp" in (
        caplog.text
    )
    other = {**TRAIN, "metadata": {**TRAIN["metadata"], "uid": "other-uid", "name": "other"}}
    recorder.workload(admitted(other, "gpu", "a100", reserved_at=stamp(1), admitted_at=stamp(1)))
    assert recorder.waits == [("a100", "quota", 60.0, 60.0)]


def test_a_deleted_workload_is_forgotten_and_what_was_recorded_survives_a_restart() -> None:
    recorder = Recorder()
    reserved_then_admitted(recorder, 10, 10, checks=())
    recorder.workload(TRAIN, "DELETED")
    assert not recorder.outcomes.admitted and not recorder.outcomes.owners
    restarted = Recorder()
    restarted.outcomes.restore(recorder.outcomes.document())
    reserved_then_admitted(restarted, 10, 10, checks=())
    assert restarted.waits == []  # its quota wait was recorded before the restart
    with pytest.raises(ValueError, match="quota: not a list of Workload uids"):
        restarted.outcomes.restore({"quota": "wl-uid"})


def test_a_jobsets_capacity_wait_is_found_through_its_child_jobs() -> None:
    """The JobSet owns the Workload and its child Jobs; the pods are the Jobs': the Job watch links them."""
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "train", "uid": "jobset-uid"}
    child = {"metadata": {"name": "train-workers-0", "namespace": "ml", "ownerReferences": [jobset]}}
    recorder = Recorder()
    recorder.outcomes.jobs = {"ml/train-workers-0": child}.get
    owned = {**TRAIN, "metadata": {**TRAIN["metadata"], "ownerReferences": [jobset]}}
    recorder.workload(owned, "ADDED")
    recorder.workload(admitted(owned, "gpu", "a100", reserved_at=stamp(10), admitted_at=stamp(10)))
    for name, minute in (("train-workers-0-0", 12), ("train-workers-0-1", 13)):
        pod = pending_pod(name, gpu_pod_spec(8))
        pod["metadata"] |= {"uid": f"pod-{name}", "ownerReferences": [{"kind": "Job", "name": "train-workers-0",
                                                                         "uid": "child-uid"}]}  # fmt: skip
        started = {"running": {"startedAt": stamp(minute)}}
        pod["status"] = {"phase": "Running", "startTime": stamp(minute), "containerStatuses": [{"state": started}]}
        recorder.outcomes.on_pod_change(WatchCache("pending pods"), WatchEvent("DELETED", pod))
    assert recorder.waits == [("a100", "quota", 600.0, 600.0), ("a100", "capacity", 780.0, 180.0)]
