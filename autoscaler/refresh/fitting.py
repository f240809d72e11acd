"""The worker-process side of a refresh: fit, refit or forecast one series, and keep its models.

Runs inside a forecast worker (``workers.ForecastPools``). A fitted selection stays in the worker
that fitted it (``held_models``): shipping a fitted gbm back and forth would cost about half a
megabyte per series and refresh, so only the forecast travels back. Each fit runs under the
``fit_timeout`` deadline, enforced here, in the worker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

import pandas as pd

from autoscaler import policy
from autoscaler.refresh.workers import ForecastPools, WorkFailed, deadline
from autoscaler.serving.provenance import WorkKind

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from forecast.engine import EngineResult, Selection

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class CapacityInputs:
    """What a replicas plan learns one replica's capacity from (same labels as the rate series)."""

    utilization: pd.Series
    requests_per_replica: pd.Series
    target_utilization: float


@dataclass(frozen=True)
class WorkRequest:
    """Everything a worker needs for one series at one refresh (pickled to the worker)."""

    scope: str  # the refresher's identity: workers keep fitted models per refresher and series
    key: SeriesKey
    series: pd.Series
    lead_steps: int
    quantiles: tuple[float, ...]
    work: WorkKind
    model: str | None = None  # the selected model, for a refit
    known_windows: tuple[tuple[datetime, datetime, float], ...] = ()
    capacity_inputs: CapacityInputs | None = None
    timeout_s: float | None = None
    # Fitted models a worker has not been asked about for this long are dropped (series gone).
    keep_idle_s: float = 86_400.0


@dataclass(frozen=True)
class DropHeld:
    """Series a refresher no longer fits (a shard handed over, a series gone): their models go."""

    scope: str
    keys: tuple[SeriesKey, ...]


@dataclass(frozen=True)
class WorkerResult:
    engine: EngineResult
    capacity: policy.ReplicaCapacity | None = None
    # What the worker did: a full selection, a refit of the chosen models, or a forecast from the
    # newest data with the models it holds (a worker without them refits the chosen models).
    work: WorkKind = "select"


@dataclass
class HeldModels:
    """A fitted selection a worker keeps for later refreshes of the same series."""

    selection: Selection
    scores: dict[str, dict[str, float]]
    notes: tuple[str, ...]
    fitted_at: float  # time.time() of the fit
    used_at: float


# Per worker process (or per thread pool, in tests): (refresher scope, series key) -> fitted models.
_HELD: dict[tuple[str, SeriesKey], HeldModels] = {}


def held_models(scope: str) -> Mapping[SeriesKey, HeldModels]:
    """The models this process holds for one refresher (a thread pool in tests shares the process)."""
    return {key: held for (held_scope, key), held in _HELD.items() if held_scope == scope}


def drop_held(request: DropHeld) -> int:
    """Forget the fitted models of ``request.keys`` in this worker (they would otherwise stay until
    ``keep_idle_s``: days of memory for series another replica now fits); how many were held."""
    return sum(_HELD.pop((request.scope, key), None) is not None for key in request.keys)


async def drop_held_models(pools: ForecastPools, scope: str, keys: Iterable[SeriesKey]) -> None:
    """Have each worker drop the models of ``keys``, in one call per worker; a failure only leaves
    them to expire (``keep_idle_s``)."""
    by_worker: dict[int, list[SeriesKey]] = {}
    for key in keys:
        by_worker.setdefault(pools.shard_of(key), []).append(key)
    for held in by_worker.values():
        try:
            await pools.run(held[0], drop_held, DropHeld(scope, tuple(held)), 30.0)
        except WorkFailed as error:
            log.warning("forecast worker: could not drop the models of %d series: %s", len(held), error)


