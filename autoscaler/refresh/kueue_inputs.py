"""GPU demand waiting in Kueue's queues (docs/kueue.md), as the refresher serves it: one window per
pod set counted (``adapters.kubernetes.kueue_demand``), open from now, in the pool it lands in.

A Workload leaves the count once its pods exist: from the first event of the Pending-pod watch that
shows one of them (it counts there) for as long as Kueue keeps the Workload admitted (its pods
then run), or once Kueue says ``PodsReady`` (pods that ran before the service started). Kueue's Workloads, LocalQueues,
ClusterQueues and ResourceFlavors are each watched in every namespace; where Kueue is not installed
the watches are absent and nothing is counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from kubernetes_asyncio.client import ApiClient

from adapters.gpu_units import GpuUnits
from adapters.kubernetes import kueue
from adapters.kubernetes.dra_claims import ClaimLookup
from adapters.kubernetes.kueue_demand import KueueState, QueuedGpus, admitted_pools, queued_gpus, started_workloads
from adapters.kubernetes.pool_matching import NodePool
from adapters.kubernetes.watch import OnChange, WatchCache, WatchEvent, WatchGroup
from adapters.types import NODEPOOL_LABEL, QUEUED_SOURCE, ScheduledWindow


class KueueInputs:
    """The Kueue watches, and the Workloads they count."""

    def __init__(self, units: GpuUnits, default_duration: timedelta) -> None:
        self.units = units
        self.default_duration = default_duration  # a window's length, when the Workload sets no maximum
        self.caches: dict[str, WatchCache] = {}
        self._started: set[str] = set()  # uids of admitted Workloads whose pods were seen
        self._workload_listeners: list[OnChange] = []  # told of every change of a Workload (queue waits)
        # The Job watch's Jobs, through which a JobSet's pods (owned by its child Jobs) find its Workload.
        self.jobs: kueue.JobLookup | None = None

    def start(self, group: WatchGroup, api: ApiClient) -> None:
        for plural in kueue.PLURALS:
            changed = self._workload_changed if plural == kueue.WORKLOADS else None
            self.caches[plural] = group.start(kueue.kueue_resource(api, plural), on_change=changed)

    def _workload_changed(self, cache: WatchCache, event: WatchEvent | None) -> None:
        for listener in self._workload_listeners:
            listener(cache, event)

    def add_workload_listener(self, listener: OnChange) -> None:
        """Tell ``listener`` of every change of a Workload, and of the Workloads listed already, if any."""
        self._workload_listeners.append(listener)
        cache = self.caches.get(kueue.WORKLOADS)
        if cache is not None and cache.synced:
            listener(cache, None)

    def state(self) -> KueueState:
        """What the Kueue watches hold now."""
        return KueueState(
            workloads=self._objects(kueue.WORKLOADS),
            local_queues=self._objects(kueue.LOCAL_QUEUES),
            cluster_queues=self._objects(kueue.CLUSTER_QUEUES),
            flavors=self._objects(kueue.RESOURCE_FLAVORS),
            admission_checks=self._objects(kueue.ADMISSION_CHECKS),
        )

    def workload_pools(
        self, workload: Mapping[str, Any], nodepools: Sequence[NodePool] | None, claims: ClaimLookup | None
    ) -> list[str] | None:
        """The pools an admitted Workload's GPUs land in, as the demand count places them; None while the
        ResourceFlavors are not listed yet."""
        flavors = self.caches.get(kueue.RESOURCE_FLAVORS)
        if flavors is not None and not (flavors.synced or flavors.absent):
            return None
        return admitted_pools(workload, self.state(), self.units, nodepools, claims)

    def on_pod_change(self, cache: WatchCache, event: WatchEvent | None) -> None:
        """A Pending-pod watch listener: remember the Workloads whose pods it shows."""
        pods = cache.objects.values() if event is None else [event.object]
        self._started |= started_workloads(self._objects(kueue.WORKLOADS).values(), pods, self.jobs)

    def _objects(self, plural: str) -> Mapping[str, Mapping[str, Any]]:
        cache = self.caches.get(plural)
        return cache.objects if cache is not None else {}

    def queued(
        self,
        pending_pods: Iterable[Mapping[str, Any]],
        nodepools: Sequence[NodePool] | None,
        claims: ClaimLookup | None,
    ) -> list[QueuedGpus]:
        """The pod sets counted now, given the Pending pods the pod watch holds."""
        state = self.state()
        return queued_gpus(state, self._pods_started(state, pending_pods), self.units, nodepools, claims)

    def waiting(
        self,
        pending_pods: Iterable[Mapping[str, Any]],
        nodepools: Sequence[NodePool] | None,
        claims: ClaimLookup | None,
    ) -> dict[str, float]:
        """GPUs of the Workloads waiting with no pod yet per pool, whatever their quota ("" for those
        that fit no pool): the uncensored demand, a series of its own (docs/kueue.md)."""
        state = self.state()
        started = self._pods_started(state, pending_pods)
        gpus: dict[str, float] = {}
        for item in queued_gpus(state, started, self.units, nodepools, claims, uncensored=True):
            pool = item.choice.pool or ""
            gpus[pool] = gpus.get(pool, 0.0) + item.gpus
        return gpus

    def _pods_started(
        self, state: KueueState, pending_pods: Iterable[Mapping[str, Any]]
    ) -> Callable[[Mapping[str, Any]], bool]:
        """Whether a Workload's pods exist: seen by the pod watch while Kueue keeps it admitted, or
        ``PodsReady``."""
        reserved = {
            str((w.get("metadata") or {}).get("uid"))
            for w in state.workloads.values()
            if (w.get("status") or {}).get("admission") and kueue.has_condition(w, "QuotaReserved")
        }
        started = started_workloads(state.workloads.values(), pending_pods, self.jobs)
        self._started = (self._started | started) & reserved

        def pods_started(workload: Mapping[str, Any]) -> bool:
            uid = str((workload.get("metadata") or {}).get("uid"))
            return uid in self._started or kueue.has_condition(workload, "PodsReady")

        return pods_started

    def windows(self, now: datetime, counted: Sequence[QueuedGpus]) -> list[ScheduledWindow]:
        """Each counted pod set as a window open from ``now`` in its pool (none: the pool-less series)."""
        found: list[ScheduledWindow] = []
        for item in counted:
            workload = self._objects(kueue.WORKLOADS).get(f"{item.namespace}/{item.name}") or {}
            limit = (workload.get("spec") or {}).get("maximumExecutionTimeSeconds")
            duration = timedelta(seconds=int(limit)) if limit else self.default_duration
            labels = {NODEPOOL_LABEL: item.choice.pool} if item.choice.pool else {}
            found.append(
                ScheduledWindow(
                    source=QUEUED_SOURCE,
                    namespace=item.namespace,
                    name=item.name,
                    start=now,
                    end=now + duration,
                    gpus=item.gpus,
                    labels=labels,
                    duration_source="maximumExecutionTimeSeconds" if limit else "setting",
                    placement=item.describe(),
                )
            )
        return found

    def health(self) -> dict[str, str]:
        checks: dict[str, str] = {}
        for cache in self.caches.values():
            state = "absent" if cache.absent else ("synced" if cache.synced else "syncing")
            checks[f"watch {cache.kind}"] = state + (f" (last error: {cache.last_error})" if cache.last_error else "")
        return checks
