"""GPUs DRA claims use, added to the GPU demand history the forecasts learn from.

kube-state-metrics exports no device count for ResourceClaims, so the ``gpus_requested`` series
Prometheus holds never include the GPUs pods take through DRA (docs/kubernetes.md, "Dynamic Resource
Allocation"). This source wraps a ``gpus_requested`` signal split by ``nodepool``: at each pull it
records, from the claim watch, the GPUs allocated claims use in each pool now
(``adapters.kubernetes.dra_allocations``), on the point of the signal's grid that the pull reads
(the step's peak when the signal keeps peaks), and adds what it recorded to each pool's series. The
history, the requested-now, the forecast and the live scorecard's realized demand then count them.

The record starts when the service does: Prometheus holds no past of it, so the history before holds
no DRA GPUs. It is kept for the signal's lookback and saved in the state directory
(``claimed_demand-<signal>.json``) so a restart does not lose it; a file that cannot be read is said
and ignored (the record starts again). A point later than now (``state_files.not_in_the_future``) is
dropped and named: it would be added to the minute it names, and never age out before it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from adapters.prometheus.promql import SignalQuery, grid_end
from adapters.types import NODEPOOL_LABEL, Signal
from autoscaler.state_files import Dropped, UnusableFile, not_in_the_future, read_versioned, write_atomically
from autoscaler.targets.plans import SignalSource

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
ClaimedGpus = Callable[[], Mapping[str, float]]


class ClaimedDemandSource:
    """A ``gpus_requested`` source (split by ``nodepool`` alone) with DRA-claimed GPUs added."""

    def __init__(
        self,
        source: SignalSource,
        query: SignalQuery,
        claimed: ClaimedGpus,
        lookback: timedelta,
        state_path: Path | None = None,
    ) -> None:
        self.name = source.name
        self.source = source
        self.query = query
        self.claimed = claimed
        self.lookback = pd.Timedelta(lookback)
        self.state_path = state_path
        self.recorded: dict[str, dict[int, float]] = {}  # pool -> point (Unix seconds) -> GPUs, in time order
        self._restore()

    async def pull(self, now: datetime) -> list[Signal]:
        signals = await self.source.pull(now)  # raises as the source does: nothing recorded then
        if self.record(now) and self.state_path is not None:
            # Off the event loop: two weeks of minutes of a few pools is a megabyte of JSON.
            await asyncio.to_thread(self._save, self._document())
        return [self._with_claims(signal) for signal in signals]

    def record(self, now: datetime) -> bool:
        """The GPUs claims use now, on the point the pull at ``now`` reads (the most seen while it lasts),
        and none older than the lookback; whether the record changed."""
        point = grid_end(now, self.query.step) - self.query.label_offset
        at_s, oldest_s = int(point.timestamp()), int((point - self.lookback).timestamp())
        changed = False
        for pool, gpus in self.claimed().items():
            points = self.recorded.setdefault(pool, {})
            if math.isfinite(gpus) and gpus > points.get(at_s, 0.0):
                points[at_s] = gpus
                changed = True
        for pool, points in list(self.recorded.items()):
            while points and next(iter(points)) <= oldest_s:
                del points[next(iter(points))]
                changed = True
            if not points:
                del self.recorded[pool]
        return changed

    def _with_claims(self, signal: Signal) -> Signal:
        pool = signal.labels.get(NODEPOOL_LABEL)
        points = self.recorded.get(pool) if pool is not None and len(signal.labels) == 1 else None
        if not points:
            return signal
        index = pd.to_datetime(np.fromiter(points, dtype=np.int64, count=len(points)), unit="s", utc=True)
        claimed = pd.Series(np.fromiter(points.values(), dtype=np.float64, count=len(points)), index=index)
        added = signal.series + claimed.reindex(signal.series.index).fillna(0.0)
        return Signal(signal.name, signal.labels, added, signal.step, signal.label_offset)

    def _document(self) -> dict[str, Any]:
        pools = {pool: {"at": list(points), "gpus": list(points.values())} for pool, points in self.recorded.items()}
        return {"version": FORMAT_VERSION, "signal": self.name, "pools": pools}

    def _save(self, document: dict[str, Any]) -> None:
        assert self.state_path is not None  # noqa: S101 - pull saves only with a state path
        try:
            self.state_path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.state_path, document)
        except OSError as error:  # a read-only or full disk must not stop serving
            log.warning("signal %s: could not save the DRA-claimed GPUs to %s: %s", self.name, self.state_path, error)

    def _restore(self) -> None:
        if self.state_path is None:
            return
        try:
            document = read_versioned(self.state_path, FORMAT_VERSION)
            if document is None:
                return
            dropped = Dropped(self.state_path, log)
            for pool, columns in document["pools"].items():
                times = [int(_count(at)) for at in columns["at"]]
                if times != sorted(times) or len(times) != len(columns["gpus"]):
                    raise ValueError(f"pool {pool}: the times are not in order or the columns differ in length")
                points = dict(zip(times, (_count(gpus) for gpus in columns["gpus"]), strict=True))
                if kept := _past(points, time.time(), f"pool {pool}", dropped):
                    self.recorded[str(pool)] = kept
            dropped.done()
        except (UnusableFile, ValueError, KeyError, TypeError, AttributeError) as error:
            log.error("signal %s: ignoring %s (the DRA-claimed GPUs are recorded again from now): %s",
                      self.name, self.state_path, error)  # fmt: skip
            self.recorded = {}


def file_name(signal: str) -> str:
    """The state file of a signal's record."""
    return f"claimed_demand-{signal}.json"


def _past(points: dict[int, float], now_s: float, where: str, dropped: Dropped) -> dict[int, float]:
    """The points no later than ``now_s`` (beyond the clock skew); each other one dropped, named."""
    kept = {}
    for at_s, gpus in points.items():
        try:
            not_in_the_future(at_s, now_s, "at")
        except ValueError as error:
            dropped.drop(f"{where} point {at_s}", error)
        else:
            kept[at_s] = gpus
    return kept


def _count(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{value!r} is not a count of GPUs")
    return float(value)
