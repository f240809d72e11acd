"""The forecasting policies, replayed on the cadence the service uses.

``auto:Q`` is this service's policy: ``fit_select_predict`` (full selection every ``reselect_every``;
in between the chosen model is refitted every ``refit_every``), past runs of declared windows taken
out of the history as the refresher does, then ``policy.forecast_demand`` with the scheduled windows
and ``policy.headroom`` against the last observation, at every step. ``holt_winters`` is PHPA's model:
additive Holt-Winters with a daily season, its point forecast at the lead time served as the target.

The service refreshes every minute, fitting each time. The simulator fits only at the refit cadence
and, at every step in between, carries the latest forecast forward: its path relative to its last
observation is re-anchored at the newest complete observation. That is exact for the naive family
(what selection picks most often) and close for level-following models; a daily shape moves little
within one refit interval. Each fit and each anchor sees only complete forecast bins before its
moment. Reselection periods are independent of each other, so they can run in parallel.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from datetime import timedelta

import numpy as np
import pandas as pd

from adapters.types import ScheduledWindow
from autoscaler import policy
from autoscaler.simulation.inputs import Workload
from autoscaler.simulation.policies import PolicySpec
from forecast.engine import fit_select_predict
from forecast.ensemble import PREFIX as ENSEMBLE_PREFIX
from forecast.known_demand import remove_known_jobs, window_demand
from forecast.registry import make_model
from forecast.types import Forecast

HOLT_WINTERS = "holt_winters"


@dataclass(frozen=True)
class ForecastCadence:
    """How the forecasting policies see the data and how often they refit."""

    step_s: float = 300.0  # the forecaster's step (the service's signal step)
    reselect_every_s: float = 6 * 3600.0
    refit_every_s: float = 3600.0
    lookback_s: float = 14 * 86400.0
    lead_s: float = 330.0  # the lead time policies plan for: lead time plus the service's margin
    seed: int = 0


@dataclass(frozen=True)
class BlockJob:
    """One reselection period of one policy: everything a worker process needs.

    ``bins`` holds the demand per forecast step (the highest in each step, labelled by its start)
    from the lookback before the block to its end; ``known`` is the part of each bin that declared
    windows account for.
    """

    spec: PolicySpec
    cadence: ForecastCadence
    bins: pd.Series
    known: np.ndarray
    step_times: pd.DatetimeIndex  # the simulation steps this block serves
    first_step: int
    windows: tuple[ScheduledWindow, ...]


@dataclass
class BlockResult:
    spec_text: str
    first_step: int
    values: np.ndarray
    models: list[str] = field(default_factory=list)
    fit_seconds: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


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


def plan_blocks(spec: PolicySpec, workload: Workload, first_step: int, cadence: ForecastCadence) -> list[BlockJob]:
    """Split the simulated steps into reselection periods, each with the history it may use."""
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
                spec=spec,
                cadence=cadence,
                bins=bins[selected],
                known=known_all[selected],
                step_times=index[start:stop],
                first_step=start,
                windows=windows,
            )
        )
    return jobs


def _candidates(selected: str | None) -> tuple[str, ...] | None:
    """What a refit fits: the selected model, or an ensemble's members (selection re-weighs them)."""
    if selected is None:
        return None
    if selected.startswith(f"{ENSEMBLE_PREFIX}(") and selected.endswith(")"):
        return tuple(selected[len(ENSEMBLE_PREFIX) + 1 : -1].split("+"))
    return (selected,)


