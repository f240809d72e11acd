"""Known future demand: scheduled windows on top of a forecast, and known jobs out of history.

A window is ``(start, end, gpus)`` with tz-aware datetimes. Windows come from CronJobs or the config
file; this module only does the arithmetic, so it takes plain tuples.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime

import numpy as np
import pandas as pd

from forecast.types import Forecast

Window = tuple[datetime, datetime, float]

# A past window counts as identifiable when the series rose by at least this share of its GPUs.
IDENTIFIABLE_SHARE = 0.5


def _utc(moment: datetime) -> pd.Timestamp:
    stamp = pd.Timestamp(moment)
    if stamp.tzinfo is None:
        raise ValueError(f"window time {moment!r} must be tz-aware")
    return stamp.tz_convert("UTC")


def window_demand(timestamps: pd.DatetimeIndex, step: pd.Timedelta, windows: Iterable[Window]) -> np.ndarray:
    """GPUs that scheduled windows need in each step ``[t, t + step)`` (any overlap counts in full:
    provisioning must cover a job that starts part-way through a step)."""
    demand = np.zeros(len(timestamps))
    for start, end, gpus in windows:
        begin, finish = _utc(start), _utc(end)
        if finish <= begin:
            continue
        overlaps = (timestamps < finish) & (timestamps + step > begin)
        demand[np.asarray(overlaps)] += gpus
    return demand


def add_scheduled_windows(forecast: Forecast, windows: Iterable[Window]) -> Forecast:
    """The forecast plus scheduled demand on the mean and on every quantile."""
    timestamps = forecast.timestamps
    step = timestamps[1] - timestamps[0] if len(timestamps) > 1 else pd.Timedelta(minutes=5)
    extra = window_demand(timestamps, pd.Timedelta(step), list(windows))
    if not extra.any():
        return forecast
    return replace(
        forecast,
        mean=forecast.mean + extra,
        quantiles={level: values + extra for level, values in forecast.quantiles.items()},
        notes=(*forecast.notes, f"scheduled windows add up to {extra.max():g} GPUs"),
    ).validate()


def remove_known_jobs(history: pd.Series, windows: Iterable[Window]) -> tuple[pd.Series, tuple[str, ...]]:
    """History with past runs of known recurring jobs subtracted, so the statistical model does not
    learn them (the schedule re-adds them). A window is subtracted only when the series visibly rose
    by its GPUs during it; otherwise it is left alone and a note says why."""
    cleaned = history.astype(np.float64).copy()
    notes: list[str] = []
    index = pd.DatetimeIndex(cleaned.index)
    step = pd.Timedelta(pd.Series(index[1:] - index[:-1]).mode().iloc[0]) if len(index) > 1 else pd.Timedelta(0)
    for start, end, gpus in windows:
        begin, finish = _utc(start), _utc(end)
        inside = (index >= begin) & (index < finish)
        if not inside.any() or gpus <= 0:
            continue
        before = cleaned[(index < begin) & (index >= begin - max(finish - begin, 12 * step))]
        during = cleaned[inside]
        baseline = before.median() if before.notna().any() else np.nan
        rise = during.median() - baseline
        if not np.isfinite(rise) or rise < IDENTIFIABLE_SHARE * gpus:
            notes.append(f"window {begin.isoformat()} ({gpus:g} GPUs) not identifiable in history; kept")
            continue
        cleaned[inside] = np.maximum(during - gpus, 0.0)
        notes.append(f"removed {gpus:g} GPUs of a known job from {begin.isoformat()} to {finish.isoformat()}")
    return cleaned, tuple(notes)
