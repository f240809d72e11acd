"""Fit, select and predict for one series: the entry point the service's process pool calls.

Every candidate is fitted on the history before a recent calibration window and scored by its
out-of-sample pinball loss at the policy quantile over the lead-time steps inside that window
(rolling origins, conformal shift cross-fitted). The best model predicts, averaged with the models
that are not clearly worse on that window (a model confidence set): with two days of overlapping
origins the ranking among close models is noise, and their average is steadier than any of them.
A candidate that raises or overruns the time budget is dropped with the reason in ``notes``; when
none is left the result falls back to seasonal naive (naive on short histories).

The result carries the :class:`Selection` (the chosen models, fitted): a refresh between two fits
forecasts from the newest data with it, exactly as those models would. ``fit_select_many`` serves
several policy quantiles from one fit of each candidate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from forecast import metrics
from forecast.base import CalibratedModel, Holdout, model_history
from forecast.ensemble import combine_forecasts, combine_holdouts, confidence_set, ensemble_members, ensemble_name
from forecast.history import History
from forecast.registry import MODEL_NAMES, MODELS, make_model
from forecast.types import Forecast

DEFAULT_CANDIDATES: tuple[str, ...] = (
    "naive",
    "seasonal_naive",
    "seasonal_naive_weekly",
    "naive_empirical",
    "ets",
    "holt_winters",
    "mstl",
    "gbm",
)
DEFAULT_TIME_BUDGET_S = 10.0


@dataclass(frozen=True)
class Selection:
    """The selected model, fitted: one member, or the members of an ensemble (averaged).

    Picklable, so a worker process can fit it and hand it back for later refreshes.
    """

    model: str
    members: tuple[CalibratedModel, ...]
    nonnegative: bool  # of the history selection saw; the ensemble average is clipped by it

    def forecast(self, series: pd.Series, horizon_steps: int, quantiles: Sequence[float]) -> Forecast:
        """Forecast from the last observation of ``series`` with the fitted members (no refit)."""
        return self.forecast_history(model_history(series), horizon_steps, quantiles)

    def forecast_history(self, history: History, horizon_steps: int, quantiles: Sequence[float]) -> Forecast:
        """:meth:`forecast` for a series already prepared with ``forecast.base.model_history``."""
        parts = [member.forecast_history(history, horizon_steps, quantiles) for member in self.members]
        return parts[0] if len(parts) == 1 else combine_forecasts(parts, self.nonnegative)

    def slimmed(self, quantiles: Sequence[float]) -> Selection:
        """This selection holding only what forecasting at ``quantiles`` from newer series needs
        (``CalibratedModel.slimmed``): what a worker keeps between refreshes."""
        return Selection(self.model, tuple(member.slimmed(quantiles) for member in self.members), self.nonnegative)

    def predict(self, horizon_steps: int, quantiles: Sequence[float]) -> Forecast:
        """The forecast from the end of the history the members were fitted on."""
        parts = [member.predict(horizon_steps, quantiles) for member in self.members]
        return parts[0] if len(parts) == 1 else combine_forecasts(parts, self.nonnegative)


@dataclass(frozen=True)
class EngineResult:
    """What one series' refresh produced. ``scores[model]`` holds the selection metrics."""

    forecast: Forecast
    model: str
    scores: dict[str, dict[str, float]]
    notes: tuple[str, ...]
    fit_seconds: float
    # The fitted models behind ``forecast`` (always set here). Up to about a third of a megabyte
    # pickled with a gbm member (benchmarks/bench_refit.py): a caller that only needs the forecast may
    # drop it (None) before shipping the result.
    selection: Selection | None


def _score(holdout: Holdout, policy_quantile: float, seconds: float) -> dict[str, float]:
    return {
        "pinball": metrics.pinball(holdout.actual, holdout.upper, policy_quantile),
        "mae": metrics.mae(holdout.actual, holdout.mean),
        "coverage": metrics.coverage(holdout.actual, holdout.upper),
        "under_provision_rate": metrics.under_provision_rate(holdout.actual, holdout.upper),
        "fit_seconds": seconds,
    }


def _rank_key(name: str, score: dict[str, float]) -> tuple[float, int]:
    pinball = score["pinball"]
    # Ties (and unscorable models) go to the simpler model: MODEL_NAMES lists simple ones first,
    # combinations come last.
    order = MODEL_NAMES.index(name) if name in MODEL_NAMES else len(MODEL_NAMES) + len(name)
    return (pinball if math.isfinite(pinball) else math.inf, order)


def fit_select_predict(
    series: pd.Series,
    *,
    horizon_steps: int,
    quantiles: Sequence[float],
    policy_quantile: float,
    lead_steps: int,
    candidates: Sequence[str] | None = None,
    seed: int = 0,
    time_budget_s: float = DEFAULT_TIME_BUDGET_S,
) -> EngineResult:
    """Choose the best model for ``series`` by backtest and forecast ``horizon_steps`` ahead.

    ``quantiles`` are the levels the forecast carries; ``policy_quantile`` is the level the
    autoscaling policy serves and selection optimises; ``time_budget_s`` applies to each candidate.
    Raises ``ValueError`` only when the series itself is unusable (e.g. fewer than two values).
    """
    results = fit_select_many(
        series,
        horizon_steps=horizon_steps,
        quantiles=quantiles,
        policy_quantiles=(policy_quantile,),
        lead_steps=lead_steps,
        candidates=candidates,
        seed=seed,
        time_budget_s=time_budget_s,
    )
    return results[float(policy_quantile)]


