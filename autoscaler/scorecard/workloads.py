"""Kueue Workloads' queue waits (docs/scorecard.md), read from the Workload watch and the Pending-pod
watch:

- quota: from the Workload's ``metadata.creationTimestamp`` until its condition ``QuotaReserved``
  turned True (the condition's ``lastTransitionTime``);
- admission check: from then until ``Admitted`` turned True, for a Workload that has admission checks
  (``status.admissionChecks``; without any, Kueue admits it as it reserves quota);
- capacity: from ``Admitted`` until the last of its pods was running (``figures.window_start_delay``),
  as the Pending-pod watch shows them leaving Pending (``pod_outcomes.running_at``). A pod is the
  Workload's when they share an owner (``kueue.pod_links``), as the demand count matches them (a
  JobSet's, through its child Job as the Job watch holds it).

Each is recorded once per Workload, in each pool its GPUs land in (``WorkloadPools``: as the demand
count places an admitted Workload, resolved when its quota is first seen reserved, or at the next
collection while the watches it is resolved from have not listed). A Workload evicted
before its pods all ran forgets the pods seen so far; its capacity wait runs from its latest admission.
The listeners run on the watches' tasks: quick, bounded (``MAX_TRACKED`` Workloads), and a malformed
Workload or pod costs a logged warning naming it and the field, never the watch.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from adapters.kubernetes import kueue, pod_outcomes
from adapters.kubernetes.watch import WatchCache, WatchEvent
from autoscaler.scorecard.figures import window_start_delay
from autoscaler.scorecard.queue_waits import KINDS, QueueWait

log = logging.getLogger(__name__)

MAX_TRACKED = 50_000  # Workloads remembered as counted, and tracked until their pods run, as pods are

# An admitted Workload -> the pools its GPUs land in (none: no GPU, or no pool fits; None: not known
# yet, the watches it is resolved from have not listed).
WorkloadPools = Callable[[Mapping[str, Any]], "Sequence[str] | None"]
# (pool, which wait, when it ended (s since the epoch), seconds)
QueueRecord = Callable[[str, QueueWait, float, float], None]


@dataclass
class _Admitted:
    """A Workload whose quota is reserved and whose capacity wait is not recorded yet."""

    pools: tuple[str, ...]
    pods: int  # how many pods it runs
    admitted_s: float | None = None  # None: not admitted yet
    running: dict[str, float] = field(default_factory=dict)  # pod uid -> when it started running


class WorkloadOutcomes:
    def __init__(self, *, pools: WorkloadPools, record: QueueRecord, jobs: kueue.JobLookup | None = None) -> None:
        self.pools = pools
        self.record = record
        self.jobs = jobs  # the Job watch's Jobs: a JobSet's pods are owned by its child Jobs
        self.owners: dict[str, str] = {}  # an owner's uid (or a pod's own) -> the uid of its Workload
        self.admitted: OrderedDict[str, _Admitted] = OrderedDict()  # Workload uid -> its state
        self.early: OrderedDict[str, dict[str, float]] = OrderedDict()  # pods seen running before the Workload
        self.unresolved: OrderedDict[str, Mapping[str, Any]] = OrderedDict()  # Workloads whose pools are not known yet
        self.recorded: dict[QueueWait, OrderedDict[str, None]] = {kind: OrderedDict() for kind in KINDS}

    def on_workload_change(self, cache: WatchCache, event: WatchEvent | None) -> None:
        if event is None:  # a (re)list: every Workload the cache holds
            self.owners = {}
            workloads: Iterable[Mapping[str, Any]] = list(cache.objects.values())
        elif event.type == "DELETED":
            self._forget(event.object)
            return
        else:
            workloads = (event.object,)
        for workload in workloads:
            self._observe_logged(workload)

    def _observe_logged(self, workload: Mapping[str, Any]) -> None:
        try:
            self.observe(workload)
        except (ValueError, TypeError, AttributeError) as error:
            self.unresolved.pop(_uid(workload), None)
            log.warning(
                "scorecard: Workload %s/%s: %s; its queue waits are not counted",
                kueue.namespace_of(workload), kueue.name_of(workload), error,
            )  # fmt: skip

    def observe(self, workload: Mapping[str, Any]) -> None:
        uid = _uid(workload)
        for owner in kueue.owner_uids(workload):
            self.owners[owner] = uid
        if uid in self.recorded["capacity"]:
            return
        if kueue.has_condition(workload, "Finished"):
            self.admitted.pop(uid, None)
            self.unresolved.pop(uid, None)
            return
        state = self.admitted.get(uid)
        if state is not None and kueue.has_condition(workload, "Evicted"):
            state.running.clear()  # its pods are gone; those of its next admission count
        reserved = _turned_true_at(workload, "QuotaReserved")
        if reserved is None:
            return
        if state is None:
            pools = self.pools(workload)
            if pools is None:  # looked at again at the next collection (``retry``)
                _remember(self.unresolved, uid, workload)
                return
            self.unresolved.pop(uid, None)
            if not pools:  # no GPU, or no pool fits: looked at again at its next change
                return
            state = _Admitted(tuple(pools), _pods(workload), running=self.early.pop(uid, {}))
            _remember(self.admitted, uid, state)
        created = pod_outcomes.timestamp_s((workload.get("metadata") or {}).get("creationTimestamp"),
                                           "metadata.creationTimestamp")  # fmt: skip
        self._once("quota", uid, state.pools, reserved, reserved - created)
        admitted = _turned_true_at(workload, "Admitted")
        if admitted is None:
            return
        if (workload.get("status") or {}).get("admissionChecks"):
            self._once("admission_check", uid, state.pools, admitted, admitted - reserved)
        state.admitted_s = admitted
        self._capacity(uid)

    def retry(self) -> None:
        """Look again at the Workloads whose pools were not known yet (called once a collection)."""
        for workload in list(self.unresolved.values()):
            self._observe_logged(workload)

    def on_pod_change(self, cache: WatchCache, event: WatchEvent | None) -> None:
        """A Pending-pod watch listener: a pod leaving Pending, running, is one of its Workload's."""
        pods = cache.objects.values() if event is None else (event.object,)
        for pod in pods:
            try:
                running = pod_outcomes.running_at(pod)
            except ValueError as error:
                metadata = pod.get("metadata") or {}
                log.warning(
                    "scorecard: pod %s/%s: %s; its Workload's capacity wait is not counted",
                    metadata.get("namespace"), metadata.get("name"), error,
                )  # fmt: skip
                continue
            if running is None:
                continue
            for uid in {self.owners[link] for link in kueue.pod_links(pod, self.jobs) if link in self.owners}:
                if uid in self.recorded["capacity"]:
                    continue
                state = self.admitted.get(uid)
                if state is not None:
                    state.running[pod_outcomes.uid(pod)] = running
                    self._capacity(uid)
                else:  # the Workload's admission not seen yet (the watches are apart)
                    seen = self.early.setdefault(uid, {})
                    seen[pod_outcomes.uid(pod)] = running
                    _remember(self.early, uid, seen)

    def _capacity(self, uid: str) -> None:
        state = self.admitted.get(uid)
        if state is None or state.admitted_s is None or len(state.running) < state.pods:
            return
        running = np.array(list(state.running.values()))
        self._once("capacity", uid, state.pools, float(running.max()), window_start_delay(state.admitted_s, running))
        del self.admitted[uid]

    def _once(self, kind: QueueWait, uid: str, pools: Sequence[str], at_s: float, seconds: float) -> None:
        if uid in self.recorded[kind]:
            return
        _remember(self.recorded[kind], uid, None)
        for pool in pools:
            self.record(pool, kind, at_s, max(0.0, seconds))

    def _forget(self, workload: Mapping[str, Any]) -> None:
        uid = _uid(workload)
        for owner in kueue.owner_uids(workload):
            if self.owners.get(owner) == uid:
                del self.owners[owner]
        self.admitted.pop(uid, None)
        self.early.pop(uid, None)
        self.unresolved.pop(uid, None)

    def document(self) -> dict[str, Any]:
        return {kind: list(uids) for kind, uids in self.recorded.items()}

    def restore(self, document: Mapping[str, Any]) -> None:
        for kind in KINDS:
            values = document.get(kind, [])
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise ValueError(f"{kind}: not a list of Workload uids")
            for value in values[-MAX_TRACKED:]:
                _remember(self.recorded[kind], value, None)


