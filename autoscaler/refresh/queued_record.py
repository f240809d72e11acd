"""GPUs Kueue's Workloads wait with, per pool, recorded at each refresh: the demand the quota holds back.

The ``gpus_requested`` history counts only pods, and a Workload has none until Kueue admits it: demand
held back by quota never shows there. This record keeps, at each refresh, the GPUs of every Workload
waiting with no pod yet in each pool (pending, whatever its quota, or admitted before its pods exist:
``KueueInputs.waiting``). It is a signal of its own, shown beside the others (the inspection API, the
page, ``/metrics``), never added to ``gpus_requested`` nor served: the Workloads counted ahead are
served as windows already (docs/kueue.md), and their pods count in the history once they exist.

A pool not named at a refresh had nothing waiting then: 0. The record starts when the service does and
keeps the points of the lookback (at most ``MAX_POINTS``), in memory.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)

MAX_POINTS = 50_000  # two weeks of one refresh a minute is 20,160
WaitingGpus = Callable[[], Mapping[str, float]]


class QueuedWorkloadRecord:
    """Per pool, the GPUs of the Kueue Workloads waiting with no pod yet, at each refresh."""

    def __init__(self, waiting: WaitingGpus, lookback: timedelta) -> None:
        self.waiting = waiting
        self.lookback_s = lookback.total_seconds()
        self._times: list[int] = []  # Unix seconds of each refresh recorded, in order
        self._gpus: dict[str, list[float]] = {}  # pool -> GPUs at each of ``_times``

    def record(self, now: datetime) -> None:
        """What waits now, as the point of ``now`` (a second refresh in the same second replaces it)."""
        at_s = int(now.timestamp())
        found = {pool: gpus for pool, gpus in self.waiting().items() if math.isfinite(gpus) and gpus >= 0}
        if self._times and at_s <= self._times[-1]:
            if at_s < self._times[-1]:  # the clock went back: the record restarts rather than go out of order
                log.warning("Kueue's waiting GPUs: the clock went back to %s; the record starts again", now)
                self._times, self._gpus = [], {}
            else:
                self._drop(len(self._times) - 1, len(self._times))
        self._times.append(at_s)
        for pool in set(self._gpus) | set(found):
            values = self._gpus.setdefault(pool, [0.0] * (len(self._times) - 1))
            values.append(found.get(pool, 0.0))
        old = next((i for i, t in enumerate(self._times) if t > at_s - self.lookback_s), len(self._times))
        self._drop(0, max(old, len(self._times) - MAX_POINTS))

    def _drop(self, start: int, stop: int) -> None:
        del self._times[start:stop]
        for values in self._gpus.values():
            del values[start:stop]

    def history(self, pool: str) -> pd.Series | None:
        """The pool's GPUs waiting at each refresh recorded (0 where none did); None before the first."""
        if not self._times:
            return None
        index = pd.to_datetime(np.asarray(self._times, dtype=np.int64), unit="s", utc=True)
        values = self._gpus.get(pool) or [0.0] * len(self._times)
        return pd.Series(np.asarray(values, dtype=np.float64), index=index, name="kueue_waiting_gpus")

    def newest(self) -> dict[str, float]:
        """Each pool's GPUs waiting at the last refresh recorded, for the pools ever named."""
        return {pool: values[-1] for pool, values in sorted(self._gpus.items()) if values}
