"""From forecasts to served values: pure functions of (forecast, windows, now), with their reasons.

:func:`decide` is the one composition of them, used by the refresher and the simulator alike, so the
simulator's figures are evidence for what the service serves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

import numpy as np
import pandas as pd

from adapters.types import QUEUED_SOURCE, ScheduledWindow
from forecast.types import Forecast

# What a served metric is: a forecast peak of GPUs (plus windows), that minus GPUs requested now, a
# forecast peak of requests per second, or replicas for that rate.
PlanKind = Literal["demand", "headroom", "rate", "replicas"]
# The kinds of served value that count scheduled GPU windows.
WINDOW_KINDS = frozenset({"demand", "headroom"})
AdjustmentKind = Literal["cap", "maximum", "minimum", "step_down", "residue"]
# More than any count of GPUs, requests per second or replicas (an HPA's are int32) a cluster has:
# a larger value comes from a fault (a diverged forecast, a damaged file), not from demand.
MAX_SERVED_VALUE = 1e9
# Fewer GPUs than this are forecast residue (a model's 1e-16, an average's 1/288), not demand: no MIG
# or time-slicing share is this small. Served, the HPA would round it up to a milli-unit and hold a
# whole placeholder, and its node, for it.
GPU_RESIDUE = 0.01


@dataclass(frozen=True)
class LeadTime:
    """How long a GPU node takes from launch to ready, and where that figure came from."""

    value: timedelta
    source: str


@dataclass(frozen=True)
class Adjustment:
    """A limit that changed a value after the forecast: a cap, a clamp or step-down pacing."""

    kind: AdjustmentKind
    before: float
    after: float
    reason: str


@dataclass(frozen=True)
class Decision:
    value: float
    explanation: str
    # When the forecast peak over the lead time falls (set by forecast_demand, kept by what follows).
    peak_at: datetime | None = None
    adjustments: tuple[Adjustment, ...] = ()

    def adjusted(self, kind: AdjustmentKind, value: float, reason: str, explanation: str) -> Decision:
        """This decision with its value changed by a limit, recorded as an :class:`Adjustment`."""
        adjustment = Adjustment(kind, self.value, value, reason)
        return replace(self, value=value, explanation=explanation, adjustments=(*self.adjustments, adjustment))


def figure(value: float | None, digits: int = 2) -> str:
    """A number as explanations and the page write it: ``digits`` decimals, but three significant
    digits below 1, so that a request rate of 0.00633 reads 0.00633, not 0.01.

    One function for both, so the figure an explanation ends on reads exactly as the served value does.
    """
    if value is None or not math.isfinite(value):
        return "n/a"
    if 0 < abs(value) < 1:
        return f"{value:.{max(digits, 3)}g}"
    return f"{value:.{digits}f}"


def lead_slice(forecast: Forecast, now: datetime, lead_time: timedelta) -> np.ndarray:
    """Positions of forecast steps that cover ``[now, now + lead_time]`` (at least one step).

    A step that ended before ``now`` no longer matters: a last-good forecast kept through an outage
    must not keep serving its stale first steps.
    """
    # Integer nanoseconds: the simulator serves every policy at every step through this function,
    # and pandas comparisons cost more than the rest of it.
    stamps = forecast.timestamps.as_unit("ns").asi8
    step = int(stamps[1] - stamps[0]) if len(stamps) > 1 else 0
    moment = pd.Timestamp(now).value
    start, horizon_end = moment - step, moment + pd.Timedelta(lead_time).value
    mask = (stamps > start) & (stamps <= horizon_end)
    if not mask.any():
        # Past the forecast's end its last step is the best there is; before its start, its first.
        mask[-1 if stamps[-1] <= start else 0] = True
    return mask


def windows_open_within(windows: Sequence[ScheduledWindow], start: datetime, end: datetime) -> list[ScheduledWindow]:
    return [window for window in windows if window.start <= end and window.end > start]


def forecast_demand(
    forecast: Forecast,
    *,
    quantile: float,
    now: datetime,
    lead_time: timedelta,
    windows: Sequence[ScheduledWindow] = (),
) -> Decision:
    """The most demand expected before a node launched now would be ready.

    The maximum of the ``quantile`` forecast over ``[now, now + lead_time]`` plus the GPUs of
    scheduled windows that are open in that interval (known demand is added, not forecast).
    """
    mask = lead_slice(forecast, now, lead_time)
    upper = forecast.quantile(quantile)[mask]
    minutes = int(lead_time.total_seconds() // 60)
    if not np.isfinite(upper).any():
        # A diverged or failed forecast says nothing: not 0 (that would release every node); the
        # caller keeps its last good value (``unservable``).
        explanation = f"p{round(quantile * 100)} forecast of model {forecast.model} has no finite value within the "
        return Decision(math.nan, f"{explanation}{minutes} min lead time")
    peak_position = int(np.nanargmax(upper))
    statistical = float(upper[peak_position])
    open_windows = windows_open_within(windows, now, now + lead_time)
    scheduled = sum(window.gpus for window in open_windows)
    peak_at = forecast.timestamps[int(np.flatnonzero(mask)[peak_position])]
    parts = [
        f"p{round(quantile * 100)} forecast of model {forecast.model} peaks at {figure(statistical)} "
        f"at {peak_at:%H:%M} UTC within the {minutes} min lead time"
    ]
    dated = [window for window in open_windows if window.source != QUEUED_SOURCE]
    if dated:
        parts.append(f"plus scheduled windows {window_names(dated)}")
    if len(dated) < len(open_windows):
        parts.append(f"plus queued {window_names([w for w in open_windows if w.source == QUEUED_SOURCE])}")
    return Decision(max(0.0, statistical + scheduled), "; ".join(parts), peak_at=peak_at.to_pydatetime())


def window_names(windows: Sequence[ScheduledWindow]) -> str:
    return ", ".join(
        f"{w.namespace}/{w.name} ({w.gpus:g} GPUs{'; ' + w.placement if w.placement else ''})" for w in windows
    )


def windows_due(windows: Sequence[ScheduledWindow], now: datetime, lead_time: timedelta) -> list[ScheduledWindow]:
    """Windows that start after ``now`` and within the lead time: what a cron scaler holds ahead; and
    demand waiting in a queue now (``QUEUED_SOURCE``), which no pod requests yet."""
    return [
        window
        for window in windows
        if now < window.start <= now + lead_time
        or (window.source == QUEUED_SOURCE and window.start <= now < window.end)
    ]


def buffer_demand(buffer_gpus: float, situation: Situation, with_windows: bool = True) -> Decision:
    """A static buffer above the GPUs requested now, plus the windows due within the lead time: a
    service-level target's buffer candidates (autoscaler/targets/target_levels.py), the operator's static
    buffer with a cron scaler for declared windows (``with_windows``), or without one."""
    requested = situation.requested_now if math.isfinite(situation.requested_now) else 0.0
    due = windows_due(situation.windows, situation.now, situation.lead_time.value) if with_windows else []
    explanation = f"a buffer of {buffer_gpus:g} GPUs above the GPUs requested now"
    if due:
        names = ", ".join(f"{w.namespace}/{w.name} ({w.gpus:g} GPUs)" for w in due)
        explanation += f", plus scheduled windows due {names}"
    return Decision(requested + buffer_gpus + sum(w.gpus for w in due), explanation)


def headroom(demand: Decision, requested_now: float, source: str = "") -> Decision:
    """Spare GPUs to hold with placeholder pods: forecast demand minus GPUs requested now, at least 0.
    ``source`` says what requested-now holds besides the signal's newest step (Pending pods)."""
    if not math.isfinite(requested_now):
        requested_now = 0.0
    value = max(0.0, demand.value - requested_now)
    of = f" ({source})" if source else ""
    return replace(
        demand,
        value=value,
        explanation=f"{figure(demand.value)} GPUs forecast minus {figure(requested_now)} requested now{of} = "
        f"{figure(value)} "
        f"placeholder GPUs ({demand.explanation})",
    )


