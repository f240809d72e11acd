"""The forecasting policies, replayed on the cadence the service uses.

``auto:Q`` is this service's policy. Every ``reselect_every`` it runs a full selection and fit
(``fit_select_many``: every ``auto:Q`` policy of the run is served from one fit of each candidate,
selection is per quantile); optionally the selected models are refitted every ``refit_every``.
At every forecast step in between, it forecasts from the newest complete history with the fitted
models (``Selection.forecast``), past runs of declared windows taken out of that history as the
refresher does, then ``policy.forecast_demand`` with the scheduled windows and ``policy.headroom``
against the last observation, at every simulation step. ``holt_winters`` is PHPA's model: additive
Holt-Winters with a daily season, fitted on the same cadence and updated with every forecast step,
its point forecast at the lead time served as the target.

Nothing is approximated with respect to that cadence: the forecast served at each step is the one
the service would compute from the same history with the same fitted models (a test checks it).
Each fit and each forecast sees only complete forecast bins before its moment. Reselection periods
are independent of each other, so they run in parallel.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import pandas as pd

from adapters.types import QUEUED_SOURCE, ScheduledWindow
from autoscaler import policy
from autoscaler.simulation.inputs import Workload
from autoscaler.simulation.policies import PolicySpec
from forecast.base import CalibratedModel, model_history
from forecast.engine import Selection, fit_select_many
from forecast.known_demand import remove_known_jobs, window_demand
from forecast.registry import make_model
from forecast.types import Forecast

HOLT_WINTERS = "holt_winters"


@dataclass(frozen=True)
class ForecastCadence:
    """How the forecasting policies see the data and how often they fit."""

    step_s: float = 300.0  # the forecaster's step (the service's signal step)
    reselect_every_s: float = 6 * 3600.0
    refit_every_s: float = 6 * 3600.0  # as reselect_every_s: no refit between selections
    lookback_s: float = 14 * 86400.0
    lead_s: float = 390.0  # the lead time policies plan for: 5 minutes plus the service's 90 s margin
    seed: int = 0

    @property
    def lead_steps(self) -> int:
        return max(1, int(self.lead_s // self.step_s))

    @property
    def horizon_steps(self) -> int:
        """What the service forecasts: the lead time plus one step (fitting.work_in_worker)."""
        return self.lead_steps + 1


@dataclass(frozen=True)
class BlockJob:
    """One reselection period of one or more policies: everything a worker process needs.

    ``specs`` are either every ``auto:Q`` policy (they share one selection) or one ``holt_winters``.
    ``bins`` holds the demand per forecast step (the highest in each step, labelled by its start)
    from the lookback before the block to its end; ``known`` is the part of each bin that declared
    windows account for.
    """

    specs: tuple[PolicySpec, ...]
    cadence: ForecastCadence
    bins: pd.Series
    known: np.ndarray
    step_times: pd.DatetimeIndex  # the simulation steps this block serves
    first_step: int
    windows: tuple[ScheduledWindow, ...]
    # GPUs of the Kueue Workloads the service counts at each of those steps (quota.QuotaPlan), served by
    # ``auto`` as the refresher serves them; None: not seen.
    queued: np.ndarray | None = None

    @property
    def holt_winters(self) -> bool:
        return self.specs[0].name == HOLT_WINTERS


@dataclass
class BlockResult:
    spec_text: str
    first_step: int
    values: np.ndarray
    models: list[str] = field(default_factory=list)
    fit_seconds: list[float] = field(default_factory=list)  # a shared fit is split among its policies
    forecast_seconds: float = 0.0  # forecasting from fitted models at every bin (also split)
    notes: list[str] = field(default_factory=list)


def forecast_groups(specs: Sequence[PolicySpec]) -> list[tuple[PolicySpec, ...]]:
    """The forecasting policies grouped by what they fit: every ``auto:Q`` together, since they
    select on the same history and differ only in the quantile; each ``holt_winters`` alone."""
    autos = tuple(spec for spec in specs if spec.forecasting and spec.name != HOLT_WINTERS)
    others = [(spec,) for spec in specs if spec.forecasting and spec.name == HOLT_WINTERS]
    return ([autos] if autos else []) + others


def demand_bins(workload: Workload, step_s: float) -> pd.Series:
    """The highest demand observed in each forecast step: a node must cover a step's peak, not its
    mean. Bins are labelled by their start, as ``forecast.io.aggregate`` does."""
    ratio = round(step_s / workload.step_s)
    if ratio < 1 or not math.isclose(ratio * workload.step_s, step_s):
        raise ValueError(f"the forecast step ({step_s:g} s) must be a whole multiple of --step ({workload.step_s:g} s)")
    count = workload.steps // ratio
    peaks = workload.observed[: count * ratio].reshape(count, ratio).max(axis=1)
    index = pd.DatetimeIndex(workload.origin + pd.to_timedelta(np.arange(count) * step_s, unit="s"))
    return pd.Series(peaks, index=index, name="gpus_requested")


def plan_blocks(
    specs: tuple[PolicySpec, ...],
    workload: Workload,
    first_step: int,
    cadence: ForecastCadence,
    queued: np.ndarray | None = None,
) -> list[BlockJob]:
    """Split the simulated steps into reselection periods, each with the history it may use and, for
    ``auto`` (this service's policy, not PHPA's Holt-Winters), the Workloads counted at its steps
    (``queued`` per step, if seen)."""
    queued = None if specs[0].name == HOLT_WINTERS else queued
    bins = demand_bins(workload, cadence.step_s)
    step = pd.Timedelta(seconds=cadence.step_s)
    known_all = window_demand(pd.DatetimeIndex(bins.index), step, [(w.start, w.end, w.gpus) for w in workload.windows])
    steps_per_block = max(1, round(cadence.reselect_every_s / workload.step_s))
    index = workload.index()
    lookback = pd.Timedelta(seconds=cadence.lookback_s)
    jobs = []
    for start in range(first_step, workload.steps, steps_per_block):
        stop = min(start + steps_per_block, workload.steps)
        first, last = index[start], index[stop - 1]
        selected = np.asarray((bins.index >= first - lookback) & (bins.index <= last))
        # Windows whose past runs fall in the history (to take out) or that start before the block's
        # last step plus the lead time (to add).
        horizon_end = last + pd.Timedelta(seconds=cadence.lead_s)
        windows = tuple(w for w in workload.windows if w.end > first - lookback and w.start <= horizon_end)
        jobs.append(
            BlockJob(
                specs=specs,
                cadence=cadence,
                bins=bins[selected],
                known=known_all[selected],
                step_times=index[start:stop],
                first_step=start,
                windows=windows,
                queued=None if queued is None else queued[start:stop],
            )
        )
    return jobs


# What a block's policies forecast with: one Selection per auto quantile, or PHPA's fitted model.
Fitted = dict[float, Selection] | CalibratedModel


def history_at(job: BlockJob, now: pd.Timestamp) -> pd.Series:
    """The complete bins before ``now``; for ``auto``, past runs of declared windows taken out
    first, as the refresher does."""
    step = pd.Timedelta(seconds=job.cadence.step_s)
    last_bin = int(job.bins.index.searchsorted(now - step, side="right"))
    history = job.bins.iloc[:last_bin]
    past = [(w.start, w.end, w.gpus) for w in job.windows if w.start < now]
    if past and len(history) and not job.holt_winters:
        history, _ = remove_known_jobs(history, past)
    return history


class Histories:
    """``history_at`` for the successive moments of one block, without redoing settled windows.

    ``remove_known_jobs`` treats windows one after another, each reading the bins during it and
    just before it. A window that ended a step before the block's first moment reads and writes
    the same values at every later moment (a history only grows at its end), so the windows up to
    the first unsettled one are taken out once; the rest are taken out at each moment, after them:
    the same arithmetic in the same order as ``history_at``.
    """

    def __init__(self, job: BlockJob) -> None:
        self.job = job
        step = pd.Timedelta(seconds=job.cadence.step_s)
        cutoff = job.step_times[0] - step
        self.settled = 0
        if not job.holt_winters:
            while self.settled < len(job.windows) and job.windows[self.settled].end <= cutoff:
                self.settled += 1
        first = job.bins[job.bins.index <= cutoff]
        prefix = [(w.start, w.end, w.gpus) for w in job.windows[: self.settled]]
        self.base = (remove_known_jobs(first, prefix)[0] if prefix and len(first) else first).to_numpy()
        self.raw = job.bins.to_numpy()

    def at(self, now: pd.Timestamp) -> pd.Series:
        job = self.job
        if job.holt_winters or not self.settled:
            return history_at(job, now)
        step = pd.Timedelta(seconds=job.cadence.step_s)
        count = int(job.bins.index.searchsorted(now - step, side="right"))
        values = np.concatenate([self.base[:count], self.raw[len(self.base) : count]])
        history = pd.Series(values, index=job.bins.index[:count], name=job.bins.name)
        rest = [(w.start, w.end, w.gpus) for w in job.windows[self.settled :] if w.start < now]
        return remove_known_jobs(history, rest)[0] if rest else history


def fit_block(job: BlockJob, history: pd.Series, previous: Fitted | None) -> Fitted:
    """Fit on ``history``: a full selection when ``previous`` is None, else a refit of what each
    quantile selected (an ensemble refits exactly its members)."""
    cadence = job.cadence
    if job.holt_winters:
        return make_model(HOLT_WINTERS, max_horizon=cadence.horizon_steps, seed=cadence.seed).fit(history)
    quantiles = [spec.quantile for spec in job.specs]
    # Quantiles that selected the same model refit it together; a full selection is one group.
    groups: dict[str | None, list[float]] = {}
    for quantile in quantiles:
        chosen = None if not isinstance(previous, dict) else previous[quantile].model
        groups.setdefault(chosen, []).append(quantile)
    selections: dict[float, Selection] = {}
    for chosen, group in groups.items():
        results = fit_select_many(
            history,
            horizon_steps=cadence.horizon_steps,
            quantiles=(),
            policy_quantiles=group,
            lead_steps=cadence.lead_steps,
            candidates=None if chosen is None else (chosen,),
            seed=cadence.seed,
            # The budget only drops slow candidates after fitting them: on a shared machine it would
            # make selection depend on the load, so a replay runs without it (what an idle service
            # selects).
            time_budget_s=math.inf,
        )
        for quantile, result in results.items():
            if result.selection is None:  # fit_select_many always sets it
                raise RuntimeError(f"no selection for quantile {quantile}")
            selections[quantile] = result.selection
    return selections


def forecast_block(job: BlockJob, fitted: Fitted, history: pd.Series) -> dict[str, Forecast]:
    """Each policy's forecast from ``history`` with the fitted models, as the service refreshes.

    Each ``auto:Q`` forecasts only its own quantile, as the service's plan does; the history is
    prepared once for all of them (``Selection.forecast`` would prepare it the same way each time).
    """
    horizon = job.cadence.horizon_steps
    prepared = model_history(history)
    if isinstance(fitted, CalibratedModel):
        return {job.specs[0].text: fitted.forecast_history(prepared, horizon, ())}
    return {
        spec.text: fitted[spec.quantile].forecast_history(prepared, horizon, (spec.quantile,)) for spec in job.specs
    }


# The lead time in the simulator is a given of the run, not learned from NodeClaims.
SIMULATED_LEAD_TIME_SOURCE = "simulated (--lead-time plus the service's margin)"


@functools.cache
def _headroom_rule(quantile: float) -> policy.Rule:
    return policy.Rule(kind="headroom", quantile=quantile)


def serve_decision(
    job: BlockJob, spec: PolicySpec, forecast: Forecast, now: pd.Timestamp, last_observed: float, queued: float = 0.0
) -> policy.Decision:
    """What a policy serves at ``now`` from its latest forecast, and why.

    ``auto:Q`` goes through ``policy.decide`` exactly as the refresher's headroom plans do, the
    ``queued`` GPUs of counted Kueue Workloads as one window open from now (autoscaler/refresh/kueue_inputs.py).
    """
    lead = timedelta(seconds=job.cadence.lead_s)
    if spec.name == HOLT_WINTERS:
        # PHPA predicts the replica count at now + lookAhead; less than now means no headroom.
        position = int(forecast.timestamps.searchsorted(now + lead, side="right")) - 1
        predicted = float(forecast.mean[max(position, 0)])
        return policy.headroom(policy.Decision(predicted, HOLT_WINTERS), last_observed)
    situation = policy.Situation(
        forecast=forecast,
        # A datetime, as the service's clock gives (comparing windows' datetimes with a pandas
        # Timestamp costs more than the rest of the policy).
        now=now.to_pydatetime(),
        lead_time=policy.LeadTime(lead, SIMULATED_LEAD_TIME_SOURCE),
        windows=job.windows if queued <= 0 else (*job.windows, _queued_window(now, lead, queued)),
        requested_now=last_observed,
    )
    decision = policy.decide(_headroom_rule(spec.quantile), situation)
    if decision is None:  # only a replicas rule can be undecided
        raise AssertionError("a headroom rule always decides")
    return decision


def _queued_window(now: pd.Timestamp, lead: timedelta, gpus: float) -> ScheduledWindow:
    """Counted Workloads, as the refresher serves them: open from now past the lead time (the
    window's length changes nothing served)."""
    start = now.to_pydatetime()
    return ScheduledWindow(QUEUED_SOURCE, "simulation", "queued", start, start + 2 * lead, gpus)


def serve(
    job: BlockJob, spec: PolicySpec, forecast: Forecast, now: pd.Timestamp, last_observed: float, queued: float = 0.0
) -> float:
    """The headroom a policy serves at ``now`` from its latest forecast."""
    return serve_decision(job, spec, forecast, now, last_observed, queued).value


def _model_names(fitted: Fitted, spec: PolicySpec) -> str:
    if isinstance(fitted, CalibratedModel):
        return fitted.name
    return fitted[spec.quantile].model


def run_block(job: BlockJob) -> list[BlockResult]:
    """Fit at each fit moment of the block, forecast from the newest history at every forecast bin,
    and serve every step; one result per policy of the job."""
    cadence = job.cadence
    step = pd.Timedelta(seconds=cadence.step_s)
    refit_every = pd.Timedelta(seconds=cadence.refit_every_s)
    results = [BlockResult(spec.text, job.first_step, np.zeros(len(job.step_times))) for spec in job.specs]
    share = len(job.specs)
    raw = job.bins.to_numpy()
    bin_start = job.bins.index
    fitted: Fitted | None = None
    forecasts: dict[str, Forecast] | None = None
    forecast_bin = -1  # the last bin the current forecasts saw
    next_refit = job.step_times[0]
    histories = Histories(job)
    for position, now in enumerate(job.step_times):
        last_bin = int(bin_start.searchsorted(now - step, side="right")) - 1  # the last complete bin
        if last_bin < 0:
            continue
        history: pd.Series | None = None
        if now >= next_refit:
            next_refit = now + refit_every
            history = histories.at(now)
            started = time.perf_counter()
            try:
                fitted = fit_block(job, history, fitted)
                models = [_model_names(fitted, spec) for spec in job.specs]
            except Exception as error:  # e.g. too little history; a failing fit keeps the last good one
                models = ["failed"] * share
                for result in results:
                    result.notes.append(f"{now.isoformat()}: {type(error).__name__}: {error}")
            seconds = (time.perf_counter() - started) / share
            for result, model in zip(results, models, strict=True):
                result.fit_seconds.append(seconds)
                result.models.append(model)
            forecast_bin = -1  # forecast with what was just fitted
        if fitted is None:
            continue
        if last_bin != forecast_bin:
            started = time.perf_counter()
            try:
                forecasts = forecast_block(job, fitted, history if history is not None else histories.at(now))
                forecast_bin = last_bin
            except Exception as error:  # the service keeps serving its last good forecast
                for result in results:
                    result.notes.append(f"{now.isoformat()}: forecast failed: {type(error).__name__}: {error}")
            seconds = (time.perf_counter() - started) / share
            for result in results:
                result.forecast_seconds += seconds
        if forecasts is None:
            continue
        for spec, result in zip(job.specs, results, strict=True):
            queued = 0.0 if job.queued is None else float(job.queued[position])
            value = serve(job, spec, forecasts[spec.text], now, float(raw[last_bin]), queued)
            # As the service: a value that must not be served leaves the last good one in place.
            result.values[position] = value if math.isfinite(value) else result.values[position - 1]
    return results
