"""A tuned policy's periods in ``simulate``'s JSON: each walk-forward choice (what was served from
when), and what the run attained while it was served, as the level-shift watch judges it
(autoscaler/targets/service_levels.py, ``ShiftWatch``: the share of minutes short against the target).
So a run's choices can be read against the days that followed them, and a shift test's restarts
against the days that caused them."""

from __future__ import annotations

from typing import Any

import pandas as pd

from autoscaler.scorecard.figures import short_figures
from autoscaler.simulation.engine import Period
from autoscaler.simulation.runner import PolicyRun


def period_figures(run: PolicyRun, period: Period, origin: pd.Timestamp) -> list[dict[str, Any]]:
    """Per choice in the scored period: its start (UTC), the candidate served, the level asked of the
    past, and the share of minutes short over the period it was served (None: no minute scored)."""
    ledger = run.outcome.ledger
    periods = []
    for choice in run.choices:
        if choice.end_s <= period.scored_from:
            continue
        shorts = short_figures(ledger.between(max(choice.start_s, period.scored_from), choice.end_s))
        attained = shorts.minutes_short_fraction if shorts.minutes_scored else None
        periods.append(
            {
                "start": (origin + pd.Timedelta(seconds=choice.start_s)).isoformat(),
                "candidate": choice.candidate,
                "asked": round(choice.asked, 6),
                "attained": None if attained is None else round(attained, 5),
            }
        )
    return periods
