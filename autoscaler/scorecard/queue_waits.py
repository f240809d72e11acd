"""One pool's queue waits of Kueue Workloads (docs/scorecard.md), recorded by ``scorecard.workloads``:

- ``quota``: from the Workload's creation until Kueue reserved quota for it (``QuotaReserved``);
- ``admission_check``: from then until ``Admitted``, for a Workload that has admission checks;
- ``capacity``: from ``Admitted`` until the last of its pods was running (``figures.window_start_delay``).

Each kind is a bounded list of (when it ended, seconds) and a histogram that only grows, saved in the
pool's entry of ``scorecard.json`` beside its pods' waits. Pure: numpy only.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Literal, get_args

import numpy as np

from autoscaler.scorecard.columns import (
    EVENT_COLUMNS,
    MAX_EVENTS,
    Histogram,
    as_columns,
    checked_rows,
    histogram,
    waits_json,
)
from autoscaler.scorecard.figures import wait_figures

QueueWait = Literal["quota", "admission_check", "capacity"]
KINDS: tuple[QueueWait, ...] = get_args(QueueWait)
# Each kind's events and histogram in a pool's saved entry (the store drops events in the future).
SAVED_EVENTS = {kind: f"queue_{kind}_waits" for kind in KINDS}
SAVED_HISTOGRAMS = {kind: f"queue_{kind}_wait_histogram" for kind in KINDS}


class QueueWaits:
    def __init__(self) -> None:
        self.events: dict[QueueWait, deque[tuple[float, float]]] = {k: deque(maxlen=MAX_EVENTS) for k in KINDS}
        self.histograms: dict[QueueWait, Histogram] = {kind: Histogram() for kind in KINDS}
        # The events as arrays, built once per change, not at every request for the figures.
        self._version = 0
        self._arrays: tuple[int, dict[QueueWait, np.ndarray]] | None = None

    def record(self, kind: QueueWait, at_s: float, wait_s: float) -> None:
        self.events[kind].append((at_s, wait_s))
        self.histograms[kind].observe(wait_s)
        self._version += 1

    def trim(self, oldest_s: float) -> None:
        for events in self.events.values():
            while events and events[0][0] < oldest_s:
                events.popleft()
                self._version += 1

    def figures(self, start_s: float, end_s: float) -> dict[str, Any]:
        """p50, p95 and max of each kind that ended in ``[start_s, end_s)``."""
        if self._arrays is None or self._arrays[0] != self._version:
            arrays = {kind: np.array(events, dtype=np.float64).reshape(-1, 2) for kind, events in self.events.items()}
            self._arrays = (self._version, arrays)
        found: dict[str, Any] = {}
        for kind, rows in self._arrays[1].items():
            within = rows[(rows[:, 0] >= start_s) & (rows[:, 0] < end_s)]
            found[kind] = waits_json(wait_figures(within[:, 1]))
        return found

    def document(self) -> dict[str, Any]:
        """The pool entry's keys of the queue waits, JSON-ready copies."""
        events = {SAVED_EVENTS[kind]: as_columns(rows, EVENT_COLUMNS) for kind, rows in self.events.items()}
        counts = {
            SAVED_HISTOGRAMS[kind]: {"counts": list(counts.counts), "total_s": counts.total_s}
            for kind, counts in self.histograms.items()
        }
        return events | counts

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> QueueWaits:
        """The queue waits a pool's entry holds (none in a file saved before they were kept); raises
        ``ValueError`` naming the first field that is wrong."""
        waits = cls()
        for kind in KINDS:
            waits.events[kind].extend((at, s) for at, s in checked_rows(document, SAVED_EVENTS[kind], EVENT_COLUMNS))
            waits.histograms[kind] = histogram(document, SAVED_HISTOGRAMS[kind])
        return waits
