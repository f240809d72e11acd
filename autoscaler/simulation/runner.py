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

from autoscaler.refresh.workers import start_simulation_worker
from autoscaler.simulation.actuation import Actuation
from autoscaler.simulation.engine import Outcome, Period, run_policy
from autoscaler.simulation.forecasting import (
    BlockResult,
    ForecastCadence,
    forecast_groups,
    plan_blocks,
    run_block,
)
from autoscaler.simulation.inputs import Workload
from autoscaler.simulation.lead_times import LeadTimeDistribution
from autoscaler.simulation.policies import ORACLE_LEAD_QUANTILE, Planning, PolicySpec, heuristic_headroom, parse_policy
from autoscaler.simulation.pool_set import PoolSetConfig
from autoscaler.simulation.pools import PoolSpec, Scarcity
from autoscaler.simulation.provisioner import BATCH_MAX_S, PoolConfig
from autoscaler.simulation.quota import QuotaPlan, QuotaSettings, plan_queue
from autoscaler.simulation.sweeps import rolling_max_settings, static_buffer_settings, sweep_until_past
from autoscaler.simulation.tuning import (
    DAY_S,
    Choice,
    TuningSettings,
    candidate_texts,
    choice_rules,
    stitched_metric,
    walk_forward,
)
from forecast.types import ProgressCallback

# The cluster runs this long before scoring starts, so that every policy enters the scored period
# in its own steady state (placeholders ramped up, nodes launched) rather than in a shared cold start.
SETTLE_S = 3600.0


@dataclass(frozen=True)
class SimulationConfig:
    gpus_per_node: int
    lead_time_s: float  # what the policies are told nodes take
    lead_margin_s: float  # the service adds this to its lead time (auto plans for lead + margin)
    warmup_s: float
    lead_distribution: LeadTimeDistribution  # what nodes really take
    consolidate_after_s: float
    cadence: ForecastCadence
    actuation: Actuation = field(default_factory=Actuation)
    seed: int = 0
    tuning: TuningSettings = field(default_factory=TuningSettings)
    pools: tuple[PoolSpec, ...] | None = None  # in weight order; None: the one plain pool above
    scarcity: Scarcity = field(default_factory=Scarcity)
    quota: QuotaSettings | None = None  # a Kueue ClusterQueue in front of the pods


@dataclass
class PolicyRun:
    spec: PolicySpec
    outcome: Outcome
    metric: np.ndarray
    models: Counter[str] = field(default_factory=Counter)
    fit_seconds: list[float] = field(default_factory=list)
    forecast_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    choices: list[Choice] = field(default_factory=list)  # a tuned policy's walk-forward choices


@dataclass
class SimulationResult:
    workload: Workload
    period: Period
    config: SimulationConfig
    runs: dict[str, PolicyRun]
    seconds: float
    # ``static_buffer:N`` for N = 0, 1, 2, ... (with ``sweep_static``) and ``reactive_max:W`` for
    # W = 5m, 10m, ... (with ``sweep_rolling_max``), each up to the first past the costliest ``auto``:
    # the operators' heuristics at every setting, not only the ones given.
    static_sweep: dict[str, Outcome] = field(default_factory=dict)
    rolling_max_sweep: dict[str, Outcome] = field(default_factory=dict)
    quota: QuotaPlan | None = None  # the quota queue as the policies saw it


def simulation_period(workload: Workload, warmup_s: float, settle_s: float = SETTLE_S) -> Period:
    """Scoring starts after the warm-up (on a whole step); the cluster starts up to ``settle_s`` earlier."""
    scored_from = math.ceil(warmup_s / workload.step_s) * workload.step_s
    if scored_from >= workload.end_s:
        raise ValueError(
            f"--warmup ({warmup_s:g} s) covers the whole input ({workload.end_s:g} s): nothing is left to score"
        )
    start = max(0.0, math.floor((scored_from - settle_s) / workload.step_s) * workload.step_s)
    return Period(start=start, scored_from=scored_from, end=workload.end_s)


