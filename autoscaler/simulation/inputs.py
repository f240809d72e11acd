"""What the simulator replays: a demand series or a pod trace, plus declared training windows.

Simulation time is seconds since the first step of the input (``Workload.origin``). Demand read from
a CSV is *fluid*: GPUs wanted per step, served one GPU at a time, with no identity. Pods (from a pod
trace, and the pods of ``--schedule`` windows) are discrete: each waits for its GPUs in arrival
order and then runs for its duration.
"""

from __future__ import annotations

import gzip
import math
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from adapters.kubernetes.cron_schedule import CronScheduleError, fire_times
from adapters.types import ScheduledWindow
from forecast.durations import parse_duration, parse_positive_duration
from forecast.io import SeriesFileError, aggregate, read_series_csv

# Anonymised trace seconds (the Alibaba pod lists) are counted from this instant: an arbitrary,
# fixed choice, the same as the test helpers use, so that cron schedules land on the same minutes.
POD_TRACE_ORIGIN = pd.Timestamp("2023-01-01T00:00:00Z")
ALIBABA_COLUMNS = ("creation_time", "scheduled_time", "deletion_time", "num_gpu")
GENERIC_COLUMNS = ("arrival", "duration", "gpus")


class InputError(ValueError):
    """The input cannot be simulated; the message names the file, column or flag at fault."""


@dataclass(frozen=True)
class Pods:
    """Discrete real pods: arrival and duration in seconds, whole GPUs each, and whether the pod
    belongs to a declared (``--schedule``) window."""

    arrival: np.ndarray
    duration: np.ndarray
    gpus: np.ndarray
    from_window: np.ndarray

    @staticmethod
    def empty() -> Pods:
        return Pods(np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool))

    def __len__(self) -> int:
        return len(self.arrival)

    def select(self, mask: np.ndarray) -> Pods:
        """The pods where ``mask`` holds (a boolean mask or an index order)."""
        return Pods(self.arrival[mask], self.duration[mask], self.gpus[mask], self.from_window[mask])

    def concat(self, other: Pods) -> Pods:
        """Both sets of pods, in arrival order."""
        both = Pods(
            np.concatenate([self.arrival, other.arrival]),
            np.concatenate([self.duration, other.duration]),
            np.concatenate([self.gpus, other.gpus]),
            np.concatenate([self.from_window, other.from_window]),
        )
        return both.select(np.argsort(both.arrival, kind="stable"))


@dataclass(frozen=True)
class WindowSchedule:
    """One ``--schedule "CRON;GPUS;DURATION"``: a recurring training job known in advance."""

    cron: str
    gpus: int
    duration_s: float
    text: str


@dataclass(frozen=True)
class Workload:
    """Real demand on a regular grid of ``step_s`` seconds starting at ``origin``.

    ``base`` is fluid demand per step (CSV mode; zeros with a pod trace). ``observed`` is what
    monitoring reports at each step start: GPUs requested by real pods, counting pods from arrival
    for their duration (waits are not known in advance). ``peak`` and ``trough`` are the highest and
    lowest requested GPUs within each step, for the oracle.
    """

    source: str
    origin: pd.Timestamp
    step_s: float
    base: np.ndarray
    pods: Pods
    windows: tuple[ScheduledWindow, ...]
    observed: np.ndarray
    peak: np.ndarray
    trough: np.ndarray

    @property
    def steps(self) -> int:
        return len(self.base)

    @property
    def end_s(self) -> float:
        return self.steps * self.step_s

    def index(self) -> pd.DatetimeIndex:
        return pd.DatetimeIndex(self.origin + pd.to_timedelta(np.arange(self.steps) * self.step_s, unit="s"))

    def window_starts_s(self) -> np.ndarray:
        """The declared windows' start times, in seconds from the origin (as the run's clock)."""
        return np.asarray([(pd.Timestamp(window.start) - self.origin).total_seconds() for window in self.windows])


# ----------------------------------------------------------------------------- schedules


