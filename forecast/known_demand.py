"""Known future demand: scheduled windows on top of a forecast, and known jobs out of history.

A window is ``(start, end, gpus)`` with tz-aware datetimes. Windows come from CronJobs or the config
file; this module only does the arithmetic, so it takes plain tuples.
"""

from __future__ import annotations

import math
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
    # Plain arrays (nanoseconds since the epoch, UTC): a refresh, and the simulator at every forecast
    # step, runs this over two weeks of history with a window per day, and pandas masks cost ms each.
    index = pd.DatetimeIndex(history.index)
    if len(index) and index.tz is None:
        raise TypeError("the history index must be tz-aware to compare it with window times")
    stamps = index.as_unit("ns").asi8  # Timestamp.value is in nanoseconds whatever the index unit
    values = history.to_numpy(dtype=np.float64, copy=True)
    notes: list[str] = []
    step = 0
    if len(stamps) > 1:
        spacings, counts = np.unique(np.diff(stamps), return_counts=True)
        step = int(spacings[np.argmax(counts)])  # the most common spacing (the smallest on ties)
    for start, end, gpus in windows:
        begin, finish = _utc(start), _utc(end)
        inside = (stamps >= begin.value) & (stamps < finish.value)
        if not inside.any() or gpus <= 0:
            continue
        reach = max(finish.value - begin.value, 12 * step)
        before = values[(stamps < begin.value) & (stamps >= begin.value - reach)]
        during = values[inside]
        baseline = _nanmedian(before)
        rise = _nanmedian(during) - baseline
        if not np.isfinite(rise) or rise < IDENTIFIABLE_SHARE * gpus:
            notes.append(f"window {begin.isoformat()} ({gpus:g} GPUs) not identifiable in history; kept")
            continue
        values[inside] = np.maximum(during - gpus, 0.0)
        notes.append(f"removed {gpus:g} GPUs of a known job from {begin.isoformat()} to {finish.isoformat()}")
    return pd.Series(values, index=history.index, name=history.name), tuple(notes)


def _nanmedian(values: np.ndarray) -> float:
    """The median of the observed values; NaN when there are none (as pandas' median)."""
    observed = values[~np.isnan(values)]
    return float(np.median(observed)) if len(observed) else math.nan