def drop_residue(decision: Decision) -> Decision:
    """A count of GPUs below ``GPU_RESIDUE`` served as 0."""
    if not 0 < decision.value < GPU_RESIDUE:
        return decision
    text = f"{decision.explanation}; {figure(decision.value)} GPUs is forecast residue, served as 0"
    return decision.adjusted("residue", 0.0, "below 0.01 GPU", text)


def unservable(value: float) -> str | None:
    """Why ``value`` must not be served, or None: every served value, computed or restored, is checked."""
    if not math.isfinite(value):
        return f"{value} is not a finite number"
    if value < 0:
        return f"{value:g} is negative"
    if value > MAX_SERVED_VALUE:
        return f"{value:g} is above {MAX_SERVED_VALUE:g}, more than any cluster has"
    return None


def last_observed(series: pd.Series) -> float:
    observed = series.dropna()
    return float(observed.iloc[-1]) if len(observed) else math.nan


@dataclass(frozen=True)
class Cap:
    """An upper bound on a served value and why it exists (said in the explanation when it bites)."""

    limit: float
    reason: str


def apply_caps(decision: Decision, caps: Sequence[Cap]) -> Decision:
    """The decision lowered to the tightest cap below it, with the cap named."""
    binding = min((cap for cap in caps if math.isfinite(cap.limit)), key=lambda cap: cap.limit, default=None)
    if binding is None or decision.value <= binding.limit:
        return decision
    limit = max(0.0, binding.limit)
    text = f"{decision.explanation}; capped at {limit:g} by {binding.reason}"
    return decision.adjusted("cap", limit, binding.reason, text)


