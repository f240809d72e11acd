"""One pool's live scorecard: the last 7 days of minutes, waits and judgments, and running totals.

Samples taken once a refresh (GPUs short, held and used at that moment) are integrated into the
per-minute ledger of ``scorecard`` with its own ``integrate_per_minute``: a sample holds until the
next one, for at most ``MAX_HOLD_S`` (a service that was down does not score the minutes it missed).
GPUs short may be unknown (no Pending-pod watch): a minute no known sample covers has NaN short
GPU-seconds (``null`` on disk) and is not *scored*; its held and used GPUs count all the same.
Every figure the API shows is read from that ledger and those lists with ``scorecard``'s functions,
so live and simulated figures mean the same. The totals only grow (Prometheus rates them over any
window) and are kept across restarts with the rest (``document`` / ``from_document``).

Memory is bounded: ``KEEP_S`` of minutes and at most ``MAX_EVENTS`` waits, delays and judgments.
Pure: numpy only, no I/O.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from autoscaler.scorecard.columns import (
    EVENT_COLUMNS,
    KEEP_S,
    MAX_EVENTS,
    Histogram,
    as_columns,
    checked_rows,
    histogram,
    mapping,
    non_negative,
    numbers,
    waits_json,
)
from autoscaler.scorecard.figures import (
    MINUTE_S,
    MinuteLedger,
    coverage,
    gpu_allocation,
    idle_gpu_hours,
    integrate_per_minute,
    minute_is_short,
    short_figures,
    wait_figures,
)
from autoscaler.scorecard.queue_waits import QueueWait, QueueWaits

MAX_HOLD_S = 180.0
PERIODS_S: Mapping[str, float] = {"1h": 3600.0, "24h": 86400.0, "7d": KEEP_S}
MINUTE_COLUMNS = ("start", "short_gpu_seconds", "held_gpu_seconds", "used_gpu_seconds")
BUSY_COLUMNS = ("at", "fraction")
JUDGMENT_COLUMNS = ("at", "served", "realized")


@dataclass
class Totals:
    short_gpu_seconds: float = 0.0
    minutes_short: int = 0
    minutes_scored: int = 0
    idle_gpu_seconds: float = 0.0
    held_gpu_seconds: float = 0.0
    used_gpu_seconds: float = 0.0


@dataclass(frozen=True)
class _Arrays:
    ledger: MinuteLedger
    waits: np.ndarray  # (at, seconds) rows
    window_delays: np.ndarray
    judgments: dict[str, np.ndarray]  # metric -> (at, served, realized) rows
    busy: np.ndarray  # (at, fraction) rows


def _within(rows: np.ndarray, start_s: float, end_s: float) -> np.ndarray:
    """The rows whose first column (a time) is in ``[start_s, end_s)``."""
    return rows[(rows[:, 0] >= start_s) & (rows[:, 0] < end_s)]


class PoolScorecard:
    def __init__(self) -> None:
        # minute start -> [short, held, used] GPU-seconds, in time order (samples come in order)
        self.minutes: dict[float, list[float]] = {}
        self.last_sample: tuple[float, float, float, float] | None = None  # at, short (NaN: unknown), held, used
        self.waits: deque[tuple[float, float]] = deque(maxlen=MAX_EVENTS)  # (scheduled at, seconds)
        self.window_delays: deque[tuple[float, float]] = deque(maxlen=MAX_EVENTS)  # (run at, seconds)
        # DCGM's busy share of the pool's GPUs at each sample (where dcgm-exporter runs): a week of
        # minutes at most.
        self.busy: deque[tuple[float, float]] = deque(maxlen=int(KEEP_S / MINUTE_S))
        # metric -> (decided at, headroom served, rise realized over the lead time)
        self.judgments: dict[str, deque[tuple[float, float, float]]] = {}
        self.totals = Totals()
        self.wait_histogram = Histogram()
        self.delay_histogram = Histogram()
        self.coverage_totals: dict[str, list[int]] = {}  # metric -> [covered, judged]
        self.queue = QueueWaits()  # Kueue Workloads' queue waits
        # The ledger and the events as arrays, built once per change (each sample or event bumps
        # the version), not at every request for the figures.
        self._version = 0
        self._arrays: tuple[int, _Arrays] | None = None

    def sample(self, at_s: float, short: float | None, held: float, used: float) -> None:
        """GPUs short (None: unknown), held and used at ``at_s``; the previous sample is integrated up to it."""
        for value in (at_s, 0.0 if short is None else short, held, used):
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"sample at {at_s!r}: {value!r} is not a finite number >= 0")
        previous = self.last_sample
        if previous is not None and at_s < previous[0]:
            raise ValueError(f"sample at {at_s:g} is older than the last one ({previous[0]:g})")
        if previous is not None:
            self._integrate(previous, min(at_s, previous[0] + MAX_HOLD_S))
        self.last_sample = (at_s, math.nan if short is None else short, held, used)
        self._trim(at_s)
        self._version += 1

    def _integrate(self, sample: tuple[float, float, float, float], end_s: float) -> None:
        at_s, short_rate, *rates = sample
        known = not math.isnan(short_rate)
        first = math.floor(at_s / MINUTE_S) * MINUTE_S
        per_minute = [
            integrate_per_minute(np.array([at_s]), np.array([rate]), first, end_s)
            for rate in (short_rate if known else 0.0, *rates)
        ]
        for offset, seconds in enumerate(zip(*per_minute, strict=True)):
            start = first + offset * MINUTE_S
            short, held, used = (float(value) for value in seconds)
            row = self.minutes.setdefault(start, [math.nan, 0.0, 0.0])
            row[1], row[2] = row[1] + held, row[2] + used
            self.totals.held_gpu_seconds += held
            self.totals.used_gpu_seconds += used
            self.totals.idle_gpu_seconds += held - used
            if not known:
                continue
            if math.isnan(row[0]):  # scored from the first known part of it on
                row[0] = 0.0
                self.totals.minutes_scored += 1
            was_short = minute_is_short(row[0])
            row[0] += short
            if not was_short and minute_is_short(row[0]):
                self.totals.minutes_short += 1
            self.totals.short_gpu_seconds += short

    def record_wait(self, at_s: float, wait_s: float) -> None:
        self.waits.append((at_s, wait_s))
        self.wait_histogram.observe(wait_s)
        self._version += 1

    def record_window_delay(self, at_s: float, delay_s: float) -> None:
        self.window_delays.append((at_s, delay_s))
        self.delay_histogram.observe(delay_s)
        self._version += 1

    def record_queue_wait(self, kind: QueueWait, at_s: float, wait_s: float) -> None:
        """A Kueue Workload's quota, admission-check or capacity wait, ended at ``at_s``."""
        self.queue.record(kind, at_s, wait_s)

    def record_busy(self, at_s: float, fraction: float) -> None:
        """The pool's GPUs' mean busy share (DCGM utilization, 0 to 1) at ``at_s``."""
        if not (math.isfinite(fraction) and 0.0 <= fraction <= 1.0):
            raise ValueError(f"busy share at {at_s!r}: {fraction!r} is not between 0 and 1")
        self.busy.append((at_s, fraction))
        self._version += 1

    def record_judgment(self, metric: str, at_s: float, served: float, realized: float) -> None:
        covered, judged = coverage(np.array([served]), np.array([realized]))
        if not judged:
            return
        self.judgments.setdefault(metric, deque(maxlen=MAX_EVENTS)).append((at_s, served, realized))
        counts = self.coverage_totals.setdefault(metric, [0, 0])
        counts[0] += covered
        counts[1] += judged
        self._version += 1

    def _trim(self, now_s: float) -> None:
        oldest = now_s - KEEP_S
        while self.minutes:
            start = next(iter(self.minutes))
            if start >= oldest:
                break
            del self.minutes[start]
        lists: list[deque[tuple[float, float]] | deque[tuple[float, float, float]]] = [
            self.waits,
            self.window_delays,
            self.busy,
        ]
        self.queue.trim(oldest)
        for events in [*lists, *self.judgments.values()]:
            while events and events[0][0] < oldest:
                events.popleft()

    def ledger(self) -> MinuteLedger:
        return self._current().ledger

    def _current(self) -> _Arrays:
        if self._arrays is None or self._arrays[0] != self._version:
            starts = np.fromiter(self.minutes, dtype=np.float64, count=len(self.minutes))
            rows = np.array(list(self.minutes.values()), dtype=np.float64).reshape(-1, 3)
            arrays = _Arrays(
                ledger=MinuteLedger(starts, rows[:, 0], rows[:, 1], rows[:, 2]),
                waits=np.array(self.waits, dtype=np.float64).reshape(-1, 2),
                window_delays=np.array(self.window_delays, dtype=np.float64).reshape(-1, 2),
                judgments={m: np.array(e, dtype=np.float64).reshape(-1, 3) for m, e in self.judgments.items()},
                busy=np.array(self.busy, dtype=np.float64).reshape(-1, 2),
            )
            self._arrays = (self._version, arrays)
        return self._arrays[1]

    def figures(self, now_s: float) -> dict[str, Any]:
        """Every figure over each period that ends at ``now_s`` (the API's shape)."""
        arrays = self._current()
        return {name: self._period(arrays, now_s - seconds, now_s) for name, seconds in PERIODS_S.items()}

    def _period(self, arrays: _Arrays, start_s: float, end_s: float) -> dict[str, Any]:
        minutes = arrays.ledger.between(start_s, end_s)
        shorts = short_figures(minutes)
        waits = wait_figures(_within(arrays.waits, start_s, end_s)[:, 1])
        delays = wait_figures(_within(arrays.window_delays, start_s, end_s)[:, 1])
        judged: dict[str, Any] = {}
        for metric, events in sorted(arrays.judgments.items()):
            pairs = _within(events, start_s, end_s)
            covered, count = coverage(pairs[:, 1], pairs[:, 2])
            judged[metric] = {"covered": covered, "judged": count, "coverage": covered / count if count else None}
        allocation = gpu_allocation(minutes)
        busy = _within(arrays.busy, start_s, end_s)[:, 1]
        scored = shorts.minutes_scored > 0 or not len(minutes)  # else GPUs short were unknown throughout
        return {
            "minutes_scored": shorts.minutes_scored,
            "minutes_short": shorts.minutes_short if scored else None,
            "minutes_short_fraction": _rounded(shorts.minutes_short_fraction) if scored else None,
            "short_gpu_minutes": _rounded(shorts.short_gpu_minutes) if scored else None,
            "idle_gpu_hours": _rounded(idle_gpu_hours(minutes)),
            "gpu_allocation": None if allocation is None else _rounded(allocation),
            "busy_utilization": _rounded(float(busy.mean())) if len(busy) else None,
            "capacity_wait_seconds": waits_json(waits),
            "window_start_delay_seconds": waits_json(delays),
            "queue_wait_seconds": self.queue.figures(start_s, end_s),
            "coverage": judged,
        }

    def document(self) -> dict[str, Any]:
        """Everything, as JSON-ready columns (a week of minutes is 10,080 rows: lists of rows cost more
        to build and to write). Copies: it may be written by another thread while sampling goes on."""
        return {
            "minutes": as_columns(
                ((start, _known(row[0]), row[1], row[2]) for start, row in self.minutes.items()), MINUTE_COLUMNS
            ),
            "last_sample": None if self.last_sample is None else [_known(value) for value in self.last_sample],
            "waits": as_columns(self.waits, EVENT_COLUMNS),
            "window_delays": as_columns(self.window_delays, EVENT_COLUMNS),
            "busy": as_columns(self.busy, BUSY_COLUMNS),
            "judgments": {m: as_columns(e, JUDGMENT_COLUMNS) for m, e in self.judgments.items()},
            "totals": dict(vars(self.totals)),
            "wait_histogram": {"counts": list(self.wait_histogram.counts), "total_s": self.wait_histogram.total_s},
            "delay_histogram": {"counts": list(self.delay_histogram.counts), "total_s": self.delay_histogram.total_s},
            "coverage_totals": {metric: list(counts) for metric, counts in self.coverage_totals.items()},
            **self.queue.document(),
        }

    @classmethod
    def from_document(cls, document: Any) -> PoolScorecard:
        """The scorecard a ``document`` holds; raises ``ValueError`` naming the first field that is wrong."""
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
        card = cls()
        minutes = checked_rows(document, "minutes", MINUTE_COLUMNS, unknown=("short_gpu_seconds",))
        if [row[0] for row in minutes] != sorted(row[0] for row in minutes):
            raise ValueError("minutes.start: not in time order")
        card.minutes = {row[0]: list(row[1:]) for row in minutes}
        last = document.get("last_sample")
        if last is not None:
            at_s, short, held, used = numbers(last, 4, "last_sample", unknown=True)
            if math.isnan(at_s) or math.isnan(held) or math.isnan(used):
                raise ValueError("last_sample: only its GPUs short may be unknown (null)")
            card.last_sample = (at_s, short, held, used)
        card.waits.extend((at, seconds) for at, seconds in checked_rows(document, "waits", EVENT_COLUMNS))
        card.window_delays.extend(
            (at, seconds) for at, seconds in checked_rows(document, "window_delays", EVENT_COLUMNS)
        )
        card.queue = QueueWaits.from_document(document)
        for at, fraction in checked_rows(document, "busy", BUSY_COLUMNS):
            card.record_busy(at, fraction)
        judgments = mapping(document, "judgments")
        for metric in judgments:
            # A rise of demand is negative when demand fell: only finite.
            rows = checked_rows(judgments, metric, JUDGMENT_COLUMNS, where="judgments.", signed=("realized",))
            card.judgments[str(metric)] = deque(((at, s, r) for at, s, r in rows), maxlen=MAX_EVENTS)
        totals = mapping(document, "totals")
        unknown = set(totals) - set(vars(Totals()))
        if unknown:
            raise ValueError(f"totals: unknown fields {sorted(unknown)}")
        for name, value in totals.items():
            number = non_negative(value, f"totals.{name}")
            setattr(card.totals, name, int(number) if name in ("minutes_short", "minutes_scored") else number)
        card.wait_histogram = histogram(document, "wait_histogram")
        card.delay_histogram = histogram(document, "delay_histogram")
        for metric, counts in mapping(document, "coverage_totals").items():
            covered, judged = (int(n) for n in numbers(counts, 2, f"coverage_totals.{metric}"))
            if covered > judged:
                raise ValueError(f"coverage_totals.{metric}: {covered} covered of {judged} judged")
            card.coverage_totals[str(metric)] = [covered, judged]
        return card


def _rounded(value: float) -> float:
    return round(value, 6)


def _known(value: float) -> float | None:
    """NaN (unknown GPUs short) as JSON's null."""
    return None if math.isnan(value) else value