def _fit(job: BlockJob, history: pd.Series, selected: str | None, horizon: int) -> tuple[Forecast, str]:
    cadence = job.cadence
    lead_steps = max(1, int(cadence.lead_s // cadence.step_s))
    if job.spec.name == HOLT_WINTERS:
        model = make_model(HOLT_WINTERS, max_horizon=horizon, seed=cadence.seed).fit(history)
        return model.predict(horizon, ()), HOLT_WINTERS
    result = fit_select_predict(
        history,
        horizon_steps=horizon,
        quantiles=(job.spec.quantile,),
        policy_quantile=job.spec.quantile,
        lead_steps=lead_steps,
        candidates=_candidates(selected),
        seed=cadence.seed,
        # The budget only drops slow candidates after fitting them: on a shared machine it would make
        # selection depend on the load, so a replay runs without it (what an idle service selects).
        time_budget_s=math.inf,
    )
    return result.forecast, result.model


def reanchor(forecast: Forecast, bins: int, step: pd.Timedelta, level_change: float) -> Forecast:
    """The forecast carried ``bins`` steps forward: same path relative to its origin, moved by how
    much the (cleaned) demand changed since."""
    if bins == 0 and level_change == 0:
        return forecast
    return replace(
        forecast,
        timestamps=forecast.timestamps + bins * step,
        mean=forecast.mean + level_change,
        quantiles={level: values + level_change for level, values in forecast.quantiles.items()},
    )


def _serve(job: BlockJob, forecast: Forecast, now: pd.Timestamp, last_observed: float) -> float:
    cadence = job.cadence
    lead = timedelta(seconds=cadence.lead_s)
    if job.spec.name == HOLT_WINTERS:
        # PHPA predicts the replica count at now + lookAhead; less than now means no headroom.
        position = int(forecast.timestamps.searchsorted(now + lead, side="right")) - 1
        predicted = float(forecast.mean[max(position, 0)])
        return policy.headroom(policy.Decision(predicted, HOLT_WINTERS), last_observed).value
    demand = policy.forecast_demand(forecast, quantile=job.spec.quantile, now=now, lead_time=lead, windows=job.windows)
    return policy.headroom(demand, last_observed).value


def run_block(job: BlockJob) -> BlockResult:
    """Fit at each refit moment of the block and serve every step, re-anchored at the last bin."""
    cadence = job.cadence
    step = pd.Timedelta(seconds=cadence.step_s)
    refit_every = pd.Timedelta(seconds=cadence.refit_every_s)
    horizon = math.ceil((cadence.refit_every_s + cadence.lead_s) / cadence.step_s) + 1
    result = BlockResult(job.spec.text, job.first_step, np.zeros(len(job.step_times)))
    raw = job.bins.to_numpy()
    # PHPA forecasts the raw metric; the service forecasts demand with declared windows taken out.
    cleaned = raw if job.spec.name == HOLT_WINTERS else raw - job.known
    bin_start = job.bins.index
    selected: str | None = None
    fitted: tuple[int, Forecast] | None = None  # (position of the fit's last bin, its forecast)
    served: tuple[int, Forecast] | None = None
    next_refit = job.step_times[0]
    for position, now in enumerate(job.step_times):
        last_bin = int(bin_start.searchsorted(now - step, side="right")) - 1  # the last complete bin
        if last_bin < 0:
            continue
        if now >= next_refit:
            next_refit = now + refit_every
            forecast, model = _refit(job, now, selected, horizon, result)
            if forecast is not None:  # a failed fit keeps the last good forecast, as the service does
                selected = selected or model
                fitted, served = (last_bin, forecast), None
        if fitted is None:
            continue
        if served is None or served[0] != last_bin:
            moved = last_bin - fitted[0]
            served = (last_bin, reanchor(fitted[1], moved, step, float(cleaned[last_bin] - cleaned[fitted[0]])))
        result.values[position] = _serve(job, served[1], now, float(raw[last_bin]))
    return result


def _refit(
    job: BlockJob, now: pd.Timestamp, selected: str | None, horizon: int, result: BlockResult
) -> tuple[Forecast | None, str]:
    """One refit on the complete bins before ``now``; for ``auto``, past runs of declared windows
    come out of the history first, as the refresher does."""
    step = pd.Timedelta(seconds=job.cadence.step_s)
    history = job.bins[job.bins.index <= now - step]
    past = [(w.start, w.end, w.gpus) for w in job.windows if w.start < now]
    if past and len(history) and job.spec.name != HOLT_WINTERS:
        history, _ = remove_known_jobs(history, past)
    started = time.perf_counter()
    try:
        forecast, model = _fit(job, history, selected, horizon)
    except Exception as error:  # e.g. too little history; one failing fit must not end the run
        forecast, model = None, "failed"
        result.notes.append(f"{now.isoformat()}: {type(error).__name__}: {error}")
    result.fit_seconds.append(time.perf_counter() - started)
    result.models.append(model)
    return forecast, model