def clamp(decision: Decision, minimum: float | None, maximum: float | None) -> Decision:
    if maximum is not None and decision.value > maximum:
        text = f"{decision.explanation}; clamped to the maximum {maximum:g}"
        return decision.adjusted("maximum", maximum, "max_value", text)
    if minimum is not None and decision.value < minimum:
        text = f"{decision.explanation}; raised to the minimum {minimum:g}"
        return decision.adjusted("minimum", minimum, "min_value", text)
    return decision


def limit_step_down(
    decision: Decision,
    previous: tuple[float, datetime] | None,
    now: datetime,
    max_decrease_per_minute: float | None,
) -> Decision:
    """Fall no faster than ``max_decrease_per_minute`` from the previous served value.

    Rises pass at once (being late costs GPU-minutes short); falls are paced so that placeholders and
    nodes are not thrashed when a window closes or the forecast dips.
    """
    if max_decrease_per_minute is None or previous is None:
        return decision
    previous_value, previous_at = previous
    minutes = max(0.0, (now - previous_at).total_seconds() / 60)
    floor = previous_value - max_decrease_per_minute * minutes
    if decision.value >= floor:
        return decision
    text = (
        f"{decision.explanation}; stepping down from {figure(previous_value)} by at most "
        f"{max_decrease_per_minute:g} per minute (target {figure(decision.value)}): {figure(floor)} now"
    )
    return decision.adjusted("step_down", floor, "max_decrease_per_minute", text)


@dataclass(frozen=True)
class ReplicaCapacity:
    """Requests per second one replica serves at the target GPU utilisation, learned from history."""

    requests_per_second: float
    intercept: float
    slope: float
    samples: int


