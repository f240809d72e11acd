"""Fit, select and predict for one series: the entry point the service's process pool calls.

Every candidate is fitted on the history before a recent calibration window and scored by its
out-of-sample pinball loss at the policy quantile over the lead-time steps inside that window
(rolling origins, conformal shift cross-fitted). The best model predicts, averaged with the models
that are not clearly worse on that window (a model confidence set): with two days of overlapping
origins the ranking among close models is noise, and their average is steadier than any of them.
A candidate that raises or overruns the time budget is dropped with the reason in ``notes``; when
none is left the result falls back to seasonal naive (naive on short histories).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from forecast import metrics
from forecast.base import CalibratedModel, Holdout
from forecast.ensemble import combine_forecasts, combine_holdouts, ensemble_members, ensemble_name
from forecast.history import prepare
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
# Models within CONFIDENCE_Z standard errors of the best calibration loss are averaged (at most
# MAX_SET_SIZE of them); errors are compared on blocks of BLOCK_ORIGINS consecutive origins.
CONFIDENCE_Z = 1.0
MAX_SET_SIZE = 4
BLOCK_ORIGINS = 12


@dataclass(frozen=True)
class EngineResult:
    """What one series' refresh produced. ``scores[model]`` holds the selection metrics."""

    forecast: Forecast
    model: str
    scores: dict[str, dict[str, float]]
    notes: tuple[str, ...]
    fit_seconds: float


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


def _per_origin_loss(holdout: Holdout, level: float) -> np.ndarray:
    """Pinball loss per calibration origin, averaged over its steps (NaN where nothing observed)."""
    error = holdout.actual - holdout.upper
    loss = np.maximum(level * error, (level - 1.0) * error)
    observed = ~np.isnan(loss)
    counts = observed.sum(axis=1)
    totals = np.where(observed, loss, 0.0).sum(axis=1)
    return np.where(counts > 0, totals / np.maximum(counts, 1), np.nan)


def _confidence_set(ranked: list[str], holdouts: dict[str, Holdout], policy_quantile: float) -> tuple[str, ...]:
    """The best model plus those not clearly worse on the calibration window.

    Consecutive origins share most of their future, so losses are compared on blocks of origins;
    a model joins when its mean excess loss over the best is within CONFIDENCE_Z standard errors.
    """
    best = ranked[0]
    rows = min(len(holdouts[name].actual) for name in ranked)
    base = _per_origin_loss(holdouts[best], policy_quantile)[-rows:]
    members = [best]
    for name in ranked[1:]:
        if len(members) == MAX_SET_SIZE:
            break
        excess = _per_origin_loss(holdouts[name], policy_quantile)[-rows:] - base
        excess = excess[~np.isnan(excess)]
        blocks = len(excess) // BLOCK_ORIGINS
        if blocks < 2:
            continue
        block_means = excess[: blocks * BLOCK_ORIGINS].reshape(blocks, BLOCK_ORIGINS).mean(axis=1)
        standard_error = float(block_means.std(ddof=1)) / math.sqrt(blocks)
        if float(block_means.mean()) <= CONFIDENCE_Z * standard_error:
            members.append(name)
    return tuple(members)


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
    started = time.perf_counter()
    if horizon_steps < 1 or lead_steps < 1:
        raise ValueError("horizon_steps and lead_steps must be at least 1")
    if not 0.0 < policy_quantile < 1.0:
        raise ValueError(f"policy_quantile must be in (0, 1), got {policy_quantile}")
    history = prepare(series)
    levels = sorted({float(level) for level in quantiles} | {float(policy_quantile)})
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
    max_horizon = max(horizon_steps, lead_steps)

    fitted: dict[str, CalibratedModel] = {}
    holdouts: dict[str, Holdout] = {}
    scores: dict[str, dict[str, float]] = {}
    for name in names:
        if name in too_short:
            continue
        model_started = time.perf_counter()
        try:
            model = make_model(name, max_horizon=max_horizon, quantiles=(policy_quantile,), seed=seed)
            model.fit(series)
            holdout = model.holdout(policy_quantile, lead_steps)
            score = _score(holdout, policy_quantile, 0.0)
        except Exception as error:  # one failing model must never fail the refresh
            notes.append(f"{name} failed: {type(error).__name__}: {error}")
            continue
        seconds = time.perf_counter() - model_started
        if seconds > time_budget_s:
            notes.append(f"{name} exceeded the time budget ({seconds:.2f} s > {time_budget_s:g} s)")
            continue
        score["fit_seconds"] = seconds
        scores[name] = score
        fitted[name] = model
        holdouts[name] = holdout

    ranked = sorted(scores, key=lambda name: _rank_key(name, scores[name]))
    combinations: dict[str, tuple[str, ...]] = {}
    finite = [name for name in ranked if math.isfinite(scores[name]["pinball"])]
    if forced_members is not None and all(member in fitted for member in forced_members):
        members = forced_members
    elif len(finite) > 1:
        members = _confidence_set(finite, holdouts, policy_quantile)
    else:
        members = ()
    if len(members) > 1:
        combined = ensemble_name(members)
        seconds = sum(scores[member]["fit_seconds"] for member in members)
        scores[combined] = _score(combine_holdouts([holdouts[m] for m in members]), policy_quantile, seconds)
        combinations[combined] = tuple(members)
        ranked.insert(0, combined)
    for name in ranked:
        try:
            if name in combinations:
                parts = [fitted[member].predict(horizon_steps, levels) for member in combinations[name]]
                forecast = combine_forecasts(parts, history.nonnegative)
            else:
                forecast = fitted[name].predict(horizon_steps, levels)
        except Exception as error:  # fall through to the next best model
            notes.append(f"{name} failed to predict: {type(error).__name__}: {error}")
            continue
        return EngineResult(
            forecast=forecast,
            model=name,
            scores=scores,
            notes=tuple(notes),
            fit_seconds=time.perf_counter() - started,
        )

    fallbacks = ["naive"]
    if len(history) >= MODELS["seasonal_naive"].min_history(per_day):
        fallbacks.insert(0, "seasonal_naive")
    for fallback in fallbacks:
        try:
            model = fitted.get(fallback) or make_model(fallback, max_horizon=max_horizon, seed=seed).fit(series)
            forecast = model.predict(horizon_steps, levels)
        except Exception as error:  # the last resort is naive; report and try it
            notes.append(f"fallback {fallback} failed: {type(error).__name__}: {error}")
            continue
        notes.append(f"no candidate produced a forecast; fell back to {fallback}")
        return EngineResult(
            forecast=forecast,
            model=fallback,
            scores=scores,
            notes=tuple(notes),
            fit_seconds=time.perf_counter() - started,
        )
    raise RuntimeError("no model, not even naive, could forecast this series: " + "; ".join(notes))
