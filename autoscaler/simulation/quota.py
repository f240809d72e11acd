"""A Kueue ClusterQueue in front of a pod trace (``simulate --quota-gpus``; docs/benchmarks/quota-queue.md).

Each pod of the trace is a Job of one pod, queued by Kueue: its Workload is created at the pod's
arrival and waits for quota; once quota is reserved, for its admission checks (a fixed delay, none by
default); once admitted, Kueue unsuspends the Job and its pod is created, Pending until it runs. The
quota is held from reservation until the pod finishes.

The queue is ``BestEffortFIFO``, Kueue's default and what the live service's count models
(adapters/kubernetes/kueue_demand.py): Workloads in order of creation, a Workload reserved as soon as
its GPUs fit under the nominal quota less what reserved Workloads hold, one that does not fit not
blocking those behind it. No cohort, no borrowing, no preemption, one flavor.

What the policies see (:func:`plan_queue`) is computed before the run, as ``Workload.observed`` is:
pods as if each ran for its duration from the moment it exists, so the queue's reservations under
that assumption (the run itself holds quota until pods really finish, which capacity waits delay).
The service counts a Workload (docs/kueue.md) while it is pending and fits its quota now (never, here:
such a Workload is reserved at once) or reserved with no pod yet (during its admission checks); it
leaves the count when its pod is created, which then counts as a Pending pod.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, replace

import numpy as np

from autoscaler.simulation.inputs import Pods, Workload, pod_levels


@dataclass(frozen=True)
class QuotaSettings:
    """The ClusterQueue: its nominal GPU quota, how long its admission checks take, and whether the
    service's policies count its Workloads (as the live service does with ``inputs.kueue``)."""

    quota_gpus: int
    admission_check_s: float = 0.0
    see_workloads: bool = True

    def __post_init__(self) -> None:
        if self.quota_gpus < 1:
            raise ValueError(f"--quota-gpus must be at least 1, got {self.quota_gpus}")
        if not math.isfinite(self.admission_check_s) or self.admission_check_s < 0:
            raise ValueError(
                f"--admission-check-delay must be a finite duration >= 0, got {self.admission_check_s:g} s"
            )


class QuotaQueue:
    """Workloads waiting for quota, BestEffortFIFO. A Workload is numbered by its creation order and
    asks for a whole number of GPUs; the waiting ones are kept in one FIFO per size, so that choosing
    the next to reserve reads only each size's oldest: the oldest Workload that fits is the one a
    scan in creation order would reserve first (those before it did not fit, and fit less now)."""

    def __init__(self, quota_gpus: int) -> None:
        self.quota_gpus = quota_gpus
        self.reserved_gpus = 0  # held by reserved Workloads (may exceed the quota at a run's start)
        self.waiting = 0
        self._by_size: dict[int, deque[int]] = {}

    def enqueue(self, workload: int, gpus: int) -> None:
        """A Workload created (numbers must increase with creation)."""
        self._by_size.setdefault(gpus, deque()).append(workload)
        self.waiting += 1

    def hold(self, gpus: int) -> None:
        """A Workload reserved before the queue started."""
        self.reserved_gpus += gpus

    def release(self, gpus: int) -> None:
        """A reserved Workload finished."""
        self.reserved_gpus -= gpus

    def reserve(self) -> list[int]:
        """The Workloads reserved now, in order (each fits what the ones before it left)."""
        reserved: list[int] = []
        while self.waiting:
            free = self.quota_gpus - self.reserved_gpus
            size = -1
            for gpus, queued in self._by_size.items():
                if gpus <= free and queued and (size < 0 or queued[0] < self._by_size[size][0]):
                    size = gpus
            if size < 0:
                break
            reserved.append(self._by_size[size].popleft())
            self.reserved_gpus += size
            self.waiting -= 1
        return reserved


@dataclass(frozen=True)
class QuotaPlan:
    """The queue as the policies see it, computed before the run: each pod's planned quota
    reservation (seconds; its pod is created ``admission_check_s`` later), and at each step start
    the GPUs of pods that exist, of the Workloads the service counts, and of those waiting for quota."""

    settings: QuotaSettings
    reserved_s: np.ndarray
    pods_gpus: np.ndarray
    workload_gpus: np.ndarray
    waiting_gpus: np.ndarray

    @property
    def seen_workload_gpus(self) -> np.ndarray | None:
        """The counted Workloads' GPUs per step that the service's policies serve, or None."""
        return self.workload_gpus if self.settings.see_workloads else None


