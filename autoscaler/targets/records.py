"""A target's record: the last refreshes' times and rows (GPUs requested, windows due, every level's
headroom), in two preallocated arrays used as rings.

A row per refresh as its own array cost about twice its values in object headers (a week of one
target, 3.3 MB instead of 1.3 MB: benchmarks/bench_service_levels.py); the ring holds the values
alone, and a new refresh overwrites the oldest once it is full.
"""

from __future__ import annotations

import numpy as np


class Record:
    """At most ``capacity`` rows of equal length, each with its time, oldest first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._times = np.zeros(capacity)
        self._rows = np.zeros((capacity, 0))
        self._count = 0
        self._next = 0  # where the next row goes

    def __len__(self) -> int:
        return self._count

    @property
    def full(self) -> bool:
        return self._count == self.capacity

    @property
    def first_time(self) -> float:
        return float(self._times[self._next if self.full else 0])

    @property
    def last_time(self) -> float:
        return float(self._times[self._next - 1])

    def append(self, time_s: float, row: np.ndarray) -> None:
        """Add a row (the first sets every row's length); when full, the oldest is dropped."""
        if self._rows.shape[1] != len(row):
            if self._count:
                raise ValueError(f"a row of {len(row)} values in a record of rows of {self._rows.shape[1]}")
            self._rows = np.zeros((self.capacity, len(row)))
        self._times[self._next] = time_s
        self._rows[self._next] = row
        self._next = (self._next + 1) % self.capacity
        self._count = min(self._count + 1, self.capacity)

    def highest(self, column: int) -> float:
        """The largest value of a column (of the rows held); 0 with none."""
        return float(self._rows[: self._count, column].max()) if self._count else 0.0

    def times(self) -> np.ndarray:
        """Every time, oldest first (a copy)."""
        return self._ordered(self._times)

    def rows(self) -> np.ndarray:
        """Every row, oldest first, one per line (a copy)."""
        return self._ordered(self._rows)

    def _ordered(self, ring: np.ndarray) -> np.ndarray:
        if not self.full:
            return ring[: self._count].copy()
        return np.concatenate([ring[self._next :], ring[: self._next]])