@dataclass
class _Fitted:
    """Candidates fitted once for every policy quantile, and what selection needs to know."""

    history: History
    models: dict[str, CalibratedModel]
    seconds: dict[str, float]
    notes: list[str]
    forced_members: tuple[str, ...] | None


def fit_select_many(
    series: pd.Series,
    *,
    horizon_steps: int,
    quantiles: Sequence[float],
    policy_quantiles: Sequence[float],
    lead_steps: int,
    candidates: Sequence[str] | None = None,
    seed: int = 0,
    time_budget_s: float = DEFAULT_TIME_BUDGET_S,
) -> dict[float, EngineResult]:
    """:func:`fit_select_predict` for several policy quantiles, fitting each candidate once.

    Parameters never depend on the policy quantile (gbm trains one independent model per level, so
    it trains every level here and each quantile's selection keeps only its own), hence each result
    equals a separate call's, apart from timings and the order of notes: ``time_budget_s`` applies
    to a candidate's shared fit plus its scoring at that quantile.
    """
    started = time.perf_counter()
    if horizon_steps < 1 or lead_steps < 1:
        raise ValueError("horizon_steps and lead_steps must be at least 1")
    levels_served = [float(level) for level in dict.fromkeys(policy_quantiles)]
    if not levels_served:
        raise ValueError("policy_quantiles must not be empty")
    for policy_quantile in levels_served:
        if not 0.0 < policy_quantile < 1.0:
            raise ValueError(f"policy_quantile must be in (0, 1), got {policy_quantile}")
    fitted = _fit_candidates(series, max(horizon_steps, lead_steps), levels_served, candidates, seed)
    results: dict[float, EngineResult] = {}
    for policy_quantile in levels_served:
        levels = sorted({float(level) for level in quantiles} | {policy_quantile})
        results[policy_quantile] = _select(
            fitted, series, horizon_steps, levels, policy_quantile, lead_steps, seed, time_budget_s, started
        )
    return results


def _fit_candidates(
    series: pd.Series,
    max_horizon: int,
    policy_quantiles: Sequence[float],
    candidates: Sequence[str] | None,
    seed: int,
) -> _Fitted:
    # As every model prepares it (the newest MAX_HISTORY only): prepared once, shared by the fits.
    history = model_history(series)
    names = list(candidates) if candidates is not None else list(DEFAULT_CANDIDATES)
    # An ensemble name (what an earlier selection returned) means: refit exactly its members and
    # combine them, so a caller can refit its selection between full selections.
    forced_members: tuple[str, ...] | None = None
    expanded: list[str] = []
    for name in names:
        members = ensemble_members(name)
        if members is not None:
            forced_members = members
        expanded += members or (name,)
    names = list(dict.fromkeys(expanded))
    for name in names:
        if name not in MODELS:
            raise ValueError(f"unknown model {name!r}; known: {', '.join(MODEL_NAMES)}")
    notes: list[str] = []
    per_day = history.steps_per_day
    if len(history) < 2 * per_day:
        notes.append(
            f"short history: {len(history)} steps ({len(history) / per_day:.1f} days) is under two daily "
            "seasons; seasonal models are not used"
        )
    if history.gap_share > 0:
        notes.append(f"{history.gap_share:.1%} of the history is gaps (interpolated for fitting, never scored)")
    too_short = [name for name in names if len(history) < MODELS[name].min_history(per_day)]
    if too_short:
        notes.append(f"not enough history for: {', '.join(too_short)}")

    models: dict[str, CalibratedModel] = {}
    seconds: dict[str, float] = {}
    for name in names:
        if name in too_short:
            continue
        model_started = time.perf_counter()
        try:
            model = make_model(name, max_horizon=max_horizon, quantiles=tuple(policy_quantiles), seed=seed)
            model.fit_history(history)
        except Exception as error:  # one failing model must never fail the refresh
            notes.append(f"{name} failed: {type(error).__name__}: {error}")
            continue
        models[name] = model
        seconds[name] = time.perf_counter() - model_started
    return _Fitted(history, models, seconds, notes, forced_members)


@dataclass
class _Scored:
    """The candidates that scored at one policy quantile: each one's model for that quantile alone,
    its calibration holdout and its selection metrics."""

    models: dict[str, CalibratedModel]
    holdouts: dict[str, Holdout]
    scores: dict[str, dict[str, float]]