def planned_reservations(pods: Pods, settings: QuotaSettings) -> np.ndarray:
    """When each pod's Workload reserves quota if every pod runs for its duration from creation."""
    arrival, duration, gpus = pods.arrival.tolist(), pods.duration.tolist(), pods.gpus.tolist()
    check_s = settings.admission_check_s
    queue = QuotaQueue(settings.quota_gpus)
    reserved = np.full(len(pods), np.nan)
    finishing: list[tuple[float, int]] = []
    created = 0
    while created < len(arrival) or finishing:
        now = min(arrival[created] if created < len(arrival) else math.inf, finishing[0][0] if finishing else math.inf)
        while finishing and finishing[0][0] <= now:
            queue.release(gpus[heapq.heappop(finishing)[1]])
        while created < len(arrival) and arrival[created] <= now:
            queue.enqueue(created, gpus[created])
            created += 1
        for pod in queue.reserve():
            reserved[pod] = now
            heapq.heappush(finishing, (now + check_s + duration[pod], pod))
    return reserved


def plan_queue(workload: Workload, settings: QuotaSettings) -> tuple[Workload, QuotaPlan]:
    """The workload as monitoring sees it behind the queue (pods from their creation) and the plan."""
    pods = workload.pods
    if len(pods) == 0 or workload.base.any() or workload.windows:
        raise ValueError("--quota-gpus queues the pods of a pod trace (--pods or --unit-pods), without --schedule")
    if int(pods.gpus.max()) > settings.quota_gpus:
        raise ValueError(
            f"--quota-gpus {settings.quota_gpus} is less than a pod's {int(pods.gpus.max())} GPUs: "
            "its Workload could never be admitted"
        )
    reserved = planned_reservations(pods, settings)
    check_s = settings.admission_check_s
    created = replace(pods, arrival=reserved + check_s)
    at_start, peak, trough = pod_levels(created, workload.steps, workload.step_s)
    in_check = replace(pods, arrival=reserved, duration=np.full(len(pods), check_s))
    waiting = replace(pods, arrival=pods.arrival, duration=reserved - pods.arrival)
    plan = QuotaPlan(
        settings=settings,
        reserved_s=reserved,
        pods_gpus=at_start,
        workload_gpus=pod_levels(in_check, workload.steps, workload.step_s)[0],
        waiting_gpus=pod_levels(waiting, workload.steps, workload.step_s)[0],
    )
    seen = replace(
        workload, observed=workload.base + at_start, peak=workload.base + peak, trough=workload.base + trough
    )
    return seen, plan


def queue_waits(
    plan: QuotaPlan, arrival: np.ndarray, times: tuple[np.ndarray, np.ndarray, np.ndarray], scored: tuple[float, float]
) -> dict[str, np.ndarray]:
    """The three waits (autoscaler/scorecard/queue_waits.py's kinds) of the Workloads created in the
    ``scored`` period, each one still running at its end counted until then, as pod waits are:
    ``quota`` from creation to reservation; ``admission_check`` from then to admission, only when the
    queue has checks (the live scorecard records it only for a Workload that has some);
    ``capacity`` from admission until its pod ran."""
    reserved, admitted, started = times
    scored_from, end = scored
    created = (arrival >= scored_from) & (arrival < end)

    def until(start: np.ndarray, stop: np.ndarray, among: np.ndarray) -> np.ndarray:
        return np.asarray(np.where(np.isnan(stop[among]), end, stop[among]) - start[among], dtype=np.float64)

    waits = {
        "quota": until(arrival, reserved, created),
        "admission_check": until(reserved, admitted, created & ~np.isnan(reserved)),
        "capacity": until(admitted, started, created & ~np.isnan(admitted)),
    }
    if plan.settings.admission_check_s == 0:  # the queue has no check: nothing recorded
        waits["admission_check"] = np.zeros(0)
    return waits
