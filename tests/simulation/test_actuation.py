"""The two actuations: placeholders under the HPA (the default) and a CapacityBuffer written directly.

Each test runs the real engine (HPA arithmetic, cluster, node pool) on a small synthetic workload
whose timeline follows from the model's constants: the lead time, Karpenter's batching, the buffer
controller's requeue, ``consolidateAfter``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from autoscaler.simulation.actuation import (
    BUFFER_RESYNC_OFFSET_S,
    BUFFER_RESYNC_S,
    Actuation,
    buffer_replicas,
    spare_capacity,
)
from autoscaler.simulation.engine import Outcome, Period, run_policy
from autoscaler.simulation.hpa import DEFAULT_TOLERANCE, SYNC_PERIOD_S, HPASpec
from autoscaler.simulation.inputs import Pods, Workload, make_workload
from autoscaler.simulation.lead_times import parse_lead_time_distribution
from autoscaler.simulation.provisioner import BATCH_IDLE_S, PoolConfig

ORIGIN = pd.Timestamp("2024-03-01T00:00:00Z")
STEP_S = 60.0
LEAD_S = 300.0
CONSOLIDATE_AFTER_S = 600.0
POOL = PoolConfig(
    gpus_per_node=8, lead_time=parse_lead_time_distribution("fixed:5m"), consolidate_after_s=CONSOLIDATE_AFTER_S
)
PLACEHOLDERS = Actuation()
BUFFER = Actuation("capacity-buffer")
HOUR = 3600.0


def _workload(hours: float, pods: Pods | None = None, fluid: float = 80.0) -> Workload:
    """``fluid`` GPUs of steady demand (ten full nodes) for ``hours``, and ``pods``."""
    base = np.full(int(hours * HOUR / STEP_S), fluid)
    return make_workload("synthetic", ORIGIN, STEP_S, base, pods or Pods.empty(), ())


def _run(workload: Workload, metric: np.ndarray, actuation: Actuation) -> Outcome:
    return run_policy(workload, metric, Period(0.0, 0.0, workload.end_s), POOL, actuation)


def _capacity_at(outcome: Outcome, moment: float) -> int:
    """Ready GPUs from ``moment`` on (the step function the run recorded)."""
    position = int(np.searchsorted(outcome.capacity_times, moment, side="right")) - 1
    return int(outcome.capacity_values[position])


def _changes(outcome: Outcome) -> list[tuple[float, int]]:
    return list(zip(outcome.capacity_times.tolist(), outcome.capacity_values.astype(int).tolist(), strict=True))


def test_the_default_actuation_is_the_placeholder_hpa():
    actuation = Actuation()
    assert (actuation.kind, actuation.hpa, actuation.buffer) == ("placeholder-hpa", HPASpec(), False)
    # Its spare capacity is the HPA's placeholders after each 15 s sync, one GPU each, and any deficit
    # is a Pending placeholder: no buffer triggers.
    spare = spare_capacity(actuation, np.full(10, 16.0), STEP_S, 0.0, 10 * STEP_S)
    assert (spare.interval, spare.chunk_gpus, spare.triggers) == (SYNC_PERIOD_S, 1, None)
    assert len(spare.replicas) == 10 * STEP_S / SYNC_PERIOD_S
    assert spare.replicas.tolist()[:4] == [4, 8, 16, 16]  # the HPA's scale-up: max(100 %, 4 pods) per sync


def test_buffer_replicas_are_the_headroom_in_whole_chunks():
    headroom = np.array([0.0, 0.5, 4.0, 4.01, math.nan, 9.0, -1.0, math.inf, 0.0])
    # NaN, negative and infinite values are not written: the last written count stays.
    assert buffer_replicas(headroom, 4).tolist() == [0, 1, 1, 2, 2, 3, 3, 3, 0]
    assert buffer_replicas(headroom, 1).tolist() == [0, 1, 4, 5, 5, 9, 9, 9, 0]


def test_buffer_limits_cap_the_virtual_pods_as_the_autoscaler_sizes_them():
    """spec.limits of 18 GPUs on 4-GPU chunks: floor(18 / 4) = 4 chunks at most, whatever is written."""
    headroom = np.array([0.0, 5.0, 16.0, 17.0, 40.0, math.nan])
    assert buffer_replicas(headroom, 4).tolist() == [0, 2, 4, 5, 10, 10]
    assert buffer_replicas(headroom, 4, limit_gpus=18).tolist() == [0, 2, 4, 4, 4, 4]
    assert buffer_replicas(headroom, 4, limit_gpus=3).tolist() == [0] * 6
    metric = np.r_[np.zeros(60), np.full(120, 40.0)]
    capped = spare_capacity(Actuation("capacity-buffer", chunk_gpus=4, limit_gpus=18), metric, STEP_S, 0.0, 3 * HOUR)
    assert capped.gpus.max() == 16


def test_buffer_follows_every_step_where_the_hpa_keeps_its_tolerance_staircase():
    """Headroom 16, then 17, then 15.2 GPUs for an hour each: the buffer writes 16, 17, 16 replicas;
    the HPA keeps 16 placeholders throughout (17/16 and 15.2/16 are within its 10 % tolerance)."""
    metric = np.r_[np.full(60, 16.0), np.full(60, 17.0), np.full(60, 15.2)]
    assert abs(17 / 16 - 1) <= DEFAULT_TOLERANCE and abs(15.2 / 16 - 1) <= DEFAULT_TOLERANCE
    buffer = spare_capacity(BUFFER, metric, STEP_S, 0.0, 3 * HOUR)
    assert buffer.interval == STEP_S and buffer.replicas.tolist() == [math.ceil(value) for value in metric]
    placeholders = spare_capacity(PLACEHOLDERS, metric, STEP_S, 0.0, 3 * HOUR)
    assert set(placeholders.replicas[2:].tolist()) == {16}  # after the first two syncs' ramp

    workload = _workload(3)
    with_buffer, with_placeholders = _run(workload, metric, BUFFER), _run(workload, metric, PLACEHOLDERS)
    assert with_buffer.placeholders.tolist() == buffer.replicas.tolist()
    # The write of 17 at 1 h triggers the provisioner: one more node, Ready after the batch and the lead.
    ready = HOUR + BATCH_IDLE_S + LEAD_S
    assert _capacity_at(with_buffer, ready - 1) == 96 and _capacity_at(with_buffer, ready) == 104
    assert _capacity_at(with_placeholders, ready) == 96
    # The write of 16 at 2 h leaves that node empty; it goes after consolidateAfter.
    assert _capacity_at(with_buffer, 2 * HOUR + CONSOLIDATE_AFTER_S) == 96


def test_nodes_are_launched_for_unmet_virtual_pods_after_the_lead_time():
    metric = np.r_[np.zeros(60), np.full(120, 16.0)]  # a 16-GPU buffer written at 1 h
    outcome = _run(_workload(3), metric, BUFFER)
    # Nothing until the write; then two nodes, launched when the batch closes, Ready a lead time later.
    assert _changes(outcome) == [(0.0, 80), (HOUR + BATCH_IDLE_S + LEAD_S, 96)]
    assert outcome.totals.launches == 2
    assert outcome.totals.short == 0


def test_consolidation_releases_buffer_nodes_after_consolidate_after_without_the_hpa_window():
    metric = np.r_[np.full(120, 16.0), np.zeros(60)]  # the buffer goes to 0 at 2 h
    workload = _workload(3)
    with_buffer, with_placeholders = _run(workload, metric, BUFFER), _run(workload, metric, PLACEHOLDERS)
    # Virtual pods hold their nodes until the write of 0; the emptied nodes go consolidateAfter later.
    assert _changes(with_buffer)[-1] == (2 * HOUR + CONSOLIDATE_AFTER_S, 80)
    assert _capacity_at(with_buffer, 2 * HOUR + CONSOLIDATE_AFTER_S - 1) == 96
    # Placeholders are held by the HPA's 300 s scale-down stabilisation first (less one sync).
    released = _changes(with_placeholders)[-1]
    assert released[1] == 80
    stabilization = HPASpec().scale_down.stabilization_window_seconds
    assert released[0] - (2 * HOUR + CONSOLIDATE_AFTER_S) >= stabilization - SYNC_PERIOD_S


def test_nothing_is_preempted_so_displaced_buffer_capacity_waits_for_the_controllers_next_trigger():
    """A real 8-GPU pod arrives at 1 h 10 s onto a 16-GPU buffer. It starts at once in both cases.
    A placeholder it preempts is Pending at once, so a node launches after the batch; a virtual pod
    is not a pod: no Pending pod, and the buffer's capacity is restored from the buffer controller's
    next requeue (every 30 s), which triggers the provisioner."""
    arrival = HOUR + 10.0
    pods = Pods(np.array([arrival]), np.array([HOUR]), np.array([8]), np.array([False]))
    workload = _workload(3, pods)
    metric = np.full(workload.steps, 16.0)
    with_buffer, with_placeholders = _run(workload, metric, BUFFER), _run(workload, metric, PLACEHOLDERS)
    assert with_buffer.pod_waits.tolist() == [0.0] and with_placeholders.pod_waits.tolist() == [0.0]
    assert _capacity_at(with_placeholders, arrival) == 96  # the pod runs in the buffer's capacity
    assert _capacity_at(with_placeholders, arrival + BATCH_IDLE_S + LEAD_S) == 104
    trigger = math.ceil((arrival - BUFFER_RESYNC_OFFSET_S) / BUFFER_RESYNC_S) * BUFFER_RESYNC_S + BUFFER_RESYNC_OFFSET_S
    assert trigger > arrival
    ready = trigger + BATCH_IDLE_S + LEAD_S
    assert _capacity_at(with_buffer, ready - 1) == 96 and _capacity_at(with_buffer, ready) == 104
    # When the pod ends, its node is empty again (the buffer's 16 GPUs are on the other two), and goes.
    assert _capacity_at(with_buffer, arrival + HOUR + CONSOLIDATE_AFTER_S) == 96


def test_a_chunk_larger_than_a_gpu_is_provisioned_and_held_in_whole_chunks():
    metric = np.r_[np.zeros(60), np.full(120, 9.0)]  # 9 GPUs of headroom: three 4-GPU chunks
    outcome = _run(_workload(3), metric, Actuation("capacity-buffer", chunk_gpus=4))
    assert set(outcome.placeholders[60:].tolist()) == {3}
    assert _changes(outcome) == [(0.0, 80), (HOUR + BATCH_IDLE_S + LEAD_S, 96)]  # 12 GPUs: two nodes


def test_without_headroom_both_actuations_run_alike():
    pods = Pods(np.array([1800.0, 5400.0]), np.array([HOUR, HOUR]), np.array([8, 4]), np.array([False, False]))
    workload = _workload(3, pods)
    metric = np.zeros(workload.steps)
    with_buffer, with_placeholders = _run(workload, metric, BUFFER), _run(workload, metric, PLACEHOLDERS)
    assert with_buffer.totals == with_placeholders.totals
    assert with_buffer.pod_waits.tolist() == with_placeholders.pod_waits.tolist()
    assert with_buffer.pod_waits.tolist() == [BATCH_IDLE_S + LEAD_S] * 2


def test_buffer_triggers_are_its_writes_and_the_controllers_requeues_off_the_step_grid():
    metric = np.r_[np.zeros(2), np.full(3, 4.0), np.full(5, 2.0)]  # writes at 2 and 5 minutes
    spare = spare_capacity(BUFFER, metric, STEP_S, 0.0, 10 * STEP_S)
    assert spare.triggers is not None
    requeues = BUFFER_RESYNC_OFFSET_S + BUFFER_RESYNC_S * np.arange(10 * STEP_S / BUFFER_RESYNC_S)
    writes = np.array([0.0, 2 * STEP_S, 5 * STEP_S])  # the first step writes the buffer too
    assert spare.triggers.tolist() == sorted(set(requeues.tolist()) | set(writes.tolist()))
    assert not set(requeues.tolist()) & set((STEP_S * np.arange(10)).tolist())  # never on a step boundary


def test_the_hpa_reads_each_served_value_as_a_quantity_whatever_repeats() -> None:
    """The placeholders follow the HPA's reading of each step's value (milli-units rounded up, -1 for
    NaN, negatives as 0), read once per distinct value: the same as reading every step."""
    from autoscaler.simulation.hpa import milli_value, placeholder_replicas

    rng = np.random.default_rng(7)
    metric = np.concatenate([rng.normal(20, 10, 300), np.full(30, np.nan), rng.integers(0, 40, 300).astype(float)])
    metric = np.concatenate([metric, [-0.0, 0.0, -3.2, 1e-4, 0.0015, 12.0005]])
    rng.shuffle(metric)
    end = len(metric) * STEP_S
    spare = spare_capacity(PLACEHOLDERS, metric, STEP_S, 0.0, end)
    syncs = SYNC_PERIOD_S * np.arange(math.ceil(end / SYNC_PERIOD_S))
    per_step = np.asarray([-1 if math.isnan(v) else milli_value(max(v, 0.0)) for v in metric.tolist()], dtype=np.int64)
    usage = per_step[np.minimum((syncs // STEP_S).astype(np.int64), len(metric) - 1)]
    expected = placeholder_replicas(syncs, usage, PLACEHOLDERS.hpa)
    assert np.array_equal(spare.replicas, expected)
    assert len(set(expected.tolist())) > 10  # the values moved the placeholders
