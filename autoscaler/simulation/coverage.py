"""How often what a policy served covered the demand that came: the share of scored steps at which
the GPUs requested plus the headroom served reached the peak of the GPUs requested over the lead
time that followed: the live scorecard's coverage (``autoscaler.scorecard.figures.coverage``, the one
definition), judged at every scored step of a replay. For a quantile ``q`` about ``q`` of the steps is
what was asked.
"""

from __future__ import annotations

import math

import numpy as np

from autoscaler.scorecard.figures import coverage
from autoscaler.simulation.engine import Period
from autoscaler.simulation.inputs import Workload


def headroom_coverage(workload: Workload, headroom: np.ndarray, lead_time_s: float, period: Period) -> float | None:
    """The share of scored steps whose headroom covered the rise of demand over the next ``lead_time_s``
    (the steps it spans after the decision) above the GPUs requested then; None when no step could be
    judged. A headroom that could not be served (NaN) is not judged, as the scorecard does not judge it."""
    step_s = workload.step_s
    lead_steps = max(1, math.ceil(lead_time_s / step_s - 1e-9))
    first = math.ceil(period.scored_from / step_s - 1e-9)
    last = min(workload.steps, math.floor(period.end / step_s + 1e-9)) - lead_steps  # exclusive
    if last <= first:
        return None
    # ahead[t]: the highest GPUs requested within steps t+1 .. t+lead_steps.
    ahead = np.lib.stride_tricks.sliding_window_view(workload.peak[1:], lead_steps).max(axis=1)
    realized_rise = ahead[first:last] - workload.observed[first:last]
    covered, judged = coverage(np.asarray(headroom, dtype=np.float64)[first:last], realized_rise)
    return covered / judged if judged else None
