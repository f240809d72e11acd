"""The time loop for one policy: HPA syncs, real demand, placeholders, and the node pool.

The placeholder count depends only on the served metric and the HPA's own memory (``status.replicas``
counts Pending pods too), so the HPA runs first over every 15 s sync. The cluster then advances from
one change to the next: a demand step, a placeholder count change, a pod arrival or finish, a node
turning Ready, a batch closing, or an empty node reaching ``consolidateAfter``. Nothing changes in
between, so totals are integrated exactly over those intervals.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from autoscaler.simulation.cluster import ClusterState
from autoscaler.simulation.hpa import SYNC_PERIOD_S, HPASpec, milli_value, placeholder_replicas
from autoscaler.simulation.inputs import Workload
from autoscaler.simulation.provisioner import NodePool, PoolConfig


@dataclass(frozen=True)
class Period:
    """Seconds since the workload's origin: the cluster runs from ``start``; totals count from
    ``scored_from`` to ``end``."""

    start: float
    scored_from: float
    end: float


@dataclass
class Totals:
    """GPU-seconds over the scored period, and node launches in it."""

    demand: float = 0.0
    provisioned: float = 0.0
    used: float = 0.0
    short: float = 0.0
    launches: int = 0


@dataclass
class Outcome:
    """What one policy's run produced."""

    totals: Totals
    pod_waits: np.ndarray  # seconds, for pods arriving in the scored period (still waiting: until the end)
    window_pod_waits: np.ndarray
    capacity_times: np.ndarray  # Ready GPUs, as a step function: from each time on
    capacity_values: np.ndarray
    placeholders: np.ndarray = field(default_factory=lambda: np.zeros(0))
    seconds: float = 0.0  # wall time of this run (HPA and cluster loops)


def sync_times(period: Period) -> np.ndarray:
    count = math.ceil((period.end - period.start) / SYNC_PERIOD_S)
    return period.start + SYNC_PERIOD_S * np.arange(count)