def _uid(workload: Mapping[str, Any]) -> str:
    metadata = workload.get("metadata") or {}
    return str(metadata.get("uid") or f"{metadata.get('namespace')}/{metadata.get('name')}")


def _turned_true_at(workload: Mapping[str, Any], kind: str) -> float | None:
    """When the Workload's condition ``kind`` turned True; None while it is not True."""
    for condition in (workload.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind and condition.get("status") == "True":
            where = f"status.conditions[{kind}].lastTransitionTime"
            return pod_outcomes.timestamp_s(condition.get("lastTransitionTime"), where)
    return None


def _pods(workload: Mapping[str, Any]) -> int:
    """How many pods the admitted Workload runs: its pod sets' admitted counts (else their counts)."""
    admission = (workload.get("status") or {}).get("admission") or {}
    assigned = {str(a.get("name")): a.get("count") for a in admission.get("podSetAssignments") or ()}
    counts = [assigned.get(str(ps.get("name"))) for ps in (workload.get("spec") or {}).get("podSets") or ()]
    pod_sets = (workload.get("spec") or {}).get("podSets") or ()
    return sum(int(ps.get("count", 1) if count is None else count) for ps, count in zip(pod_sets, counts, strict=True))


def _remember(tracked: OrderedDict[str, Any], key: str, value: Any) -> None:
    tracked[key] = value
    tracked.move_to_end(key)
    while len(tracked) > MAX_TRACKED:
        tracked.popitem(last=False)
