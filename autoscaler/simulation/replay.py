"""The controller model run for the live service: each level's recorded headroom replayed against the
demand that followed, through the same placeholder HPA and node pool as ``simulate``.

A metric with a service-level target (autoscaler/targets/target_levels.py) chooses its level on these
ledgers; this runs in a worker process, once per series every ``tune_every``, and sends them back
compactly (:class:`autoscaler.targets.candidate_ledgers.CandidateLedger`, one array of minute
starts for all).
"""

from __future__ import annotations

import pandas as pd

from autoscaler.scorecard.figures import MinuteLedger
from autoscaler.simulation.actuation import Actuation
from autoscaler.simulation.engine import Period, run_policy
from autoscaler.simulation.hpa import HPASpec, Tolerance
from autoscaler.simulation.inputs import Pods, make_workload
from autoscaler.simulation.lead_times import LeadTimeDistribution, empirical_distribution
from autoscaler.simulation.pool_set import PoolSetConfig
from autoscaler.simulation.pools import Scarcity, single_pool
from autoscaler.simulation.provisioner import PoolConfig
from autoscaler.targets.candidate_ledgers import CandidateLedger
from autoscaler.targets.service_levels import ReplayRequest

_ORIGIN = pd.Timestamp("2000-01-01T00:00:00Z")  # replays count seconds from the record's start


def replay_levels(request: ReplayRequest) -> dict[str, CandidateLedger]:
    """Each level's short and held GPU-seconds per minute (seconds from the record's start) when its
    headroom was served, compactly (what a target's choice reads).

    Demand is fluid: the GPUs requested at each step, Pending pods included, as the record holds them.
    The placeholder HPA has the request's tolerances (the shipped manifests' by default). Draws
    (lead times, failed launches) come from a generator seeded alike for every level: the same
    request replays the same way.
    """
    ledgers: dict[str, CandidateLedger] = {}
    starts = None  # every run's minutes are the period's: one array for all
    for level, ledger in replay_ledgers(request).items():
        starts = ledger.starts if starts is None else starts
        ledgers[level] = CandidateLedger.of_ledger(ledger, starts)
    return ledgers


def replay_ledgers(request: ReplayRequest) -> dict[str, MinuteLedger]:
    """Each level's whole minute ledger, GPUs used included (the demo's pool is scored on it)."""
    steps = len(request.requested)
    if steps == 0:
        raise ValueError("the record is empty: nothing to replay")
    for level, headroom in request.headroom.items():
        if len(headroom) != steps:
            raise ValueError(f"level {level}: {len(headroom)} headroom values for {steps} steps of demand")
    workload = make_workload("record", _ORIGIN, request.step_s, request.requested.astype(float), Pods.empty(), ())
    period = Period(start=0.0, scored_from=0.0, end=steps * request.step_s)
    pool = replayed_pool(request)
    hpa = HPASpec(tolerance=Tolerance(request.hpa_tolerance_up, request.hpa_tolerance_down))
    return {
        level: run_policy(workload, headroom.astype(float), period, pool, Actuation(hpa=hpa)).ledger
        for level, headroom in request.headroom.items()
    }


def replayed_pool(request: ReplayRequest) -> PoolConfig | PoolSetConfig:
    """The request's node pool: the fixed lead time, or the learned lead times and, when launches
    failed, the simulator's scarce pool (a failed launch holds nothing and is retried by the next
    batch: the time retries lost is in the learned lead times already)."""
    learned = request.launches
    if learned is None:
        fixed = LeadTimeDistribution("fixed", request.lead_time_s, text=f"fixed:{request.lead_time_s:g}s")
        return PoolConfig(request.gpus_per_node, fixed, request.consolidate_after_s)
    lead_time = empirical_distribution(learned.lead_times_s)
    if learned.failure_rate <= 0:
        return PoolConfig(request.gpus_per_node, lead_time, request.consolidate_after_s)
    pools = single_pool(request.gpus_per_node, lead_time, spot=False, price=None)
    return PoolSetConfig(pools, Scarcity(launch_failure_rate=learned.failure_rate), request.consolidate_after_s)
