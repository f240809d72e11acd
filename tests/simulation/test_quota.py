"""The quota queue in front of a pod trace (``simulate --quota-gpus``): FIFO, the quota bound, what
the service sees, and each Workload's waits, exactly, on a hand-made pod list."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from autoscaler.simulation.cluster import ClusterState
from autoscaler.simulation.forecasting import ForecastCadence, plan_blocks, serve_decision
from autoscaler.simulation.inputs import Pods, make_workload
from autoscaler.simulation.lead_times import parse_lead_time_distribution
from autoscaler.simulation.policies import parse_policies, parse_policy
from autoscaler.simulation.quota import QuotaQueue, QuotaSettings, plan_queue, planned_reservations
from autoscaler.simulation.runner import SimulationConfig, simulate
from forecast.types import Forecast

ORIGIN = pd.Timestamp("2024-03-01T00:00:00Z")
# Arrival, duration and GPUs of four Jobs of one pod, and two late ones: a 4-GPU quota holds the first
# alone; when it finishes the 3-GPU one is reserved, the 2-GPU one behind it does not fit what is
# left, the 1-GPU one behind that does (BestEffortFIFO); the 2-GPU one goes when the 3-GPU one ends.
# The fifth comes long after, the sixth 50 s before the trace ends (120 minutes: 7,200 s).
ARRIVAL = [60.0, 120.0, 180.0, 240.0, 6000.0, 7150.0]
DURATION = [1000.0, 600.0, 600.0, 600.0, 60.0, 60.0]
GPUS = [4, 3, 2, 1, 1, 1]


def _pods(arrival=ARRIVAL, duration=DURATION, gpus=GPUS) -> Pods:
    return Pods(
        np.asarray(arrival, dtype=np.float64),
        np.asarray(duration, dtype=np.float64),
        np.asarray(gpus, dtype=np.int64),
        np.zeros(len(arrival), dtype=bool),
    )


def test_queue_is_fifo_and_lets_what_fits_pass():
    queue = QuotaQueue(4)
    for workload, gpus in enumerate([3, 2, 1, 1]):
        queue.enqueue(workload, gpus)
    assert queue.reserve() == [0, 2]  # 2 GPUs do not fit in the 1 left; the 1-GPU one behind does
    assert queue.reserved_gpus == 4 and queue.waiting == 2
    assert queue.reserve() == []  # nothing fits a full quota
    queue.release(3)
    assert queue.reserve() == [1, 3]  # in creation order: the 2-GPU one first, then the 1-GPU one
    assert queue.reserved_gpus == 4 and queue.waiting == 0


def test_quota_is_never_exceeded_and_every_workload_is_reserved():
    rng = np.random.default_rng(3)
    pods = _pods(np.sort(rng.uniform(0, 20_000, 300)), rng.uniform(10, 2_000, 300), rng.choice([1, 2, 8], 300))
    settings = QuotaSettings(10, admission_check_s=30.0)
    reserved = planned_reservations(pods, settings)
    assert not np.isnan(reserved).any() and (reserved >= pods.arrival).all()
    # Reserved from reservation until the pod, created after the checks, has run its duration.
    held = [(at, +int(g)) for at, g in zip(reserved, pods.gpus, strict=True)]
    held += [(at + 30.0 + d, -int(g)) for at, d, g in zip(reserved, pods.duration, pods.gpus, strict=True)]
    level = np.cumsum([change for _, change in sorted(held, key=lambda event: (event[0], event[1]))])
    assert level.max() == 10  # the quota is used up at times, never exceeded
    assert (np.diff(reserved[pods.gpus == 1]) >= 0).all()  # Workloads of one size go in creation order


def test_planned_queue_and_what_the_service_sees():
    pods = _pods()
    workload = make_workload("hand-made", ORIGIN, 60.0, np.zeros(120), pods, ())
    plain = QuotaSettings(4)
    assert planned_reservations(pods, plain).tolist() == [60.0, 1060.0, 1660.0, 1060.0, 6000.0, 7150.0]
    seen, plan = plan_queue(workload, QuotaSettings(4, admission_check_s=120.0, see_workloads=True))
    # Quota is held from reservation through the checks and the pod's run: 1,180 = 60 + 120 + 1,000.
    assert plan.reserved_s.tolist() == [60.0, 1180.0, 1900.0, 1180.0, 6000.0, 7150.0]
    # The Workloads counted, at each minute: reserved, in their checks, no pod yet (the first at 60-180 s).
    assert plan.workload_gpus[:4].tolist() == [0.0, 4.0, 4.0, 0.0]
    assert plan.workload_gpus[19:23].tolist() == [0.0, 4.0, 4.0, 0.0]  # the 3- and 1-GPU ones at 1,180-1,300 s
    assert plan.seen_workload_gpus is plan.workload_gpus
    # Pods exist from admission: monitoring sees the first one's 4 GPUs from 180 s, not from 60 s.
    assert seen.observed[:4].tolist() == [0.0, 0.0, 0.0, 4.0]
    assert plan.waiting_gpus[4] == 6.0  # at 240 s the 3-, 2- and 1-GPU Workloads wait for quota
    assert plan_queue(workload, QuotaSettings(4, see_workloads=False))[1].seen_workload_gpus is None
    assert plan_queue(workload, QuotaSettings(4, see_workloads=False))[1].seen_workload_gpus is None


def test_bad_queues_are_refused():
    workload = make_workload("hand-made", ORIGIN, 60.0, np.zeros(120), _pods(), ())
    with pytest.raises(ValueError, match="--quota-gpus 3 is less than a pod's 4 GPUs"):
        plan_queue(workload, QuotaSettings(3))
    with pytest.raises(ValueError, match="--quota-gpus must be at least 1"):
        QuotaSettings(0)
    with pytest.raises(ValueError, match="--admission-check-delay"):
        QuotaSettings(4, admission_check_s=-1.0)
    fluid = make_workload("fluid", ORIGIN, 60.0, np.full(120, 3.0), Pods.empty(), ())
    with pytest.raises(ValueError, match="queues the pods of a pod trace"):
        plan_queue(fluid, QuotaSettings(4))


def _simulate(check_s: float) -> dict:
    workload = make_workload("hand-made", ORIGIN, 60.0, np.zeros(120), _pods(), ())
    config = SimulationConfig(
        gpus_per_node=4,
        lead_time_s=300.0,
        lead_margin_s=0.0,
        warmup_s=0.0,
        lead_distribution=parse_lead_time_distribution("fixed:5m"),
        consolidate_after_s=600.0,
        cadence=ForecastCadence(),
        quota=QuotaSettings(4, admission_check_s=check_s),
    )
    result = simulate(workload, parse_policies("reactive"), config)
    return result.runs["reactive"].outcome.queue_waits


def test_waits_are_exact_without_checks():
    waits = _simulate(0.0)
    # The first Workload is reserved and admitted at once; its pod waits for a node: the 1 s batch
    # and the 300 s lead time. The others wait for its quota (until 1,361 s: 60 + 301 + 1,000), then
    # run at once on its node; the 2-GPU one waits for the 3-GPU one to end (1,961 s). The fifth
    # arrives after the node was consolidated and waits for a new one; the sixth still waits at the end.
    assert waits["quota"].tolist() == [0.0, 1241.0, 1781.0, 1121.0, 0.0, 0.0]
    assert waits["admission_check"].tolist() == []  # no check: none recorded, as the live scorecard
    assert waits["capacity"].tolist() == [301.0, 0.0, 0.0, 0.0, 301.0, 50.0]


def test_waits_are_exact_with_a_check():
    waits = _simulate(120.0)
    # Every Workload is admitted 120 s after its quota, which it holds from reservation: the first
    # finishes at 1,481 s (60 + 120 + 301 + 1,000), the 3- and 1-GPU ones at 2,201 s. The sixth is
    # still in its checks when the trace ends: it has no pod, and no capacity wait.
    assert waits["quota"].tolist() == [0.0, 1361.0, 2021.0, 1241.0, 0.0, 0.0]
    assert waits["admission_check"].tolist() == [120.0, 120.0, 120.0, 120.0, 120.0, 50.0]
    assert waits["capacity"].tolist() == [301.0, 0.0, 0.0, 0.0, 301.0]


def test_a_run_starts_from_the_planned_queue():
    """At the cluster's start, Workloads reserved before it run (or are in their checks) and hold
    quota; those not yet reserved wait, in creation order."""
    pods = _pods()
    workload = make_workload("hand-made", ORIGIN, 60.0, np.zeros(120), pods, ())
    _, plan = plan_queue(workload, QuotaSettings(4, admission_check_s=120.0))
    cluster = ClusterState(pods, plan)
    cluster.start_running(1000.0)  # the first runs (admitted at 180 s); the next three wait for its quota
    assert cluster.started[0] == 180.0 and cluster.pods_running == 4
    assert cluster.queue is not None and cluster.queue.reserved_gpus == 4 and cluster.queue.waiting == 3
    assert cluster.next_event() == 1180.0  # the first finishes
    cluster.advance(1180.0)
    assert np.isnan(cluster.reserved[2])  # 2 GPUs do not fit the 0 left
    assert cluster.reserved[[1, 3]].tolist() == [1180.0, 1180.0] and cluster.pods_requested == 0
    assert cluster.next_event() == 1300.0  # their admission, after the checks
    cluster.advance(1300.0)
    assert cluster.admitted[[1, 3]].tolist() == [1300.0, 1300.0] and cluster.pods_requested == 4


def test_only_auto_serves_the_workloads_it_sees():
    workload = make_workload("hand-made", ORIGIN, 60.0, np.zeros(120), _pods(), ())
    queued = np.arange(120, dtype=np.float64)
    cadence = ForecastCadence(reselect_every_s=3600.0)
    auto = plan_blocks((parse_policy("auto:0.9"),), workload, 0, cadence, queued)
    assert [job.queued.tolist() for job in auto if job.queued is not None] == [list(range(60)), list(range(60, 120))]
    holt_winters = plan_blocks((parse_policy("holt_winters"),), workload, 0, cadence, queued)
    assert all(job.queued is None for job in holt_winters)


def test_auto_serves_the_counted_workloads_as_the_refresher_does():
    """``auto:Q`` adds the counted Workloads' GPUs to the demand it serves, through ``policy.decide``
    (a window open from now), and its headroom rises by as many."""
    workload = make_workload("hand-made", ORIGIN, 60.0, np.zeros(120), _pods(), ())
    job = plan_blocks((parse_policy("auto:0.9"),), workload, 0, ForecastCadence(), np.full(120, 16.0))[0]
    now = ORIGIN + pd.Timedelta(minutes=30)
    stamps = pd.date_range(now, periods=3, freq="5min")
    forecast = Forecast("test", stamps, np.full(3, 9.0), {0.9: np.array([10.0, 12.0, 11.0])})
    alone = serve_decision(job, job.specs[0], forecast, now, last_observed=10.0)
    queued = serve_decision(job, job.specs[0], forecast, now, last_observed=10.0, queued=16.0)
    assert (alone.value, queued.value) == (2.0, 18.0)
    assert "plus queued simulation/queued (16 GPUs)" in queued.explanation
