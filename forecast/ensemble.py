"""Combinations of models: the average of their forecasts, quantile by quantile.

Averaging the quantiles of a few good but different models (quantile averaging, "Vincentisation")
often beats each of them: their errors are partly independent. Selection scores a combination on
the same out-of-sample calibration forecasts as the single models.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from forecast.base import Holdout, finalize
from forecast.types import Forecast

PREFIX = "ensemble"


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
