"""PromQL range results as Signals on a regular step grid: queries, grid arithmetic, conversion, merging.

Everything here is pure (no I/O) so that the awkward parts of turning Prometheus matrices into
forecastable series (grid alignment, chunking, duplicates, gaps, non-finite values) are tested without
a server. ``adapters.prometheus.client`` does the HTTP side.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, get_args

import numpy as np
import numpy.typing as npt
import pandas as pd

from adapters.types import NODEPOOL_LABEL, Signal

# Prometheus refuses range queries above 11,000 points per series; stay well under it.
MAX_POINTS_PER_REQUEST = 10_000

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_DURATION = re.compile(r"(?:[0-9]+(?:ms|s|m|h|d|w|y))+")

# What a grid point of a signal holds: the expression's value at that moment, or its highest value
# during the step that starts there (``max_over_time`` over a subquery at this resolution).
PerStep = Literal["last", "peak"]
PEAK_RESOLUTION = timedelta(seconds=30)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class SignalQuery:
    """A named PromQL expression evaluated every ``step``.

    ``split_by`` names the labels that identify a series. Empty: every label of a result series except
    ``__name__``. Non-empty: only those labels; result series that share them are summed, exactly as
    ``sum by (split_by)`` would do.

    ``per_step="peak"``: the point at ``t`` is the highest value during ``[t, t + step)``, sampled every
    ``PEAK_RESOLUTION`` (Prometheus evaluates ``max_over_time`` of a subquery at ``t + step``; the
    point is labelled by the step's start), so a burst between two grid points is seen and a
    forecast of such points is a forecast of each step's peak: capacity must cover the peak, not a
    sample. ``"last"``: the value at ``t``.

    ``liveness`` has at least one series whenever the exporter behind the signal is alive (None: it
    cannot be told). ``zero_when_absent``: a series that is missing means 0 (a count of GPUs, not a
    gap) while the exporter is alive. ``pools`` has one series per node pool known to the cluster,
    labelled ``nodepool``.
    """

    name: str
    promql: str
    step: timedelta
    split_by: tuple[str, ...] = ()
    per_step: PerStep = "last"
    liveness: str | None = None
    zero_when_absent: bool = False
    pools: str | None = None
    # The same signal read from a recording rule, and the series that rule records: read it instead
    # when Prometheus holds that series for the whole lookback (PrometheusSignalSource).
    recorded: SignalQuery | None = None
    recorded_series: str | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a signal query needs a name")
        if not self.promql.strip():
            raise ValueError(f"signal query {self.name!r} has an empty PromQL expression")
        # The HTTP client sends start/end as whole seconds, so only whole-second steps stay on the grid.
        if self.step < timedelta(seconds=1) or self.step % timedelta(seconds=1):
            raise ValueError(f"signal query {self.name!r}: step must be a whole number of seconds >= 1s")
        for label in self.split_by:
            check_label_name(label)
        if self.per_step not in get_args(PerStep):
            raise ValueError(f"signal query {self.name!r}: per_step must be 'last' or 'peak', got {self.per_step!r}")

    @property
    def range_promql(self) -> str:
        """The expression sent to ``query_range``."""
        if self.per_step == "last":
            return self.promql
        # Evaluated at t + step, the subquery's points (aligned to multiples of the resolution) run
        # from t to t + step - resolution: the first sees the value in effect at t, none sees the next
        # step's first sample. The range is a millisecond short of the step so that the point before
        # t stays out whether ranges are closed (Prometheus 2) or left-open (Prometheus 3).
        seconds = int(self.step.total_seconds())
        resolution = f"{math.gcd(seconds, int(PEAK_RESOLUTION.total_seconds()))}s"
        window = f"{seconds * 1000 - 1}ms"
        return f"max_over_time(({self.promql})[{window}:{resolution}] offset {resolution})"

    @property
    def label_offset(self) -> pd.Timedelta:
        """How far a point's label is before the moment Prometheus evaluated it."""
        return pd.Timedelta(self.step) if self.per_step == "peak" else pd.Timedelta(0)

    def liveness_query(self) -> SignalQuery | None:
        """One series, present at the points where the exporter was alive (on this query's grid)."""
        if self.liveness is None:
            return None
        return SignalQuery(f"{self.name}:alive", f"count({self.liveness})", self.step, (), self.per_step)

    def pools_query(self) -> SignalQuery | None:
        """One series per node pool known at each point (on this query's grid)."""
        if self.pools is None:
            return None
        return SignalQuery(f"{self.name}:pools", self.pools, self.step, (NODEPOOL_LABEL,), self.per_step)


@dataclass(frozen=True)
class RawSeries:
    """One series of a Prometheus range result, already decoded: seconds since the epoch and floats."""

    labels: Mapping[str, str]
    timestamps: FloatArray
    values: FloatArray


def check_metric_name(name: str) -> str:
    """Return ``name`` if it is a valid metric name; refusing anything else keeps PromQL injection out."""
    if not _METRIC_NAME.fullmatch(name):
        raise ValueError(f"invalid metric name {name!r}")
    return name


def check_label_name(name: str) -> str:
    """Return ``name`` if it is a valid label name."""
    if not _LABEL_NAME.fullmatch(name) or name == "__name__":
        raise ValueError(f"invalid label name {name!r}")
    return name


def check_duration(duration: str) -> str:
    """Return ``duration`` if it is a PromQL duration such as ``5m`` or ``1h30m``."""
    if not _DURATION.fullmatch(duration):
        raise ValueError(f"invalid PromQL duration {duration!r}")
    return duration


def promql_duration(step: timedelta) -> str:
    """Format a whole-second timedelta as a PromQL duration (``90s``)."""
    return f"{int(step.total_seconds())}s"


def aggregate(operator: str, by: Sequence[str], expression: str) -> str:
    """``operator by (labels) (expression)``; an empty ``by`` aggregates everything into one series."""
    labels = ", ".join(check_label_name(label) for label in by)
    return f"{operator} by ({labels}) ({expression})"


def grid_start(moment: datetime, step: timedelta) -> pd.Timestamp:
    """First point of the step grid at or after ``moment``.

    The grid is anchored on the Unix epoch so that backfills and incremental pulls, whenever they run,
    land on the same timestamps and can be merged point by point.
    """
    ns, step_ns = _ns(moment), _step_ns(step)
    return pd.Timestamp(-(-ns // step_ns) * step_ns, unit="ns", tz="UTC")


def grid_end(moment: datetime, step: timedelta) -> pd.Timestamp:
    """Last point of the step grid at or before ``moment``."""
    ns, step_ns = _ns(moment), _step_ns(step)
    return pd.Timestamp(ns // step_ns * step_ns, unit="ns", tz="UTC")


def step_grid(start: pd.Timestamp, end: pd.Timestamp, step: timedelta) -> pd.DatetimeIndex:
    """Every grid point from ``start`` to ``end`` inclusive (both already on the grid)."""
    return pd.date_range(start, end, freq=pd.Timedelta(step), tz="UTC", unit="ns")


def plan_chunks(
    start: pd.Timestamp, end: pd.Timestamp, step: timedelta, max_points: int = MAX_POINTS_PER_REQUEST
) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """Split the grid ``[start, end]`` into non-overlapping inclusive ranges of at most ``max_points``."""
    if max_points < 1:
        raise ValueError("max_points must be >= 1")
    span = pd.Timedelta(step) * (max_points - 1)
    chunks: list[tuple[pd.Timestamp, pd.Timestamp]] = []
    chunk_start = start
    while chunk_start <= end:
        chunk_end = min(chunk_start + span, end)
        chunks.append((chunk_start, chunk_end))
        chunk_start = chunk_end + pd.Timedelta(step)
    return chunks


def to_signals(query: SignalQuery, parts: Iterable[RawSeries], start: pd.Timestamp, end: pd.Timestamp) -> list[Signal]:
    """Turn the raw series of one or more range requests into one Signal per identity on ``[start, end]``.

    Chunks may repeat a timestamp (the later one wins), points off the grid are dropped, NaN and +-Inf
    become gaps, and missing points stay NaN: a gap must never look like zero demand. ``start`` and
    ``end`` are evaluation times; a ``peak`` query's points are labelled one step earlier.
    """
    grid = step_grid(start, end, query.step)
    start_ns, step_ns = int(start.value), _step_ns(query.step)
    by_series: dict[tuple[tuple[str, str], ...], FloatArray] = {}
    for part in parts:
        labels = {key: value for key, value in part.labels.items() if key != "__name__"}
        key = tuple(sorted(labels.items()))
        values = by_series.get(key)
        if values is None:
            values = by_series[key] = np.full(len(grid), np.nan)
        positions, on_grid = _grid_positions(part.timestamps, start_ns, step_ns, len(grid))
        values[positions] = part.values[on_grid]

    by_identity: dict[tuple[tuple[str, str], ...], list[FloatArray]] = {}
    for key, values in by_series.items():
        by_identity.setdefault(_identity(dict(key), query.split_by), []).append(values)

    signals = [
        Signal(
            name=query.name,
            labels=dict(identity),
            series=pd.Series(_sum_keeping_gaps(members), index=grid - query.label_offset, name=query.name),
            step=pd.Timedelta(query.step),
            label_offset=query.label_offset,
        )
        for identity, members in sorted(by_identity.items())
    ]
    return signals


def merge_signal(previous: Signal | None, update: Signal, max_history: timedelta) -> Signal:
    """Merge a newly pulled ``update`` into ``previous`` and keep the last ``max_history`` of it.

    New values win; where the update has a gap, an earlier value survives (a Prometheus restart can lose
    recent samples, and losing them twice helps nobody). The result stays on the regular step grid.
    """
    if previous is not None and (_key(previous) != _key(update) or previous.step != update.step):
        raise ValueError(f"cannot merge {update.name}{dict(update.labels)} into {previous.name}{dict(previous.labels)}")
    step = pd.Timedelta(update.step)
    pieces = [signal.series for signal in (previous, update) if signal is not None and len(signal.series)]
    if not pieces:
        return update
    _check_same_grid(pieces, step)
    end = max(piece.index[-1] for piece in pieces)
    earliest_kept = end - _points_in(max_history, step) * step + step
    start = max(min(piece.index[0] for piece in pieces), earliest_kept)
    grid = step_grid(start, end, step)
    merged = update.series.reindex(grid)
    if previous is not None:
        merged = merged.fillna(previous.series.reindex(grid))
    series = merged.astype(np.float64)
    return Signal(update.name, dict(update.labels), series, step, update.label_offset)


def merge_signals(previous: Iterable[Signal], update: Iterable[Signal], max_history: timedelta) -> list[Signal]:
    """Merge lists of Signals matched by (name, labels).

    Every Signal of a name ends at the latest timestamp seen for that name, so a series that stopped
    reporting shows a growing gap; it is dropped once it has no value left inside ``max_history``.
    """
    merged: dict[tuple[str, tuple[tuple[str, str], ...]], Signal] = {}
    for signal in previous:
        merged[_key(signal)] = signal
    for signal in update:
        merged[_key(signal)] = merge_signal(merged.get(_key(signal)), signal, max_history)
    latest: dict[str, pd.Timestamp] = {}
    for signal in merged.values():
        if len(signal.series):
            end = signal.series.index[-1]
            latest[signal.name] = max(end, latest.get(signal.name, end))
    result: list[Signal] = []
    for key in sorted(merged):
        signal = merged[key]
        if signal.name not in latest:
            continue
        # Merging an all-gap point at the common end stretches the series to it and trims the start.
        end_marker = pd.Series([np.nan], index=pd.DatetimeIndex([latest[signal.name]]), dtype=np.float64)
        marker_signal = Signal(signal.name, signal.labels, end_marker, signal.step, signal.label_offset)
        stretched = merge_signal(signal, marker_signal, max_history)
        if stretched.series.notna().any():
            result.append(stretched)
    return result


def _key(signal: Signal) -> tuple[str, tuple[tuple[str, str], ...]]:
    return signal.name, tuple(sorted(signal.labels.items()))


def _identity(labels: Mapping[str, str], split_by: Sequence[str]) -> tuple[tuple[str, str], ...]:
    if not split_by:
        return tuple(sorted(labels.items()))
    # A missing label and an empty one are the same thing in Prometheus.
    return tuple(sorted((label, labels.get(label, "")) for label in split_by))


def _grid_positions(
    timestamps: FloatArray, start_ns: int, step_ns: int, size: int
) -> tuple[IntArray, npt.NDArray[np.bool_]]:
    # Prometheus timestamps are float seconds with millisecond precision: compare in whole milliseconds.
    offset_ms = np.rint(timestamps * 1000.0).astype(np.int64) - start_ns // 1_000_000
    step_ms = step_ns // 1_000_000
    on_grid = (offset_ms % step_ms == 0) & (offset_ms >= 0) & (offset_ms < size * step_ms)
    return offset_ms[on_grid] // step_ms, on_grid


def _sum_keeping_gaps(members: Sequence[FloatArray]) -> FloatArray:
    stacked = np.vstack(members)
    stacked[~np.isfinite(stacked)] = np.nan
    if len(members) == 1:
        only: FloatArray = stacked[0]
        return only
    present = ~np.isnan(stacked)
    total: FloatArray = np.where(present.any(axis=0), np.nansum(stacked, axis=0), np.nan).astype(np.float64)
    return total


def _check_same_grid(pieces: Sequence[pd.Series], step: pd.Timedelta) -> None:
    anchor = pieces[0].index[0]
    for piece in pieces[1:]:
        if (piece.index[0] - anchor) % step:
            raise ValueError("cannot merge series that sit on different step grids")


def _points_in(history: timedelta, step: pd.Timedelta) -> int:
    points = int(pd.Timedelta(history) // step)
    if points < 1:
        raise ValueError("max_history must cover at least one step")
    return points


def _ns(moment: datetime) -> int:
    if moment.tzinfo is None:
        raise ValueError("naive datetime: pass a tz-aware (UTC) datetime")
    return int(pd.Timestamp(moment).value)


def _step_ns(step: timedelta) -> int:
    return int(pd.Timedelta(step).value)
