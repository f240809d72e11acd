"""Replaying a recorded trace as if it were live: the demo's signal source.

The trace repeats with its own length as the period. Wall-clock time ``t`` reads the trace at
``(t - anchor) mod period``; with a period of whole weeks the trace keeps its weekdays.
"""

from __future__ import annotations

import gzip
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from adapters.types import AdapterError, Signal


class ReplayError(AdapterError):
    """A trace file that cannot be replayed; the message names the file and the problem."""


def read_trace(path: Path) -> pd.Series:
    """Read a ``timestamp,value`` CSV (optionally gzip) into a float series on a UTC index."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as handle:
            frame = pd.read_csv(handle)
    except (OSError, ValueError, pd.errors.ParserError) as error:
        raise ReplayError(f"cannot read trace {path}: {error}") from None
    missing = {"timestamp", "value"} - set(frame.columns)
    if missing:
        raise ReplayError(f"trace {path} lacks column(s) {sorted(missing)}")
    index = pd.to_datetime(frame["timestamp"], utc=True)
    series = pd.Series(pd.to_numeric(frame["value"], errors="coerce").to_numpy(float), index=index)
    return series.sort_index()


class ReplaySource:
    def __init__(self, name: str, trace: pd.Series, labels: Mapping[str, str], anchor: datetime) -> None:
        steps = trace.index.to_series().diff().dropna().unique()
        if len(steps) != 1:
            raise ReplayError(f"trace for {name!r} is not on a regular step")
        self.name = name
        self.labels = dict(labels)
        self.step = pd.Timedelta(steps[0])
        self.values = trace.to_numpy(float)
        self.period = self.step * len(self.values)
        self.anchor = pd.Timestamp(anchor)

    def history(self, now: datetime, lookback: timedelta) -> Signal:
        """The last ``lookback`` of the replayed trace up to ``now``, aligned to the trace's step."""
        now_ts = pd.Timestamp(now).floor(self.step)
        count = min(int(pd.Timedelta(lookback) / self.step), len(self.values))
        index = pd.date_range(end=now_ts, periods=count, freq=self.step)
        positions = ((index - self.anchor) // self.step) % len(self.values)
        values = self.values[np.asarray(positions, dtype=np.int64)]
        return Signal(self.name, self.labels, pd.Series(values, index=index, dtype=float), self.step)