def run_policy(
    workload: Workload, metric: np.ndarray, period: Period, pool_config: PoolConfig, hpa: HPASpec
) -> Outcome:
    """Simulate one policy whose served metric (placeholder GPUs wanted) is ``metric[step]``."""
    started = time.perf_counter()
    syncs = sync_times(period)
    first_step = int(period.start // workload.step_s)
    replicas = _placeholder_replicas(workload, metric, syncs, first_step, hpa)
    cluster, pool = _starting_cluster(workload, period, first_step, pool_config)
    scheduled_times = _scheduled_times(workload, period, first_step, syncs, replicas)
    totals, capacity_times, capacity_values = _step_through(workload, period, cluster, pool, replicas, scheduled_times)
    pod_waits, window_pod_waits = _scored_pod_waits(workload, period, cluster.started)
    return Outcome(
        totals=totals,
        pod_waits=pod_waits,
        window_pod_waits=window_pod_waits,
        capacity_times=np.asarray(capacity_times),
        capacity_values=np.asarray(capacity_values, dtype=np.float64),
        placeholders=replicas,
        seconds=time.perf_counter() - started,
    )


def _placeholder_replicas(
    workload: Workload, metric: np.ndarray, syncs: np.ndarray, first_step: int, hpa: HPASpec
) -> np.ndarray:
    """The placeholder Deployment's replicas after each sync, as the HPA scales it on ``metric``."""
    # The served value as the HPA reads it (a quantity in milli-units, rounded up), once per step;
    # NaN is a metric the HPA cannot read (-1).
    served = np.asarray(
        [-1 if math.isnan(value) else milli_value(max(value, 0.0)) for value in metric[first_step:].tolist()],
        dtype=np.int64,
    )
    usage = served[np.minimum((syncs // workload.step_s).astype(np.int64), workload.steps - 1) - first_step]
    return placeholder_replicas(syncs, usage, hpa)


def _starting_cluster(
    workload: Workload, period: Period, first_step: int, pool_config: PoolConfig
) -> tuple[ClusterState, NodePool]:
    """The cluster at ``period.start``: the trace's pods and the fluid demand running on just enough
    Ready nodes for them."""
    cluster = ClusterState(workload.pods)
    cluster.start_running(period.start)
    cluster.fluid_wanted = float(workload.base[first_step])
    cluster.fluid_running = cluster.fluid_wanted
    pool = NodePool(pool_config, ready=math.ceil(cluster.real_requested / pool_config.gpus_per_node - 1e-9))
    return cluster, pool


def _scheduled_times(
    workload: Workload, period: Period, first_step: int, syncs: np.ndarray, replicas: np.ndarray
) -> list[float]:
    """Moments known in advance, in order: fluid demand changes and placeholder count changes."""
    changed_steps = np.flatnonzero(np.diff(workload.base[first_step:]) != 0) + first_step + 1
    changed_syncs = np.flatnonzero(np.diff(replicas, prepend=-1) != 0)
    scheduled = np.unique(np.concatenate([changed_steps * workload.step_s, syncs[changed_syncs]]))
    times: list[float] = scheduled[(scheduled >= period.start) & (scheduled < period.end)].tolist()
    return times


def _step_through(
    workload: Workload,
    period: Period,
    cluster: ClusterState,
    pool: NodePool,
    replicas: np.ndarray,
    scheduled_times: list[float],
) -> tuple[Totals, list[float], list[int]]:
    """Advance the cluster from one change to the next until ``period.end``: the scored totals, and
    Ready capacity as a step function (times it changed, GPUs from then on).

    The hot loop, kept whole: per step it reads only locals and plain lists (not NumPy arrays), and
    calls only builtins and the cluster's and the pool's own methods.
    """
    step_s = workload.step_s
    gpus_per_node = pool.config.gpus_per_node
    base_values = workload.base.tolist()
    replica_values = replicas.tolist()
    totals = Totals()
    capacity_times: list[float] = [period.start]
    capacity_values: list[int] = [pool.capacity]
    position = 0
    now = period.start
    end, scored_from = period.end, period.scored_from
    while now < end:
        pool.turn_ready(now)
        cluster.advance(now)
        cluster.fluid_wanted = base_values[min(int(now // step_s), len(base_values) - 1)]
        cluster.placeholders = replica_values[min(int((now - period.start) // SYNC_PERIOD_S), len(replica_values) - 1)]
        cluster.allocate(now, pool.capacity)
        pool.track_empty(now, cluster.free_gpus(pool.capacity))
        launched_before = pool.launches
        pool.provision(now, cluster.wanted_gpus())
        if now >= scored_from:
            totals.launches += pool.launches - launched_before
        if pool.capacity != capacity_values[-1]:
            capacity_times.append(now)
            capacity_values.append(pool.capacity)

        while position < len(scheduled_times) and scheduled_times[position] <= now:
            position += 1
        upcoming = scheduled_times[position] if position < len(scheduled_times) else math.inf
        following = min(upcoming, cluster.next_event(), pool.next_event(), end)
        if following > scored_from:
            span = following - max(now, scored_from)
            requested = cluster.real_requested
            totals.demand += requested * span
            totals.provisioned += (pool.ready + pool.launching) * gpus_per_node * span
            totals.used += cluster.real_running * span
            totals.short += max(0.0, requested - pool.capacity) * span
        now = following
    return totals, capacity_times, capacity_values


def _scored_pod_waits(workload: Workload, period: Period, started: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Seconds each pod arriving in the scored period waited (still waiting: until the end), for the
    trace's pods and for the declared windows' pods."""
    pods = workload.pods
    arrived = (pods.arrival >= period.scored_from) & (pods.arrival < period.end)
    waits = started - pods.arrival
    waits[np.isnan(waits)] = period.end - pods.arrival[np.isnan(waits)]  # still waiting at the end
    return waits[arrived & ~pods.from_window], waits[arrived & pods.from_window]