def parse_schedule(text: str) -> WindowSchedule:
    """``CRON;GPUS;DURATION`` (UTC cron, whole GPUs, e.g. ``0 2 * * *;16;2h``)."""
    parts = [part.strip() for part in text.split(";")]
    if len(parts) != 3:
        raise InputError(f"--schedule {text!r}: expected 'CRON;GPUS;DURATION', e.g. '0 2 * * *;16;2h'")
    cron, gpus_text, duration_text = parts
    try:
        gpus = float(gpus_text)
    except ValueError:
        raise InputError(f"--schedule {text!r}: GPUS {gpus_text!r} is not a number") from None
    if not math.isfinite(gpus) or gpus < 1 or gpus != int(gpus):
        raise InputError(f"--schedule {text!r}: GPUS must be a whole number of GPUs, at least 1")
    try:
        duration = parse_positive_duration(duration_text)
    except ValueError as error:
        raise InputError(f"--schedule {text!r}: {error}") from None
    try:  # validate the expression now, so a typo fails before any work is done
        start = POD_TRACE_ORIGIN.to_pydatetime()
        fire_times(cron, "UTC", start, start + timedelta(days=1), limit=1)
    except CronScheduleError as error:
        raise InputError(f"--schedule {text!r}: {error}") from None
    return WindowSchedule(cron, int(gpus), float(duration.total_seconds()), text)


def expand_schedules(
    schedules: tuple[WindowSchedule, ...], origin: pd.Timestamp, end_s: float, gpus_per_node: int
) -> tuple[tuple[ScheduledWindow, ...], Pods]:
    """Every firing inside the input as a window (what the policies may know) and its pods.

    A window's GPUs arrive at the fire time as pods of whole nodes (a distributed training job asks
    for full nodes), the last pod taking the remainder.
    """
    windows: list[ScheduledWindow] = []
    arrival: list[float] = []
    duration: list[float] = []
    gpus: list[int] = []
    start = origin.to_pydatetime()
    end = (origin + pd.Timedelta(seconds=end_s)).to_pydatetime()
    for number, schedule in enumerate(schedules):
        for fire in fire_times(schedule.cron, "UTC", start, end, limit=1_000_000):
            windows.append(
                ScheduledWindow(
                    source="config",
                    namespace="simulation",
                    name=f"schedule-{number}",
                    start=fire,
                    end=fire + timedelta(seconds=schedule.duration_s),
                    gpus=float(schedule.gpus),
                )
            )
            left = schedule.gpus
            while left > 0:
                size = min(left, gpus_per_node)
                arrival.append((pd.Timestamp(fire) - origin).total_seconds())
                duration.append(schedule.duration_s)
                gpus.append(size)
                left -= size
    windows.sort(key=lambda window: window.start)
    pods = Pods(
        np.asarray(arrival, dtype=np.float64),
        np.asarray(duration, dtype=np.float64),
        np.asarray(gpus, dtype=np.int64),
        np.ones(len(arrival), dtype=bool),
    )
    return tuple(windows), pods.select(np.argsort(pods.arrival, kind="stable"))


# ----------------------------------------------------------------------------- demand levels