def work_in_worker(request: WorkRequest) -> WorkerResult:
    """Forecast one series: from held models when asked to and able, else by a (re)fit.

    Top-level so the process pool can pickle it; the numerics are imported in the worker only.
    """
    from forecast.known_demand import remove_known_jobs

    with deadline(request.timeout_s):
        started = time.time()
        for stale in [key for key, held in _HELD.items() if started - held.used_at > request.keep_idle_s]:
            del _HELD[stale]
        series = request.series
        removal_notes: tuple[str, ...] = ()
        if request.known_windows:
            series, removal_notes = remove_known_jobs(series, request.known_windows)
        result: EngineResult | None = None
        update_failure: tuple[str, ...] = ()
        held = _HELD.get((request.scope, request.key))
        if request.work == "update" and held is not None:
            result, update_failure = _forecast_with_held(held, series, request, removal_notes, started)
        work: WorkKind = "update"
        if result is None:
            # Without held models, a series whose model was chosen already (before this worker
            # restarted, or by the shard's previous owner) is refitted, not selected again; held
            # models that no longer fit the signal (its step changed) call for a new selection.
            refit = request.work == "refit" or (request.work == "update" and not update_failure)
            work = "refit" if refit and request.model is not None else "select"
            unknown = _unknown_model(request.model) if work == "refit" else ()
            work = "select" if unknown else work
            result = _fit(series, request, work, started)
            result = replace(result, notes=(*result.notes, *removal_notes, *update_failure, *unknown))
        capacity = None
        if request.capacity_inputs is not None:
            inputs = request.capacity_inputs
            capacity = policy.learn_replica_capacity(
                inputs.utilization, inputs.requests_per_replica, inputs.target_utilization
            )
    return WorkerResult(result, capacity, work)


def _unknown_model(model: str | None) -> tuple[str, ...]:
    """A note when a model to refit is not one this version knows (published by another version
    of the service during a rolling upgrade, or a garbled object): it is selected again instead."""
    from forecast.ensemble import ensemble_members
    from forecast.registry import MODELS

    if model is None or all(name in MODELS for name in ensemble_members(model) or (model,)):
        return ()
    return (f"model {model!r} is not known to this version; selected again",)


def _forecast_with_held(
    held: HeldModels, series: pd.Series, request: WorkRequest, removal_notes: tuple[str, ...], started: float
) -> tuple[EngineResult | None, tuple[str, ...]]:
    """The held models' forecast from the newest data; on failure, the note that says why."""
    from forecast.engine import EngineResult

    try:
        forecast = held.selection.forecast(series, request.lead_steps + 1, request.quantiles)
    except Exception as error:  # e.g. the signal's step changed: the held models no longer fit it
        return None, (f"held models could not forecast ({type(error).__name__}: {error}); selected again",)
    held.used_at = started
    age_minutes = (started - held.fitted_at) / 60
    notes = (*held.notes, *removal_notes, f"models fitted {age_minutes:.0f} min ago forecast from the newest data")
    result = EngineResult(
        forecast=forecast,
        model=held.selection.model,
        scores=held.scores,
        notes=notes,
        fit_seconds=time.time() - started,
        selection=None,
    )
    return result, ()


def _fit(series: pd.Series, request: WorkRequest, work: WorkKind, started: float) -> EngineResult:
    """A full selection, or a refit of the selected model; the fitted models stay in this process."""
    from forecast.engine import fit_select_predict

    result = fit_select_predict(
        series,
        # The horizon covers the lead time plus one step.
        horizon_steps=request.lead_steps + 1,
        quantiles=request.quantiles,
        policy_quantile=max(request.quantiles),
        lead_steps=request.lead_steps,
        candidates=(request.model,) if work == "refit" and request.model is not None else None,
    )
    if result.selection is not None:
        # Slimmed: the fitted history and calibration arrays stay out of the worker's memory.
        selection = result.selection.slimmed(request.quantiles)
        held = HeldModels(selection, result.scores, result.notes, fitted_at=started, used_at=started)
        _HELD[(request.scope, request.key)] = held
    # Only the forecast travels back.
    return replace(result, selection=None)
