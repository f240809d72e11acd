"""The demo's cluster: the replayed GPU demand, with the headroom the demo serves run through the
simulator's controller model (placeholder HPA and a Karpenter-like node pool at the demo's lead time),
so the live scorecard scores the demo's pool as it scores a pool in a cluster (docs/demo.md).

Each refresh replays, off the event loop, the last ``SETTLE`` of demand and served headroom (the
pool's state, its launching and empty nodes, settles within it) and samples the newest minute: the GPUs short (pods
waiting for a node), held (the pool's nodes, launching ones included) and used (non-placeholder
pods). Before the demo's first refresh the pool is taken to have been served the first value.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

import numpy as np

from adapters.traces.replay import ReplaySource
from adapters.types import NODEPOOL_LABEL
from autoscaler.scorecard.capacity import PodWait
from autoscaler.scorecard.figures import MinuteLedger
from autoscaler.serving.provider import Snapshot
from autoscaler.targets.service_levels import ReplayRequest

log = logging.getLogger(__name__)

STEP_S = 60.0
# Longer than a launch and the empty-node timeout together, so each replay starts from a settled pool.
SETTLE = timedelta(hours=2)
# The simulator's controller model, each headroom's whole minute ledger (autoscaler/simulation/replay.py's
# replay_ledgers): injected, since the simulator sits above.
LedgerReplay = Callable[[ReplayRequest], dict[str, MinuteLedger]]


class DemoCluster:
    """One replayed node pool (``pool``) serving ``metric``'s headroom: the scorecard's GPUs short, held
    and used (``scorecard.live.CapacityReader`` and its short-GPUs function)."""

    def __init__(
        self,
        demand: ReplaySource,
        metric: str,
        pool: str,
        lead_time: timedelta,
        replay: LedgerReplay,
        gpus_per_node: int = 8,
    ) -> None:
        self.demand = demand
        self.metric = metric
        self.pool = pool
        self.lead_time = lead_time
        self.replay = replay
        self.gpus_per_node = gpus_per_node
        steps = int(SETTLE.total_seconds() // STEP_S) + 2
        self._served: deque[tuple[float, float]] = deque(maxlen=steps)  # (at, headroom served), ascending
        self._sample: tuple[float, float, float] | None = None  # short, held, used in the newest minute
        self._replaying = threading.Lock()

    def observe(self, snapshot: Snapshot) -> None:
        """Take the headroom the snapshot serves for the pool, and replay the pool up to its moment (in an
        executor thread, ``app.scoring``: one replay at a time)."""
        with self._replaying:
            self._observe(snapshot)

    def _observe(self, snapshot: Snapshot) -> None:
        now_s = snapshot.created_at.timestamp()
        served = [
            series.value
            for series in snapshot.series.get(self.metric, ())
            if series.labels.get(NODEPOOL_LABEL) == self.pool and math.isfinite(series.value)
        ]
        if served and (not self._served or now_s > self._served[-1][0]):
            self._served.append((now_s, max(0.0, served[0])))
        if not self._served:
            return  # nothing served yet: no placeholders to replay
        try:
            self._sample = self._replay(now_s)
        except ValueError as error:  # a bug here must not stop the demo serving
            log.error("demo cluster: replay at %s failed: %s", snapshot.created_at, error)

    def _replay(self, now_s: float) -> tuple[float, float, float]:
        end_s = math.floor(now_s / STEP_S) * STEP_S
        times = end_s - STEP_S * np.arange(int(SETTLE.total_seconds() // STEP_S), 0, -1)
        history = self.demand.history(datetime.fromtimestamp(end_s, tz=UTC), SETTLE + self.demand.step).series
        trace_s = np.asarray([moment.timestamp() for moment in history.index])
        demand = history.to_numpy(float)[np.maximum(np.searchsorted(trace_s, times, side="right") - 1, 0)]
        served_s = np.asarray([at for at, _ in self._served])
        served_values = np.asarray([value for _, value in self._served])
        headroom = served_values[np.maximum(np.searchsorted(served_s, times, side="right") - 1, 0)]
        request = ReplayRequest(
            step_s=STEP_S,
            requested=demand,
            headroom={"served": headroom},
            lead_time_s=self.lead_time.total_seconds(),
            gpus_per_node=self.gpus_per_node,
            start_s=float(times[0]),
        )
        ledger = self.replay(request)["served"]
        return (
            float(ledger.short_gpu_seconds[-1]) / STEP_S,
            float(ledger.held_gpu_seconds[-1]) / STEP_S,
            float(ledger.used_gpu_seconds[-1]) / STEP_S,
        )

    def short_gpus(self) -> Mapping[str, float]:
        return {} if self._sample is None else {self.pool: self._sample[0]}

    async def read(self, now: datetime) -> tuple[dict[str, float], dict[str, float]]:
        if self._sample is None:
            return {}, {}
        _, held, used = self._sample
        return {self.pool: held}, {self.pool: used}

    async def waits(self, now: datetime) -> Sequence[PodWait]:
        return ()  # fluid demand: no pods whose waits could be told apart

    async def busy(self, now: datetime) -> dict[str, float]:
        return {}  # no dcgm-exporter in the demo