def pod_levels(pods: Pods, steps: int, step_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPUs requested by pods (each from arrival for its duration) at each step start, and the
    highest and lowest level within each step."""
    if len(pods) == 0:
        zeros = np.zeros(steps)
        return zeros, zeros.copy(), zeros.copy()
    end_s = steps * step_s
    times = np.concatenate([pods.arrival, pods.arrival + pods.duration])
    changes = np.concatenate([pods.gpus, -pods.gpus]).astype(np.float64)
    order = np.lexsort((changes, times))  # at equal times, departures (negative) first
    times, changes = times[order], changes[order]
    level_after = np.cumsum(changes)
    step_starts = np.arange(steps) * step_s
    # Level at each step start: after every change at or before it.
    before = np.searchsorted(times, step_starts, side="right")
    at_start = np.where(before > 0, level_after[np.maximum(before - 1, 0)], 0.0)
    peak, trough = at_start.copy(), at_start.copy()
    inside = (times > 0) & (times < end_s)
    if inside.any():
        step_of = (times[inside] // step_s).astype(np.int64)
        levels = level_after[inside]
        np.maximum.at(peak, step_of, levels)
        np.minimum.at(trough, step_of, levels)
    return at_start, peak, trough


def make_workload(
    source: str, origin: pd.Timestamp, step_s: float, base: np.ndarray, pods: Pods, windows: tuple[ScheduledWindow, ...]
) -> Workload:
    """A workload from fluid demand per step and pods (with what monitoring would observe)."""
    at_start, peak, trough = pod_levels(pods, len(base), step_s)
    return Workload(
        source=source,
        origin=origin,
        step_s=step_s,
        base=base,
        pods=pods,
        windows=windows,
        observed=base + at_start,
        peak=base + peak,
        trough=base + trough,
    )


def demand_workload(
    path: Path, step: pd.Timedelta, schedules: tuple[WindowSchedule, ...], gpus_per_node: int
) -> Workload:
    """A backtest CSV (``timestamp,value``: GPUs wanted), averaged per step; gaps carry the last value."""
    try:
        series = aggregate(read_series_csv(path), step)
    except SeriesFileError as error:
        raise InputError(str(error)) from None
    except ValueError as error:
        raise InputError(f"{path}: {error}") from None
    values = series.to_numpy(dtype=np.float64)
    if np.isnan(values).all():
        raise InputError(f"{path}: every value is a gap")
    if (values[~np.isnan(values)] < 0).any():
        raise InputError(f"{path}: column 'value': demand in GPUs must not be negative")
    # A gap is unknown demand; the simulation needs some: carry the last known value (leading: the first).
    filled = pd.Series(values).ffill().bfill().to_numpy()
    origin = pd.Timestamp(series.index[0])
    step_s = float(step.total_seconds())
    windows, pods = expand_schedules(schedules, origin, len(filled) * step_s, gpus_per_node)
    return make_workload(str(path), origin, step_s, filled, pods, windows)


# ----------------------------------------------------------------------------- pod traces


def _read_table(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                return pd.read_csv(handle)
        return pd.read_csv(path)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise InputError(f"{path}: unreadable CSV: {' '.join(str(error).split())}") from None


def _numeric(frame: pd.DataFrame, column: str, path: Path, *, allow_empty: bool = False) -> np.ndarray:
    values = pd.to_numeric(frame[column], errors="coerce")
    bad = values.isna() & (frame[column].notna() if allow_empty else True)
    if bad.any():
        line = int(np.flatnonzero(bad.to_numpy())[0]) + 2  # the header is line 1
        raise InputError(f"{path}: line {line}, column {column!r}: {frame[column].iloc[line - 2]!r} is not a number")
    return values.to_numpy(dtype=np.float64)


def alibaba_pods(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An Alibaba v2023 pod list's GPU pods as ``--pods`` reads them: arrival, duration and GPUs each
    (benchmarks/slo_shift.py cuts and scales them)."""
    arrival, duration, gpus, _, _ = _alibaba_pods(_read_table(path), path)
    return arrival, duration, gpus


def _alibaba_pods(frame: pd.DataFrame, path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float]:
    """Alibaba v2023 ``openb_pod_list_*``: arrival = creation, duration = deletion - scheduled,
    inside the observation window [min deletion, max deletion]. Pods never scheduled and pods
    without GPUs do not need GPU nodes and are left out."""
    creation = _numeric(frame, "creation_time", path)
    scheduled = _numeric(frame, "scheduled_time", path, allow_empty=True)
    deletion = _numeric(frame, "deletion_time", path)
    gpus = _numeric(frame, "num_gpu", path)
    window_start, window_end = float(np.min(deletion)), float(np.max(deletion))
    keep = ~np.isnan(scheduled) & (gpus > 0)
    duration = deletion - scheduled
    if (duration[keep] < 0).any():
        line = int(np.flatnonzero(keep & (duration < 0))[0]) + 2
        raise InputError(f"{path}: line {line}: deletion_time is before scheduled_time")
    return creation[keep], duration[keep], gpus[keep], window_start, window_end


def _generic_pods(frame: pd.DataFrame, path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float]:
    """``arrival,duration,gpus``: arrival in Unix seconds or RFC3339, duration in seconds or as text."""
    raw_arrival = frame["arrival"]
    numeric = pd.to_numeric(raw_arrival, errors="coerce")
    if numeric.notna().all():
        arrival = numeric.to_numpy(dtype=np.float64)
    else:
        stamps = pd.to_datetime(raw_arrival, utc=True, errors="coerce", format="ISO8601")
        if stamps.isna().any():
            line = int(np.flatnonzero(stamps.isna().to_numpy())[0]) + 2
            raise InputError(f"{path}: line {line}, column 'arrival': neither Unix seconds nor RFC3339")
        arrival = (stamps - POD_TRACE_ORIGIN).dt.total_seconds().to_numpy(dtype=np.float64)
    durations = []
    for position, text in enumerate(frame["duration"].astype(str)):
        try:
            durations.append(float(text))
        except ValueError:
            try:
                durations.append(float(parse_duration(text).total_seconds()))
            except ValueError:
                raise InputError(
                    f"{path}: line {position + 2}, column 'duration': {text!r} is not a duration"
                ) from None
    duration = np.asarray(durations, dtype=np.float64)
    if (duration < 0).any() or not np.isfinite(duration).all():
        raise InputError(f"{path}: column 'duration': durations must be finite and not negative")
    gpus = _numeric(frame, "gpus", path)
    keep = gpus > 0
    if not keep.any():
        raise InputError(f"{path}: no pod requests a GPU")
    return arrival[keep], duration[keep], gpus[keep], float(arrival.min()), float((arrival + duration).max())


def pod_workload(path: Path, step: pd.Timedelta, schedules: tuple[WindowSchedule, ...], gpus_per_node: int) -> Workload:
    """A pod trace: the Alibaba v2023 pod list, or a CSV with ``arrival,duration,gpus``."""
    frame = _read_table(path)
    columns = set(frame.columns)
    if set(ALIBABA_COLUMNS) <= columns:
        arrival, duration, gpus, window_start, window_end = _alibaba_pods(frame, path)
    elif set(GENERIC_COLUMNS) <= columns:
        arrival, duration, gpus, window_start, window_end = _generic_pods(frame, path)
    else:
        raise InputError(
            f"{path}: missing columns: a pod trace has {', '.join(ALIBABA_COLUMNS)} (Alibaba v2023 pod list) "
            f"or {', '.join(GENERIC_COLUMNS)} (found {', '.join(map(str, frame.columns))})"
        )
    if len(arrival) == 0:
        raise InputError(f"{path}: no pod requests a GPU")
    if (gpus != np.round(gpus)).any():
        raise InputError(f"{path}: GPUs per pod must be whole numbers")
    if gpus.max() > gpus_per_node:
        raise InputError(
            f"{path}: a pod requests {int(gpus.max())} GPUs, more than a node has (--gpus-per-node {gpus_per_node})"
        )
    step_s = float(step.total_seconds())
    # The grid starts on a whole step at or before the window (trace seconds from POD_TRACE_ORIGIN).
    grid_start = math.floor(window_start / step_s) * step_s
    steps = math.ceil((window_end - grid_start) / step_s)
    if steps < 2:
        raise InputError(f"{path}: the observation window is shorter than two steps")
    origin = POD_TRACE_ORIGIN + pd.Timedelta(seconds=grid_start)
    order = np.argsort(arrival, kind="stable")
    pods = Pods(
        arrival[order] - grid_start,
        duration[order],
        gpus[order].astype(np.int64),
        np.zeros(len(arrival), dtype=bool),
    )
    # Pods that ended before the window never touch the simulated cluster.
    pods = pods.select(pods.arrival + pods.duration > 0)
    windows, window_pods = expand_schedules(schedules, origin, steps * step_s, gpus_per_node)
    return make_workload(str(path), origin, step_s, np.zeros(steps), pods.concat(window_pods), windows)
