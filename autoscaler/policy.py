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
    """Positions of forecast steps inside ``[now, now + lead_time]`` (at least the first step)."""
    stamps = forecast.timestamps
    horizon_end = pd.Timestamp(now) + pd.Timedelta(lead_time)
    mask = np.asarray(stamps <= horizon_end)
    if not mask.any():
        mask[0] = True
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
    peak_at = forecast.timestamps[mask][peak_position]
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
