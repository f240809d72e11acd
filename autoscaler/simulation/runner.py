"""Run every policy over one workload, optionally in a process pool.

The forecasting policies' reselection periods and every policy's cluster run are independent jobs
(the ``auto:Q`` policies share their blocks: one selection serves every quantile); a policy's
cluster run starts once its served metric is complete.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autoscaler.simulation.engine import Outcome, Period, run_policy
from autoscaler.simulation.forecasting import (
    BlockResult,
    ForecastCadence,
    forecast_groups,
    plan_blocks,
    run_block,
)
from autoscaler.simulation.hpa import HPASpec
from autoscaler.simulation.inputs import Workload
from autoscaler.simulation.lead_times import LeadTimeDistribution
from autoscaler.simulation.policies import ORACLE_LEAD_QUANTILE, Planning, PolicySpec, heuristic_headroom
from autoscaler.simulation.provisioner import BATCH_MAX_S, PoolConfig
from autoscaler.workers import single_threaded_libraries

# The cluster runs this long before scoring starts, so that every policy enters the scored period
# in its own steady state (placeholders ramped up, nodes launched) rather than in a shared cold start.
SETTLE_S = 3600.0

ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True)
class SimulationConfig:
    gpus_per_node: int
    lead_time_s: float  # what the policies are told nodes take
    lead_margin_s: float  # the service adds this to its lead time (auto plans for lead + margin)
    warmup_s: float
    lead_distribution: LeadTimeDistribution  # what nodes really take
    consolidate_after_s: float
    cadence: ForecastCadence
    hpa: HPASpec = field(default_factory=HPASpec)
    seed: int = 0


@dataclass
class PolicyRun:
    spec: PolicySpec
    outcome: Outcome
    metric: np.ndarray
    models: Counter[str] = field(default_factory=Counter)
    fit_seconds: list[float] = field(default_factory=list)
    forecast_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


@dataclass
class SimulationResult:
    workload: Workload
    period: Period
    config: SimulationConfig
    runs: dict[str, PolicyRun]
    seconds: float


def simulation_period(workload: Workload, warmup_s: float) -> Period:
    """Scoring starts after the warm-up (on a whole step); the cluster starts up to an hour earlier."""
    scored_from = math.ceil(warmup_s / workload.step_s) * workload.step_s
    if scored_from >= workload.end_s:
        raise ValueError(
            f"--warmup ({warmup_s:g} s) covers the whole input ({workload.end_s:g} s): nothing is left to score"
        )
    start = max(0.0, math.floor((scored_from - SETTLE_S) / workload.step_s) * workload.step_s)
    return Period(start=start, scored_from=scored_from, end=workload.end_s)


def _pool_config(config: SimulationConfig) -> PoolConfig:
    return PoolConfig(
        gpus_per_node=config.gpus_per_node,
        lead_time=config.lead_distribution,
        consolidate_after_s=config.consolidate_after_s,
        seed=config.seed,
    )


def _planning(workload: Workload, period: Period, config: SimulationConfig) -> Planning:
    return Planning(
        first_step=int(period.start // workload.step_s),
        lead_s=config.lead_time_s + config.lead_margin_s,
        oracle_lead_s=config.lead_distribution.quantile(ORACLE_LEAD_QUANTILE),
        batch_max_s=BATCH_MAX_S,
        tolerance=config.hpa.tolerance,
    )


Tag = tuple[str, str]  # (job kind, policy text)


class _Jobs:
    """Submitted jobs and their results as they complete: in a process pool, or one by one here."""

    def __init__(self, workers: int) -> None:
        self._pool = (
            ProcessPoolExecutor(max_workers=workers, initializer=single_threaded_libraries) if workers > 1 else None
        )
        self._futures: dict[Future[Any], Tag] = {}
        self._queued: deque[tuple[Tag, Callable[..., Any], tuple[Any, ...]]] = deque()

    def submit(self, tag: Tag, function: Callable[..., Any], *args: Any) -> None:
        if self._pool is None:
            self._queued.append((tag, function, args))
        else:
            self._futures[self._pool.submit(function, *args)] = tag

    def __bool__(self) -> bool:
        return bool(self._futures or self._queued)

    def next_completed(self) -> list[tuple[Tag, Any]]:
        if self._pool is None:
            tag, function, args = self._queued.popleft()
            return [(tag, function(*args))]
        finished, _ = wait(list(self._futures), return_when=FIRST_COMPLETED)
        return [(self._futures.pop(future), future.result()) for future in finished]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)


def simulate(
    workload: Workload,
    specs: Sequence[PolicySpec],
    config: SimulationConfig,
    *,
    workers: int = 1,
    progress: ProgressCallback | None = None,
) -> SimulationResult:
    """Simulate every policy; ``workers > 1`` runs jobs in that many processes."""
    started = time.perf_counter()
    period = simulation_period(workload, config.warmup_s)
    planning = _planning(workload, period, config)
    pool_config = _pool_config(config)
    first_step = planning.first_step
    groups = {group[0].text: group for group in forecast_groups(specs)}
    blocks = {key: plan_blocks(group, workload, first_step, config.cadence) for key, group in groups.items()}
    total = len(specs) + sum(len(jobs) for jobs in blocks.values())
    metrics: dict[str, np.ndarray] = {}
    block_results: dict[str, list[BlockResult]] = {spec.text: [] for group in groups.values() for spec in group}
    blocks_done: Counter[str] = Counter()
    outcomes: dict[str, Outcome] = {}
    by_text = {spec.text: spec for spec in specs}
    jobs = _Jobs(workers)
    try:
        # Heuristics' cluster runs first: they are ready now, and the forecasting policies' runs wait
        # for all their blocks anyway.
        for spec in specs:
            if not spec.forecasting:
                metric = metrics[spec.text] = heuristic_headroom(spec, workload, planning)
                jobs.submit(("cluster", spec.text), run_policy, workload, metric, period, pool_config, config.hpa)
        for key, group in groups.items():
            for spec in group:
                metrics[spec.text] = np.zeros(workload.steps)
            for job in blocks[key]:
                jobs.submit(("block", key), run_block, job)
        done = 0
        while jobs:
            for (kind, key), value in jobs.next_completed():
                done += 1
                if progress is not None:
                    progress(done, total)
                if kind == "cluster":
                    outcomes[key] = value
                    continue
                results: list[BlockResult] = value
                for block in results:
                    metrics[block.spec_text][block.first_step : block.first_step + len(block.values)] = block.values
                    block_results[block.spec_text].append(block)
                blocks_done[key] += 1
                if blocks_done[key] == len(blocks[key]):  # the group's served metrics are complete
                    for spec in groups[key]:
                        metric = metrics[spec.text]
                        cluster_args = (workload, metric, period, pool_config, config.hpa)
                        jobs.submit(("cluster", spec.text), run_policy, *cluster_args)
    finally:
        jobs.close()
    runs = {}
    for spec in specs:
        run = PolicyRun(spec=by_text[spec.text], outcome=outcomes[spec.text], metric=metrics[spec.text])
        for block in sorted(block_results.get(spec.text, []), key=lambda block: block.first_step):
            run.models.update(block.models)
            run.fit_seconds.extend(block.fit_seconds)
            run.forecast_seconds += block.forecast_seconds
            run.notes.extend(block.notes)
        runs[spec.text] = run
    return SimulationResult(workload, period, config, runs, time.perf_counter() - started)
