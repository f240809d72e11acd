"""The typed record behind every served value: what it was computed from and what shaped it.

The refresher writes one :class:`Provenance` per served series; the inspection API, the page and
self-metrics read its fields. Values restored after a restart carry none (their forecast is gone).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import pandas as pd

from adapters.types import ScheduledWindow
from autoscaler.policy import Adjustment, LeadTime
from forecast.types import Forecast

# What a forecast worker did for a refresh: a full selection, a refit of the selected model, or a
# forecast from the newest data with the models it holds.
WorkKind = Literal["select", "refit", "update"]


@dataclass(frozen=True)
class TargetChoice:
    """What a headroom served to a service-level target chose, when and why (``targets.target_levels``),
    carried with the value so the API, the page and ``/metrics`` read it from the snapshot."""

    kind: str  # the figure the target is stated on (``scorecard.figures.TARGET_KINDS``)
    value: float  # at most this much of it
    pool: str  # the pool whose live scorecard judges it
    window_s: float  # the tune window: the past each choice is judged on
    chosen: str  # the candidate served, in words
    chosen_at: datetime | None  # None until the first choice
    reason: str
    replay_attained: float | None  # what the chosen candidate attained in the replay over the tune window


@dataclass(frozen=True)
class Provenance:
    """Everything a served value came from, in the order the policy used it."""

    model: str  # the selected model (or ensemble) that made the forecast
    quantile: float  # the forecast quantile the policy took its peak from
    forecast: Forecast
    history: pd.Series  # the signal's history the forecast saw
    scores: Mapping[str, Mapping[str, float]]  # backtest scores of every candidate at selection
    notes: tuple[str, ...]  # what the engine and the worker noted (dropped models, removed windows)
    work: WorkKind
    fit_seconds: float
    lead_time: LeadTime
    decided_at: datetime  # the moment the policy looked ahead from (its lead time starts here)
    windows: tuple[ScheduledWindow, ...]  # the scheduled windows the series provisions for
    peak_at: datetime | None  # when the forecast peak over the lead time falls
    requested_now: float | None  # for headroom: what was subtracted
    adjustments: tuple[Adjustment, ...]  # caps, clamps and pacing, in the order they applied
    target: TargetChoice | None = None  # with a service-level target: the choice served

    @property
    def lead_time_seconds(self) -> int:
        return int(self.lead_time.value.total_seconds())
