"""Combinations of models: the average of their forecasts, quantile by quantile.

Averaging the quantiles of a few good but different models (quantile averaging, "Vincentisation")
often beats each of them: their errors are partly independent. Selection scores a combination on
the same out-of-sample calibration forecasts as the single models, and ``confidence_set`` chooses
which models to average: the best and those not clearly worse than it on those forecasts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from forecast.base import Holdout, finalize
from forecast.types import Forecast

PREFIX = "ensemble"

# Models within CONFIDENCE_Z standard errors of the best calibration loss are averaged (at most
# MAX_SET_SIZE of them); errors are compared on blocks of BLOCK_ORIGINS consecutive origins.
CONFIDENCE_Z = 1.0
MAX_SET_SIZE = 4
BLOCK_ORIGINS = 12


def ensemble_name(members: Sequence[str]) -> str:
    """A stable name: the average does not depend on the members' order."""
    return f"{PREFIX}({'+'.join(sorted(members))})"


def ensemble_members(name: str) -> tuple[str, ...] | None:
    """The members of an ensemble name (``ensemble(a+b)`` -> ``("a", "b")``); None for a single model."""
    if not (name.startswith(f"{PREFIX}(") and name.endswith(")")):
        return None
    return tuple(name[len(PREFIX) + 1 : -1].split("+"))


def combine_holdouts(holdouts: Sequence[Holdout]) -> Holdout:
    """The average of members' out-of-sample forecasts (same origins and steps in each)."""
    steps = min(holdout.mean.shape[1] for holdout in holdouts)
    rows = min(holdout.mean.shape[0] for holdout in holdouts)
    # Members share the calibration window's end; align on the most recent ``rows`` origins.
    actual = holdouts[0].actual[-rows:, :steps]
    mean = np.mean([holdout.mean[-rows:, :steps] for holdout in holdouts], axis=0)
    upper = np.mean([holdout.upper[-rows:, :steps] for holdout in holdouts], axis=0)
    return Holdout(actual=actual, mean=mean, upper=upper)


def combine_forecasts(forecasts: Sequence[Forecast], nonnegative: bool) -> Forecast:
    first = forecasts[0]
    mean = np.mean([forecast.mean for forecast in forecasts], axis=0)
    paths = {level: np.mean([forecast.quantile(level) for forecast in forecasts], axis=0) for level in first.quantiles}
    mean, paths = finalize(mean, paths, nonnegative)
    return Forecast(
        model=ensemble_name([forecast.model for forecast in forecasts]),
        timestamps=first.timestamps,
        mean=mean,
        quantiles=paths,
    ).validate()


def _per_origin_loss(holdout: Holdout, level: float) -> np.ndarray:
    """Pinball loss per calibration origin, averaged over its steps (NaN where nothing observed)."""
    error = holdout.actual - holdout.upper
    loss = np.maximum(level * error, (level - 1.0) * error)
    observed = ~np.isnan(loss)
    counts = observed.sum(axis=1)
    totals = np.where(observed, loss, 0.0).sum(axis=1)
    return np.where(counts > 0, totals / np.maximum(counts, 1), np.nan)


def confidence_set(ranked: list[str], holdouts: dict[str, Holdout], policy_quantile: float) -> tuple[str, ...]:
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
