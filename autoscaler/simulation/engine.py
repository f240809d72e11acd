"""The time loop for one policy: real demand, the spare capacity asked for, and the node pool.

The spare capacity (placeholders, or a CapacityBuffer's virtual pods: :mod:`.actuation`) depends only
on the served metric and, for placeholders, the HPA's own memory (``status.replicas`` counts Pending
pods too), so it is computed first over the whole run. The cluster then advances from one change to
the next: a demand step, a placeholder or buffer count change, a provisioner trigger (buffers only),
a pod arrival or finish, a node turning Ready, a batch closing, or an empty node reaching
``consolidateAfter``. Nothing changes in between, so totals are integrated exactly over those
intervals.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np

from autoscaler.scorecard.figures import MinuteLedger, integrate_per_minute, window_start_delay
from autoscaler.simulation.actuation import Actuation, SpareCapacity, spare_capacity
from autoscaler.simulation.cluster import ClusterState
from autoscaler.simulation.inputs import Workload
from autoscaler.simulation.pool_set import PoolSet, PoolSetConfig
from autoscaler.simulation.provisioner import NodePool, PoolConfig
from autoscaler.simulation.quota import QuotaPlan, queue_waits


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
    # Placeholders (after each 15 s sync) or buffer replicas (per step), from the period's start.
    placeholders: np.ndarray = field(default_factory=lambda: np.zeros(0))
    seconds: float = 0.0  # wall time of this run (HPA and cluster loops)
    # Short, held and used GPU-seconds per minute, from the cluster's start (the scorecard's ledger:
    # the same definitions as the live service's, autoscaler/scorecard/figures.py).
    # Each declared window's run in the scored period: seconds from its start until all its pods ran.
    window_start_delays: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ledger: MinuteLedger = field(
        default_factory=lambda: MinuteLedger(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0))
    )
    # With several pools (or scarce capacity), per pool over the scored period: held GPU-hours,
    # cost, node launches, failed launches, spot interruptions; and the cost summed over pools.
    pools: dict[str, dict[str, float]] = field(default_factory=dict)
    cost: float | None = None
    # Behind a quota queue, its Workloads' waits in seconds by kind (quota.queue_waits).
    queue_waits: dict[str, np.ndarray] = field(default_factory=dict)

    def scored_ledger(self, period: Period) -> MinuteLedger:
        return self.ledger.between(period.scored_from, period.end)


def run_policy(
    workload: Workload,
    metric: np.ndarray,
    period: Period,
    pool_config: PoolConfig | PoolSetConfig,
    actuation: Actuation,
    quota: QuotaPlan | None = None,
) -> Outcome:
    """Simulate one policy whose served metric (spare GPUs wanted) is ``metric[step]``, actuated by
    placeholders under an HPA or by a CapacityBuffer; the pods behind ``quota``'s queue, if given."""
    started = time.perf_counter()
    first_step = int(period.start // workload.step_s)
    spare = spare_capacity(actuation, metric, workload.step_s, period.start, period.end)
    cluster, pool = _starting_cluster(workload, period, first_step, pool_config, quota)
    cluster.chunk_gpus = spare.chunk_gpus
    scheduled_times = _scheduled_times(workload, period, first_step, spare)
    rates = _Rates()
    if not len(workload.pods) and isinstance(pool, NodePool) and spare.triggers is None:
        totals = _step_through_fluid(workload, period, cluster, pool, spare, scheduled_times, rates)
    else:
        totals = _step_through(workload, period, cluster, pool, spare, scheduled_times, rates)
    capacity_times, capacity_values = rates.capacity()
    pod_waits, window_pod_waits = _scored_pod_waits(workload, period, cluster)
    pools, cost = _pool_figures(pool, period)
    times = (cluster.reserved, cluster.admitted, cluster.started)
    scored = (period.scored_from, period.end)
    return Outcome(
        pools=pools,
        cost=cost,
        queue_waits={} if quota is None else queue_waits(quota, workload.pods.arrival, times, scored),
        ledger=rates.ledger(period),
        window_start_delays=_window_start_delays(workload, period, cluster.started),
        totals=totals,
        pod_waits=pod_waits,
        window_pod_waits=window_pod_waits,
        capacity_times=capacity_times,
        capacity_values=capacity_values,
        placeholders=spare.replicas,
        seconds=time.perf_counter() - started,
    )


@dataclass
class _Rates:
    """Short, held and used GPUs and Ready capacity as step functions: each record holds from its
    time to the next."""

    times: list[float] = field(default_factory=list)
    # Four values per record, one flat list (short, held, used, capacity): a list of tuples took
    # twice as long to make an array of, a tenth of a target's replay.
    values: list[float] = field(default_factory=list)
    _made: np.ndarray | None = field(default=None, init=False, repr=False)

    def _columns(self) -> np.ndarray:
        """The records as an array, made once the run is over (ledger and capacity both read it)."""
        if self._made is None or len(self._made) * 4 != len(self.values):
            self._made = np.asarray(self.values, dtype=np.float64).reshape(-1, 4)
        return self._made

    def ledger(self, period: Period) -> MinuteLedger:
        times = np.asarray(self.times)
        columns = self._columns()
        per_minute = [integrate_per_minute(times, columns[:, index], period.start, period.end) for index in range(3)]
        starts = period.start + np.arange(len(per_minute[0])) * 60.0
        return MinuteLedger(starts, *per_minute)

    def capacity(self) -> tuple[np.ndarray, np.ndarray]:
        """Ready capacity as a step function: the times it changed (the first record's too)."""
        times = np.asarray(self.times)
        capacity = self._columns()[:, 3]
        changed = np.flatnonzero(np.diff(capacity, prepend=np.nan) != 0)
        return times[changed], capacity[changed]


def _pool_figures(pool: NodePool | PoolSet, period: Period) -> tuple[dict[str, dict[str, float]], float | None]:
    """Per pool figures and the cost in money, with several pools; nothing with one plain pool."""
    if isinstance(pool, NodePool):
        return {}, None
    hours = pool.gpu_hours(period.end)
    figures = {
        state.spec.name: {
            "gpu_hours": hours[state.spec.name],
            "cost": hours[state.spec.name] * state.spec.price_per_gpu_hour,
            "node_launches": state.launches,
            "failed_launches": state.failures,
            "spot_interruptions": state.interruptions,
        }
        for state in pool.pools
    }
    return figures, sum(entry["cost"] for entry in figures.values())


def _starting_cluster(
    workload: Workload,
    period: Period,
    first_step: int,
    pool_config: PoolConfig | PoolSetConfig,
    quota: QuotaPlan | None,
) -> tuple[ClusterState, NodePool | PoolSet]:
    """The cluster at ``period.start``: the trace's pods and the fluid demand running on just enough
    Ready nodes for them."""
    cluster = ClusterState(workload.pods, quota)
    cluster.start_running(period.start)
    cluster.fluid_wanted = float(workload.base[first_step])
    cluster.fluid_running = cluster.fluid_wanted
    if isinstance(pool_config, PoolSetConfig):
        config = replace(pool_config, scored_from=period.scored_from)
        return cluster, PoolSet(config, ready_gpus=cluster.real_requested, start=period.start)
    pool = NodePool(pool_config, ready=math.ceil(cluster.real_requested / pool_config.gpus_per_node - 1e-9))
    return cluster, pool


def _scheduled_times(workload: Workload, period: Period, first_step: int, spare: SpareCapacity) -> list[float]:
    """Moments known in advance, in order: fluid demand changes, placeholder or buffer count changes,
    and the buffer controller's provisioner triggers."""
    changed_steps = np.flatnonzero(np.diff(workload.base[first_step:]) != 0) + first_step + 1
    triggers = spare.triggers if spare.triggers is not None else np.zeros(0)
    scheduled = np.unique(np.concatenate([changed_steps * workload.step_s, spare.change_times(), triggers]))
    times: list[float] = scheduled[(scheduled >= period.start) & (scheduled < period.end)].tolist()
    return times


def _step_through(
    workload: Workload,
    period: Period,
    cluster: ClusterState,
    pool: NodePool | PoolSet,
    spare: SpareCapacity,
    scheduled_times: list[float],
    rates: _Rates,
) -> Totals:
    """Advance the cluster from one change to the next until ``period.end``: the scored totals; the
    rates (short, held, used, Ready capacity) from the start, as step functions.

    The hot loop, kept whole: per step it reads only locals and plain lists (not NumPy arrays), and
    calls only builtins and the cluster's and the pool's own methods. Without buffer triggers, any
    deficit is a Pending pod and triggers the provisioner; with them, a trigger or a waiting real pod.
    """
    step_s = workload.step_s
    base_values = workload.base.tolist()
    spare_gpus = spare.gpus.tolist()
    spare_start, spare_interval = spare.start, spare.interval
    triggers = None if spare.triggers is None else set(spare.triggers.tolist())
    totals = Totals()
    position = 0
    now = period.start
    end, scored_from = period.end, period.scored_from
    rate_times, rate_values = rates.times, rates.values
    last_rates = (-1.0, -1.0, -1.0, -1)
    while now < end:
        pool.turn_ready(now)
        cluster.advance(now)
        cluster.fluid_wanted = base_values[min(int(now // step_s), len(base_values) - 1)]
        cluster.placeholders = spare_gpus[min(int((now - spare_start) // spare_interval), len(spare_gpus) - 1)]
        cluster.allocate(now, pool.capacity)
        pool.track_empty(now, cluster.free_gpus(pool.capacity))
        launched_before = pool.launches
        triggered = triggers is None or now in triggers or cluster.real_waiting
        pool.provision(now, cluster.wanted_gpus(), triggered)
        if now >= scored_from:
            totals.launches += pool.launches - launched_before

        while position < len(scheduled_times) and scheduled_times[position] <= now:
            position += 1
        upcoming = scheduled_times[position] if position < len(scheduled_times) else math.inf
        following = min(upcoming, cluster.next_event(), pool.next_event(), end)
        requested, capacity = cluster.real_requested, pool.capacity
        held = float(pool.held_gpus)
        current = (max(0.0, requested - capacity), held, cluster.real_running, capacity)
        if current != last_rates:
            last_rates = current
            rate_times.append(now)
            rate_values.extend(current)
        if following > scored_from:
            span = following - max(now, scored_from)
            totals.demand += requested * span
            totals.provisioned += current[1] * span
            totals.used += current[2] * span
            totals.short += current[0] * span
        now = following
    return totals


def _step_through_fluid(
    workload: Workload,
    period: Period,
    cluster: ClusterState,
    pool: NodePool,
    spare: SpareCapacity,
    scheduled_times: list[float],
    rates: _Rates,
) -> Totals:
    """:func:`_step_through` for fluid demand alone (no pods) in one node pool under placeholders: the
    same moments, state and figures (tests/simulation/test_engine.py compares both), in about half
    the time. A target's replay (autoscaler/simulation/replay.py) runs ~100 of these per choice.

    Without pods, ``ClusterState.allocate`` gives fluid demand the Ready GPUs and placeholders the
    rest, inlined here; the pool's own methods run only when they would change something: a node
    due Ready, the empty nodes' count or a timer due, a batch due or a deficit to batch. So
    ``NodePool.provision`` must do nothing but forget the last deficit when neither is (launches,
    lead times and whatever else a launch draws stay in it)."""
    step_s = workload.step_s
    base_values = workload.base.tolist()
    last_base = len(base_values) - 1
    spare_gpus = spare.gpus.tolist()
    last_spare = len(spare_gpus) - 1
    spare_start, spare_interval = spare.start, spare.interval
    chunk = cluster.chunk_gpus
    gpus_per_node = pool.config.gpus_per_node
    consolidate_after = pool.config.consolidate_after_s
    launching, timers, batch = pool._launching, pool._empty_since, pool._batch
    fluid_running = cluster.fluid_running
    demand = provisioned = used = short = 0.0
    launches = 0
    position, scheduled_count = 0, len(scheduled_times)
    now = period.start
    end, scored_from = period.end, period.scored_from
    rate_times, rate_values = rates.times, rates.values
    last_rates = (-1.0, -1.0, -1.0, -1)
    inf = math.inf
    # The pool's Ready GPUs and held GPUs change only in its methods: read again after each call.
    capacity, held = pool.ready * gpus_per_node, float(pool.held_gpus)
    batched = True  # whether the batch may remember a deficit (BatchWindow.observe forgets it without one)
    while now < end:
        if launching and launching[0] <= now:
            pool.turn_ready(now)
            capacity = pool.ready * gpus_per_node
        index = int(now // step_s)
        fluid_wanted = base_values[index if index < last_base else last_base]  # min(), as _step_through
        index = int((now - spare_start) // spare_interval)
        placeholders = spare_gpus[index if index < last_spare else last_spare]
        # ClusterState.allocate without pods: fluid demand first, then placeholders.
        if fluid_running > fluid_wanted:
            fluid_running = fluid_wanted
        free = capacity - fluid_running
        if free < -1e-9:  # a node was reclaimed: the fluid demand it ran waits again
            fluid_running -= min(fluid_running, -free)
            free = capacity - fluid_running
        fluid_waiting = fluid_wanted - fluid_running
        if fluid_waiting > 1e-9 and free > 0:
            grant = fluid_waiting if fluid_waiting < free else free  # min(), as allocate has it
            fluid_running += grant
            free -= grant
        fitting = chunk * int(free / chunk + 1e-9)
        placeholders_running = placeholders if placeholders < fitting else (fitting if fitting > 0 else 0)
        free_gpus = capacity - fluid_running - placeholders_running
        # timer + after, as NodePool.track_empty and the next moment below sum it: now - after can round
        # below a fractional timer (a drawn lead time's), and the loop would wait for it for ever.
        if len(timers) != int(free_gpus // gpus_per_node + 1e-9) or (timers and timers[0] + consolidate_after <= now):
            pool.track_empty(now, free_gpus)
            capacity, held = pool.ready * gpus_per_node, float(pool.held_gpus)
        if now >= batch.close or fluid_wanted + placeholders > (pool.ready + len(launching)) * gpus_per_node:
            launched_before = pool.launches
            pool.provision(now, fluid_wanted + placeholders)
            held, batched = float(pool.held_gpus), True
            if now >= scored_from:
                launches += pool.launches - launched_before
        elif batched:  # no deficit: BatchWindow.observe forgets the last one
            batch._last_deficit, batched = 0.0, False

        while position < scheduled_count and scheduled_times[position] <= now:
            position += 1
        following = scheduled_times[position] if position < scheduled_count else inf
        if launching and launching[0] < following:
            following = launching[0]
        if batch.close < following:
            following = batch.close
        if timers and timers[0] + consolidate_after < following:
            following = timers[0] + consolidate_after
        if end < following:
            following = end
        lacking = fluid_wanted - capacity
        current = (lacking if lacking > 0.0 else 0.0, held, fluid_running, capacity)  # max(0.0, ...)
        if current != last_rates:
            last_rates = current
            rate_times.append(now)
            rate_values.extend(current)
        if following > scored_from:
            span = following - (now if now > scored_from else scored_from)
            demand += fluid_wanted * span
            provisioned += held * span
            used += fluid_running * span
            short += current[0] * span
        now = following
    cluster.fluid_running = fluid_running
    return Totals(demand, provisioned, used, short, launches)


def _scored_pod_waits(workload: Workload, period: Period, cluster: ClusterState) -> tuple[np.ndarray, np.ndarray]:
    """Seconds each pod arriving in the scored period waited (still waiting: until the end), for the
    trace's pods and for the declared windows' pods: from its creation until it first ran, plus every
    wait after its node was reclaimed. Behind a quota queue a pod is created once admitted; one never
    admitted has no pod, and no wait."""
    pods = workload.pods
    created = cluster.created_s()
    arrived = (pods.arrival >= period.scored_from) & (pods.arrival < period.end) & ~np.isnan(created)
    waits = cluster.started - created
    waits[np.isnan(waits)] = period.end - created[np.isnan(waits)]  # still waiting at the end
    if cluster.evicted_at or cluster.requeued_wait.any():
        waits = waits + cluster.requeued_wait
        for pod, since in cluster.evicted_at.items():  # Pending again at the end
            waits[pod] += period.end - since
    return waits[arrived & ~pods.from_window], waits[arrived & pods.from_window]


def _window_start_delays(workload: Workload, period: Period, started: np.ndarray) -> np.ndarray:
    """Per run of a declared window starting in the scored period: seconds until its last pod ran
    (a window's pods arrive at its scheduled start; one still waiting counts until the end)."""
    pods = workload.pods
    in_window = pods.from_window & (pods.arrival >= period.scored_from) & (pods.arrival < period.end)
    running = np.where(np.isnan(started), period.end, started)
    runs = np.unique(pods.arrival[in_window])
    return np.array(
        [window_start_delay(start, running[in_window & (pods.arrival == start)]) for start in runs], dtype=np.float64
    )