def _select(
    candidates: _Fitted,
    series: pd.Series,
    horizon_steps: int,
    levels: Sequence[float],
    policy_quantile: float,
    lead_steps: int,
    seed: int,
    time_budget_s: float,
    started: float,
) -> EngineResult:
    """Score the fitted candidates at ``policy_quantile``, choose, and forecast."""
    history = candidates.history
    notes = list(candidates.notes)
    scored = _score_candidates(candidates, policy_quantile, lead_steps, time_budget_s, notes)
    ranked, combinations = _rank(scored, candidates.forced_members, policy_quantile)
    for name in ranked:
        chosen = tuple(scored.models[member] for member in combinations.get(name, (name,)))
        selection = Selection(model=name, members=chosen, nonnegative=history.nonnegative)
        try:
            forecast = selection.predict(horizon_steps, levels)
        except Exception as error:  # fall through to the next best model
            notes.append(f"{name} failed to predict: {type(error).__name__}: {error}")
            continue
        return _result(selection, forecast, scored.scores, notes, started)
    return _fall_back(candidates, scored, series, horizon_steps, levels, lead_steps, seed, notes, started)


def _score_candidates(
    candidates: _Fitted, policy_quantile: float, lead_steps: int, time_budget_s: float, notes: list[str]
) -> _Scored:
    """Every fitted candidate's holdout and score at ``policy_quantile``.

    A candidate whose scoring fails, or whose fit plus scoring overruns ``time_budget_s``, is left
    out with the reason appended to ``notes``.
    """
    scored = _Scored(models={}, holdouts={}, scores={})
    for name, shared in candidates.models.items():
        scoring_started = time.perf_counter()
        # What a fit for this policy quantile alone would hold (gbm trained every policy level).
        model = shared.for_quantiles((policy_quantile,))
        try:
            holdout = model.holdout(policy_quantile, lead_steps)
            score = _score(holdout, policy_quantile, 0.0)
        except Exception as error:  # one failing model must never fail the refresh
            notes.append(f"{name} failed: {type(error).__name__}: {error}")
            continue
        seconds = candidates.seconds[name] + time.perf_counter() - scoring_started
        if seconds > time_budget_s:
            notes.append(f"{name} exceeded the time budget ({seconds:.2f} s > {time_budget_s:g} s)")
            continue
        score["fit_seconds"] = seconds
        scored.scores[name] = score
        scored.models[name] = model
        scored.holdouts[name] = holdout
    return scored


def _rank(
    scored: _Scored, forced_members: tuple[str, ...] | None, policy_quantile: float
) -> tuple[list[str], dict[str, tuple[str, ...]]]:
    """The scored names best first, and the members of each ensemble name among them.

    An ensemble of the forced members (when all of them scored), else of the confidence set, goes
    first; its score joins ``scored.scores`` so that the result reports it beside its members'.
    """
    scores = scored.scores
    ranked = sorted(scores, key=lambda name: _rank_key(name, scores[name]))
    combinations: dict[str, tuple[str, ...]] = {}
    finite = [name for name in ranked if math.isfinite(scores[name]["pinball"])]
    if forced_members is not None and all(member in scored.models for member in forced_members):
        members = forced_members
    elif len(finite) > 1:
        members = confidence_set(finite, scored.holdouts, policy_quantile)
    else:
        members = ()
    if len(members) > 1:
        combined = ensemble_name(members)
        seconds = sum(scores[member]["fit_seconds"] for member in members)
        scores[combined] = _score(combine_holdouts([scored.holdouts[m] for m in members]), policy_quantile, seconds)
        combinations[combined] = tuple(members)
        ranked.insert(0, combined)
    return ranked, combinations


def _fall_back(
    candidates: _Fitted,
    scored: _Scored,
    series: pd.Series,
    horizon_steps: int,
    levels: Sequence[float],
    lead_steps: int,
    seed: int,
    notes: list[str],
    started: float,
) -> EngineResult:
    """The last resort when no ranked model could predict: seasonal naive (when the history is long
    enough for it), else naive. A fallback that scored is reused; otherwise it is fitted here."""
    history = candidates.history
    per_day = history.steps_per_day
    max_horizon = max(horizon_steps, lead_steps)
    fallbacks = ["naive"]
    if len(history) >= MODELS["seasonal_naive"].min_history(per_day):
        fallbacks.insert(0, "seasonal_naive")
    for fallback in fallbacks:
        try:
            model = scored.models.get(fallback) or make_model(fallback, max_horizon=max_horizon, seed=seed).fit(series)
            selection = Selection(model=fallback, members=(model,), nonnegative=history.nonnegative)
            forecast = selection.predict(horizon_steps, levels)
        except Exception as error:  # the last resort is naive; report and try it
            notes.append(f"fallback {fallback} failed: {type(error).__name__}: {error}")
            continue
        notes.append(f"no candidate produced a forecast; fell back to {fallback}")
        return _result(selection, forecast, scored.scores, notes, started)
    raise RuntimeError("no model, not even naive, could forecast this series: " + "; ".join(notes))


def _result(
    selection: Selection,
    forecast: Forecast,
    scores: dict[str, dict[str, float]],
    notes: list[str],
    started: float,
) -> EngineResult:
    """The result of ``selection``'s forecast; ``fit_seconds`` counts from ``started``."""
    return EngineResult(
        forecast=forecast,
        model=selection.model,
        scores=scores,
        notes=tuple(notes),
        fit_seconds=time.perf_counter() - started,
        selection=selection,
    )