def _pool_config(config: SimulationConfig) -> PoolConfig | PoolSetConfig:
    if config.pools is not None:
        return PoolSetConfig(config.pools, config.scarcity, config.consolidate_after_s, seed=config.seed)
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
        # The oracle scales its headroom past the HPA's scale-up tolerance (the count settles as low
        # as usage / (1 + it)); a buffer has none.
        tolerance=0.0 if config.actuation.buffer else config.actuation.hpa.tolerance.scale_up,
    )


Tag = tuple[str, str]  # (job kind, policy text)


class _Jobs:
    """Submitted jobs and their results as they complete: in a process pool, or one by one here."""

    def __init__(self, workers: int) -> None:
        self._pool = (
            ProcessPoolExecutor(max_workers=workers, initializer=start_simulation_worker) if workers > 1 else None
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


@dataclass(frozen=True)
class _ClusterRuns:
    """What every policy's cluster run shares: only the served metric differs from one to the next."""

    workload: Workload
    period: Period
    pool_config: PoolConfig | PoolSetConfig
    actuation: Actuation
    quota: QuotaPlan | None = None

    def submit(self, jobs: _Jobs, tag: Tag, metric: np.ndarray) -> None:
        jobs.submit(tag, run_policy, self.workload, metric, self.period, self.pool_config, self.actuation, self.quota)


class _PolicyJobs:
    """The given policies' jobs, and what they produced, by policy text.

    A heuristic's cluster run can start at once; a forecasting group's cluster runs start when all
    the group's blocks have filled in its served metrics.
    """

    def __init__(
        self, specs: Sequence[PolicySpec], cluster_runs: _ClusterRuns, planning: Planning, cadence: ForecastCadence
    ) -> None:
        self._specs = specs
        self._cluster_runs = cluster_runs
        self._planning = planning
        workload, quota = cluster_runs.workload, cluster_runs.quota
        self._groups = {group[0].text: group for group in forecast_groups(specs)}
        seen = None if quota is None else quota.seen_workload_gpus  # Kueue Workloads the service counts
        self._blocks = {
            key: plan_blocks(group, workload, planning.first_step, cadence, seen) for key, group in self._groups.items()
        }
        self.total = len(specs) + sum(len(block_jobs) for block_jobs in self._blocks.values())
        self.done = 0
        self.metrics: dict[str, np.ndarray] = {}
        self.outcomes: dict[str, Outcome] = {}
        self._block_results: dict[str, list[BlockResult]] = {
            spec.text: [] for group in self._groups.values() for spec in group
        }
        self._blocks_done: Counter[str] = Counter()

    def run(self, jobs: _Jobs, progress: ProgressCallback | None) -> None:
        """Submit the jobs that can start, and take results (submitting what they make ready) until
        every job is done."""
        workload = self._cluster_runs.workload
        # Heuristics' cluster runs first: they are ready now, and the forecasting policies' runs wait
        # for all their blocks anyway.
        for spec in self._specs:
            if not spec.forecasting:
                metric = self.metrics[spec.text] = heuristic_headroom(spec, workload, self._planning)
                self._cluster_runs.submit(jobs, ("cluster", spec.text), metric)
        for key, group in self._groups.items():
            for spec in group:
                self.metrics[spec.text] = np.zeros(workload.steps)
            for job in self._blocks[key]:
                jobs.submit(("block", key), run_block, job)
        while jobs:
            for (kind, key), value in jobs.next_completed():
                self.done += 1
                if progress is not None:
                    progress(self.done, self.total)
                if kind == "cluster":
                    self.outcomes[key] = value
                else:
                    self._take_blocks(jobs, key, value)

    def _take_blocks(self, jobs: _Jobs, key: str, results: list[BlockResult]) -> None:
        """One block job's served values into its group's metrics; the last one starts the group's
        cluster runs."""
        for block in results:
            self.metrics[block.spec_text][block.first_step : block.first_step + len(block.values)] = block.values
            self._block_results[block.spec_text].append(block)
        self._blocks_done[key] += 1
        if self._blocks_done[key] == len(self._blocks[key]):  # the group's served metrics are complete
            for spec in self._groups[key]:
                self._cluster_runs.submit(jobs, ("cluster", spec.text), self.metrics[spec.text])

    def policy_runs(self) -> dict[str, PolicyRun]:
        """Each policy's run, with its forecasting blocks' figures added up in time order."""
        by_text = {spec.text: spec for spec in self._specs}
        runs = {}
        for spec in self._specs:
            run = PolicyRun(spec=by_text[spec.text], outcome=self.outcomes[spec.text], metric=self.metrics[spec.text])
            for block in sorted(self._block_results.get(spec.text, []), key=lambda block: block.first_step):
                run.models.update(block.models)
                run.fit_seconds.extend(block.fit_seconds)
                run.forecast_seconds += block.forecast_seconds
                run.notes.extend(block.notes)
            runs[spec.text] = run
        return runs


class _SweepBatches:
    """Runs a sweep's batches of heuristics as cluster runs, after the policies' jobs.

    The progress bar goes on from the policies' jobs; an open-ended sweep's total is what is known so far.
    """

    def __init__(
        self,
        jobs: _Jobs,
        cluster_runs: _ClusterRuns,
        planning: Planning,
        policy_jobs: _PolicyJobs,
        progress: ProgressCallback | None,
    ) -> None:
        self._jobs = jobs
        self._cluster_runs = cluster_runs
        self._planning = planning
        self._progress = progress
        self._done, self._total = policy_jobs.done, policy_jobs.total

    def __call__(self, texts: Sequence[str]) -> dict[str, Outcome]:
        for text in texts:
            metric = heuristic_headroom(parse_policy(text), self._cluster_runs.workload, self._planning)
            self._cluster_runs.submit(self._jobs, ("sweep", text), metric)
        self._total += len(texts)
        outcomes: dict[str, Outcome] = {}
        while self._jobs:
            for (_, text), outcome in self._jobs.next_completed():
                outcomes[text] = outcome
                self._done += 1
                if self._progress is not None:
                    self._progress(self._done, self._total)
        return outcomes


def simulate(
    workload: Workload,
    specs: Sequence[PolicySpec],
    config: SimulationConfig,
    *,
    workers: int = 1,
    progress: ProgressCallback | None = None,
    sweep_static: bool = False,
    sweep_rolling_max: bool = False,
) -> SimulationResult:
    """Simulate every policy; ``workers > 1`` runs jobs in that many processes.

    ``sweep_static`` then runs ``static_buffer:N`` for every whole N from 0, and ``sweep_rolling_max``
    ``reactive_max:W`` for W = 5m, 10m, 15m, ..., each in batches of ``workers`` until one provisions
    more GPU-hours than the costliest ``auto:Q`` policy (every setting an operator could have chosen).

    Tuned policies (``auto-slo:T``, ``static_buffer@T``, ``reactive_max@T``) run their candidates
    first, each through the whole run, then serve the walk-forward choices among them (:mod:`.tuning`);
    the cluster then settles a day before scoring, so the first decision has a day of the past.
    """
    started = time.perf_counter()
    workload, quota = (workload, None) if config.quota is None else plan_queue(workload, config.quota)
    tuned = [spec for spec in specs if spec.tuned]
    period = simulation_period(workload, config.warmup_s, DAY_S if tuned else SETTLE_S)
    planning = _planning(workload, period, config)
    cluster_runs = _ClusterRuns(workload, period, _pool_config(config), config.actuation, quota)
    peak_demand, windows = (float(workload.peak.max()) if workload.steps else 0.0), bool(workload.windows)
    candidates = {spec.text: candidate_texts(spec.name, peak_demand, config.gpus_per_node, windows) for spec in tuned}
    plain = [spec for spec in specs if not spec.tuned]
    given = {spec.text for spec in plain}
    hidden_autos = sorted({text for texts in candidates.values() for text in texts if text.startswith("auto:")} - given)
    policy_jobs = _PolicyJobs(
        [*plain, *(parse_policy(text) for text in hidden_autos)], cluster_runs, planning, config.cadence
    )
    jobs = _Jobs(workers)
    static: dict[str, Outcome] = {}
    rolling: dict[str, Outcome] = {}
    tuned_runs: dict[str, PolicyRun] = {}
    try:
        policy_jobs.run(jobs, progress)
        batches = _SweepBatches(jobs, cluster_runs, planning, policy_jobs, progress)
        if tuned:
            tuned_runs = _run_tuned(tuned, candidates, policy_jobs, batches, jobs, cluster_runs, planning, config)
        autos = [policy_jobs.outcomes[spec.text].totals.provisioned for spec in plain if spec.name == "auto"]
        autos += [run.outcome.totals.provisioned for run in tuned_runs.values() if run.spec.name == "auto-slo"]
        if sweep_static and autos:
            buffers = static_buffer_settings(max(autos), period.end - period.scored_from, config.gpus_per_node)
            static = sweep_until_past(buffers, batches, max(autos), workers)
        if sweep_rolling_max and autos:
            rolling = sweep_until_past(rolling_max_settings(workload.end_s), batches, max(autos), workers)
    finally:
        jobs.close()
    every_run = policy_jobs.policy_runs()
    runs = {spec.text: tuned_runs[spec.text] if spec.tuned else every_run[spec.text] for spec in specs}
    seconds = time.perf_counter() - started
    return SimulationResult(workload, period, config, runs, seconds, static, rolling, quota)


def _run_tuned(
    tuned: Sequence[PolicySpec],
    candidates: dict[str, list[str]],
    policy_jobs: _PolicyJobs,
    batches: _SweepBatches,
    jobs: _Jobs,
    cluster_runs: _ClusterRuns,
    planning: Planning,
    config: SimulationConfig,
) -> dict[str, PolicyRun]:
    """Each tuned policy: its candidates' runs (those not run yet), the walk-forward choices among
    them, and the run of the metric those choices serve."""
    workload, period = cluster_runs.workload, cluster_runs.period
    outcomes = dict(policy_jobs.outcomes)
    missing = sorted({text for texts in candidates.values() for text in texts} - set(outcomes))
    outcomes.update(batches(missing))
    served: dict[str, tuple[PolicySpec, list[Choice], np.ndarray]] = {}
    for spec in tuned:
        if spec.target is None:
            continue
        ledgers = {text: outcomes[text].ledger for text in candidates[spec.text]}
        choices = walk_forward(
            ledgers,
            spec.target,
            period.scored_from,
            period.end,
            config.tuning,
            calibrate=spec.name == "auto-slo",
            history_from_s=period.start,
            window_starts=workload.window_starts_s(),
            **choice_rules(spec.name, list(ledgers), bool(workload.windows), config.actuation),
        )
        metrics = {
            choice.candidate: _candidate_metric(choice.candidate, policy_jobs, planning, workload) for choice in choices
        }
        served[spec.text] = (spec, choices, stitched_metric(choices, metrics, workload.step_s, planning.first_step))
        cluster_runs.submit(jobs, ("tuned", spec.text), served[spec.text][2])
    runs: dict[str, PolicyRun] = {}
    while jobs:
        for (_, text), outcome in jobs.next_completed():
            spec, choices, metric = served[text]
            runs[text] = PolicyRun(spec=spec, outcome=outcome, metric=metric, choices=choices)
    return runs


def _candidate_metric(text: str, policy_jobs: _PolicyJobs, planning: Planning, workload: Workload) -> np.ndarray:
    """A candidate's served metric: a forecasting policy's from its blocks, a heuristic's computed."""
    metric = policy_jobs.metrics.get(text)
    return metric if metric is not None else heuristic_headroom(parse_policy(text), workload, planning)
