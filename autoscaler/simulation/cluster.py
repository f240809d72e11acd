"""Who holds the Ready GPUs: real pods first, placeholders in whatever is left.

Placeholders have a negative priority, so a real pod that does not fit preempts them at once (a
``pause`` container exits immediately); a placeholder only holds capacity. A CapacityBuffer's virtual
pods are counted the same way (``placeholders`` in GPUs, whole chunks of ``chunk_gpus``): they hold
no GPU a real pod wants, only free Ready GPUs, which keeps those nodes from counting as empty. Real work is served in
arrival order (the scheduler's queue orders equal priorities by arrival) with backfill: a pod that
does not fit does not block a later one that does. Fluid demand (a CSV series) is one queue entry
that has waited since it first went unserved; at equal arrival times it goes first. Behind a quota
queue (:mod:`.quota`) a pod is created only once its Workload is admitted.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from autoscaler.simulation.inputs import Pods
from autoscaler.simulation.quota import QuotaPlan, QuotaQueue


class ClusterState:
    """Real demand (fluid and pods), placeholders, and how much of each runs on the Ready GPUs."""

    def __init__(self, pods: Pods, quota: QuotaPlan | None = None) -> None:
        self.pods = pods
        self._arrival = pods.arrival.tolist()  # when each pod arrives (its Workload is created, with a queue)
        self._created = list(self._arrival)  # when each pod exists (its Workload admitted, with a queue)
        self._duration = pods.duration.tolist()
        self._gpus = pods.gpus.tolist()
        self.started = np.full(len(pods), np.nan)
        self.fluid_wanted = 0.0
        self.fluid_running = 0.0
        self._fluid_waiting_since = math.inf
        self.pods_requested = 0  # GPUs of arrived pods that have not finished (Pending or running)
        self.pods_running = 0
        self._pending: deque[int] = deque()
        self._finishing: list[tuple[float, int]] = []  # heap of (finish time, pod)
        self._next_arrival = 0
        self.placeholders = 0  # GPUs of placeholders or virtual pods wanted
        self.placeholders_running = 0  # of them, GPUs on Ready nodes
        self.chunk_gpus = 1  # GPUs of one placeholder or virtual pod
        # Pods Pending again after their node was reclaimed: since when; and every such wait, per pod.
        self.evicted_at: dict[int, float] = {}
        self.requeued_wait = np.zeros(len(pods))
        # The quota queue: Workloads reserved, admitted after their checks (in time order), and when.
        self.quota = quota
        self.queue = None if quota is None else QuotaQueue(quota.settings.quota_gpus)
        self._admitting: deque[tuple[float, int]] = deque()
        self.reserved = np.full(len(pods), np.nan)
        self.admitted = np.full(len(pods), np.nan)

    # -- events ----------------------------------------------------------------------------------

    def next_event(self) -> float:
        """The next pod arrival (its Workload's creation, with a queue), admission or finish."""
        arrival = self._arrival[self._next_arrival] if self._next_arrival < len(self._arrival) else math.inf
        finish = self._finishing[0][0] if self._finishing else math.inf
        admission = self._admitting[0][0] if self._admitting else math.inf
        return min(arrival, finish, admission)

    def start_running(self, now: float) -> None:
        """Pods that arrived before ``now`` and would still run are running at ``now`` (the state the
        trace shows at the simulation's start), with their remaining time. Behind a quota queue, its
        state at ``now`` as planned: Workloads waiting, in their checks, or running."""
        admitting: list[tuple[float, int]] = []
        while self._next_arrival < len(self._arrival) and self._arrival[self._next_arrival] < now:
            pod = self._next_arrival
            self._next_arrival += 1
            created = self._arrival[pod]
            if self.queue is not None and self.quota is not None:
                reserved = float(self.quota.reserved_s[pod])
                if not reserved < now:
                    self.queue.enqueue(pod, self._gpus[pod])
                    continue
                created = reserved + self.quota.settings.admission_check_s
                if created + self._duration[pod] > now:
                    self.queue.hold(self._gpus[pod])
                    self.reserved[pod] = reserved
                    if created > now:
                        admitting.append((created, pod))
                        continue
                    self.admitted[pod] = self._created[pod] = created
            finish = created + self._duration[pod]
            if finish > now:
                self.started[pod] = created
                self.pods_requested += self._gpus[pod]
                self.pods_running += self._gpus[pod]
                heapq.heappush(self._finishing, (finish, pod))
        self._admitting.extend(sorted(admitting))

    def advance(self, now: float) -> None:
        """Apply pod finishes and arrivals up to ``now``."""
        while self._finishing and self._finishing[0][0] <= now:
            _, pod = heapq.heappop(self._finishing)
            self.pods_requested -= self._gpus[pod]
            self.pods_running -= self._gpus[pod]
            if self.queue is not None:
                self.queue.release(self._gpus[pod])
        if self.queue is not None:
            self._queue(now)
            return
        while self._next_arrival < len(self._arrival) and self._arrival[self._next_arrival] <= now:
            self._pending.append(self._next_arrival)
            self.pods_requested += self._gpus[self._next_arrival]
            self._next_arrival += 1

    def _queue(self, now: float) -> None:
        """Workloads created up to ``now`` join the quota queue; those that fit are reserved, and
        those whose checks are over admitted: their pods are created, Pending."""
        queue, quota = self.queue, self.quota
        if queue is None or quota is None:
            return
        while self._next_arrival < len(self._arrival) and self._arrival[self._next_arrival] <= now:
            queue.enqueue(self._next_arrival, self._gpus[self._next_arrival])
            self._next_arrival += 1
        for pod in queue.reserve():
            self.reserved[pod] = now
            self._admitting.append((now + quota.settings.admission_check_s, pod))
        while self._admitting and self._admitting[0][0] <= now:
            at, pod = self._admitting.popleft()
            self.admitted[pod] = self._created[pod] = at
            self._pending.append(pod)
            self.pods_requested += self._gpus[pod]

    # -- allocation ------------------------------------------------------------------------------

    @property
    def real_requested(self) -> float:
        return self.fluid_wanted + self.pods_requested

    @property
    def real_running(self) -> float:
        return self.fluid_running + self.pods_running

    def allocate(self, now: float, capacity: float) -> None:
        """Give the Ready GPUs to waiting real work in arrival order, then to placeholders."""
        if self.fluid_running > self.fluid_wanted:  # fluid demand fell: those GPUs are released
            self.fluid_running = self.fluid_wanted
        free = capacity - self.fluid_running - self.pods_running  # placeholders do not count: preempted
        if free < -1e-9:  # a node was reclaimed
            self._evict(now, -free)
            free = capacity - self.fluid_running - self.pods_running
        fluid_waiting = self.fluid_wanted - self.fluid_running
        if fluid_waiting > 1e-9 and self._fluid_waiting_since == math.inf:
            self._fluid_waiting_since = now
        if self._pending and free > 0:
            still_pending: deque[int] = deque()
            for pod in self._pending:
                if fluid_waiting > 1e-9 and self._fluid_waiting_since <= self._created[pod] and free > 0:
                    grant = min(fluid_waiting, free)
                    self.fluid_running += grant
                    fluid_waiting -= grant
                    free -= grant
                gpus = self._gpus[pod]
                if gpus <= free + 1e-9:
                    free -= gpus
                    self.pods_running += gpus
                    if self.evicted_at and pod in self.evicted_at:
                        self.requeued_wait[pod] += now - self.evicted_at.pop(pod)
                    else:
                        self.started[pod] = now
                    heapq.heappush(self._finishing, (now + self._duration[pod], pod))
                else:
                    still_pending.append(pod)
            self._pending = still_pending
        if fluid_waiting > 1e-9 and free > 0:
            grant = min(fluid_waiting, free)
            self.fluid_running += grant
            fluid_waiting -= grant
            free -= grant
        if fluid_waiting <= 1e-9:
            self._fluid_waiting_since = math.inf
        chunk = self.chunk_gpus
        self.placeholders_running = min(self.placeholders, max(0, chunk * int(free / chunk + 1e-9)))

    def _evict(self, now: float, excess: float) -> None:
        """Ready GPUs fell below what runs: fluid demand first, then the pods finishing last, are
        Pending again (in their arrival order in the queue); a pod keeps the time it had left."""
        grant = min(self.fluid_running, excess)
        self.fluid_running -= grant
        excess -= grant
        if excess <= 1e-9:
            return
        victims: list[int] = []
        running = sorted(self._finishing, reverse=True)
        while running and excess > 1e-9:
            finish, pod = running.pop(0)
            victims.append(pod)
            self._duration[pod] = finish - now
            self.pods_running -= self._gpus[pod]
            excess -= self._gpus[pod]
            self.evicted_at[pod] = now
        heapq.heapify(running)
        self._finishing = running
        self._pending = deque(sorted([*self._pending, *victims], key=lambda pod: (self._created[pod], pod)))

    def created_s(self) -> np.ndarray:
        """When each pod was created (NaN: its Workload was never admitted)."""
        if self.queue is None:
            return self.pods.arrival
        return self.admitted

    @property
    def real_waiting(self) -> bool:
        """Whether real work waits for capacity (a Pending pod, or fluid demand unserved)."""
        return bool(self._pending) or self.fluid_wanted - self.fluid_running > 1e-9

    def free_gpus(self, capacity: float) -> float:
        """Ready GPUs held by nobody, not even a placeholder."""
        return capacity - self.real_running - self.placeholders_running

    def wanted_gpus(self) -> float:
        """GPUs requested by every pod that exists, Pending or running (what Karpenter provisions for)."""
        return self.real_requested + self.placeholders
