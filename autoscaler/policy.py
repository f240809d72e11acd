"""From forecasts to served values: pure functions of (forecast, windows, now), with their reasons."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import pandas as pd

from adapters.types import ScheduledWindow
from forecast.types import Forecast


@dataclass(frozen=True)
class LeadTime:
    """How long a GPU node takes from launch to ready, and where that figure came from."""

    value: timedelta
    source: str


@dataclass(frozen=True)
class Decision:
    value: float
    explanation: str


def _lead_slice(forecast: Forecast, now: datetime, lead_time: timedelta) -> np.ndarray:
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
    mask = _lead_slice(forecast, now, lead_time)
    upper = forecast.quantile(quantile)[mask]
    peak_position = int(np.nanargmax(upper)) if np.isfinite(upper).any() else 0
    statistical = float(upper[peak_position]) if np.isfinite(upper[peak_position]) else 0.0
    open_windows = windows_open_within(windows, now, now + lead_time)
    scheduled = sum(window.gpus for window in open_windows)
    peak_at = forecast.timestamps[int(np.flatnonzero(mask)[peak_position])]
    minutes = int(lead_time.total_seconds() // 60)
    parts = [
        f"p{round(quantile * 100)} forecast of model {forecast.model} peaks at {statistical:.2f} "
        f"at {peak_at:%H:%M} UTC within the {minutes} min lead time"
    ]
    if open_windows:
        names = ", ".join(f"{w.namespace}/{w.name} ({w.gpus:g} GPUs)" for w in open_windows)
        parts.append(f"plus scheduled windows {names}")
    return Decision(max(0.0, statistical + scheduled), "; ".join(parts))


def headroom(demand: Decision, requested_now: float) -> Decision:
    """Spare GPUs to hold with placeholder pods: forecast demand minus GPUs requested now, at least 0."""
    if not math.isfinite(requested_now):
        requested_now = 0.0
    value = max(0.0, demand.value - requested_now)
    return Decision(
        value,
        f"{demand.value:.2f} GPUs forecast minus {requested_now:.2f} requested now = {value:.2f} "
        f"placeholder GPUs ({demand.explanation})",
    )


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
    return Decision(limit, f"{decision.explanation}; capped at {limit:g} by {binding.reason}")


def clamp(decision: Decision, minimum: float | None, maximum: float | None) -> Decision:
    if maximum is not None and decision.value > maximum:
        return Decision(maximum, f"{decision.explanation}; clamped to the maximum {maximum:g}")
    if minimum is not None and decision.value < minimum:
        return Decision(minimum, f"{decision.explanation}; raised to the minimum {minimum:g}")
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
    return Decision(
        floor,
        f"{decision.explanation}; stepping down from {previous_value:.2f} by at most "
        f"{max_decrease_per_minute:g} per minute (target {decision.value:.2f})",
    )


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
    return Decision(
        float(replicas),
        f"{rate.value:.2f} requests/s / {capacity.requests_per_second:.2f} per replica at "
        f"{target_utilization:g}% GPU utilisation (Huber fit on {capacity.samples} points) = {replicas} replicas "
        f"({rate.explanation})",
    )