def learn_replica_capacity(
    utilization: pd.Series, requests_per_replica: pd.Series, target_utilization: float
) -> ReplicaCapacity | None:
    """Fit utilisation = intercept + slope x (requests per replica) robustly (Huber) and solve for the
    target. ``None`` when the history cannot say (too few points, or load does not raise utilisation)."""
    from sklearn.linear_model import HuberRegressor

    joined = pd.concat([utilization, requests_per_replica], axis=1, join="inner").to_numpy(dtype=float)
    usable = joined[np.isfinite(joined).all(axis=1) & (joined[:, 1] > 0)]
    if len(usable) < 12 or len(np.unique(usable[:, 1])) < 3:
        return None
    model = HuberRegressor().fit(usable[:, [1]], usable[:, 0])
    slope, intercept = float(model.coef_[0]), float(model.intercept_)
    if slope <= 0 or target_utilization <= intercept:
        return None
    return ReplicaCapacity((target_utilization - intercept) / slope, intercept, slope, len(usable))


def replicas_for(rate: Decision, capacity: ReplicaCapacity | None, target_utilization: float) -> Decision | None:
    if capacity is None:
        return None
    replicas = math.ceil(rate.value / capacity.requests_per_second) if rate.value > 0 else 0
    return replace(
        rate,
        value=float(replicas),
        explanation=f"{figure(rate.value)} requests/s / {figure(capacity.requests_per_second)} per replica at "
        f"{target_utilization:g}% GPU utilisation (Huber fit on {capacity.samples} points) = {replicas} replicas "
        f"({rate.explanation})",
    )


@dataclass(frozen=True)
class Rule:
    """How one served metric is made from a forecast, and the limits it is served within."""

    kind: PlanKind
    quantile: float = 0.9
    min_value: float | None = None
    max_value: float | None = None
    max_decrease_per_minute: float | None = None
    target_utilization: float = 60.0


@dataclass(frozen=True)
class Situation:
    """What one decision sees: the forecast and the facts of the moment."""

    forecast: Forecast
    now: datetime
    lead_time: LeadTime
    windows: Sequence[ScheduledWindow] = ()  # the series' own windows (its pool's)
    requested_now: float = math.nan  # headroom: GPUs requested now (the newest complete step's peak)
    requested_now_source: str = ""  # headroom: what requested-now holds besides the signal (Pending pods)
    caps: Sequence[Cap] = ()  # headroom: ResourceQuota and NodePool limits
    previous: tuple[float, datetime] | None = None  # the value served last and when, for pacing
    capacity: ReplicaCapacity | None = None  # replicas: one replica's learned capacity


def decide(
    rule: Rule, situation: Situation, buffer_gpus: float | None = None, buffer_windows: bool = True
) -> Decision | None:
    """The served value and its reasons; ``None`` for replicas while no capacity can be learned.

    The forecast peak over the lead time plus open windows (or, for a headroom given ``buffer_gpus``,
    :func:`buffer_demand`, with the windows due unless not ``buffer_windows``); for headroom, minus
    GPUs requested now and capped; then clamped to the rule's bounds and paced on the way down.
    """
    if buffer_gpus is not None and rule.kind == "headroom":
        demand = buffer_demand(buffer_gpus, situation, buffer_windows)
    else:
        demand = forecast_demand(
            situation.forecast,
            quantile=rule.quantile,
            now=situation.now,
            lead_time=situation.lead_time.value,
            windows=situation.windows if rule.kind in WINDOW_KINDS else (),
        )
    decision: Decision | None = demand
    if not math.isfinite(demand.value):
        return demand  # nothing to subtract from, cap or clamp: unservable as it is
    if rule.kind == "replicas":
        decision = replicas_for(demand, situation.capacity, rule.target_utilization)
    elif rule.kind == "headroom":
        decision = apply_caps(headroom(demand, situation.requested_now, situation.requested_now_source), situation.caps)
    if decision is None:
        return None
    if rule.kind in WINDOW_KINDS:
        decision = drop_residue(decision)
    decision = clamp(decision, rule.min_value, rule.max_value)
    decision = limit_step_down(decision, situation.previous, situation.now, rule.max_decrease_per_minute)
    return replace(decision, explanation=f"{decision.explanation}; lead time {situation.lead_time.source}")
