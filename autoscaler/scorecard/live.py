"""The live scorecard of every pool this replica owns, collected once a refresh (docs/scorecard.md).

Each refresh samples, per pool: GPUs short (pods waiting for capacity, from the Pending-pod watch;
unknown without it), GPUs held and used (kube-state-metrics in Prometheus, ``scorecard.capacity``,
plus the GPUs DRA claims take, from the claim watch). Capacity waits and
window start delays arrive from the pod watch (``scorecard.pods``). Each served headroom is kept
until its lead time has passed, then judged against the demand realized meanwhile (live coverage).

With shards, a pool is scored only by the owner of its headroom series (``owns_pool``). Bad input
(a failed or garbled Prometheus answer, a corrupt saved file) is logged naming what is wrong; the
minute is skipped or the scorecard starts empty, and serving carries on.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from adapters.kubernetes.dra_allocations import PoolGpus
from adapters.types import NODEPOOL_LABEL, AdapterError
from autoscaler.scorecard import store as scorecard_store
from autoscaler.scorecard.capacity import PodWait
from autoscaler.scorecard.figures import MinuteLedger
from autoscaler.scorecard.kueue_histograms import KueueWaitHistograms, QueueWaits
from autoscaler.scorecard.pods import MAX_TRACKED, Outcome, PodOutcomes
from autoscaler.scorecard.pools import PoolScorecard
from autoscaler.scorecard.queue_waits import QueueWait
from autoscaler.scorecard.workloads import WorkloadOutcomes
from autoscaler.serving.provider import Snapshot
from autoscaler.state_files import Dropped

log = logging.getLogger(__name__)

MAX_AWAITING = 10_000  # served values awaiting judgment per (metric, pool)
ShortGpus = Callable[[], Mapping[str, float]]
# GPUs DRA devices hold and allocated claims use in each pool, from the watches (None: not watched).
DraGpus = Callable[[], PoolGpus | None]


class CapacityReader(Protocol):
    """GPUs each pool holds, uses and keeps busy now, and pods' capacity waits: kube-state-metrics and
    dcgm-exporter in Prometheus (``scorecard.capacity.PoolCapacity``), or the demo's replayed cluster."""

    async def read(self, now: datetime) -> tuple[dict[str, float], dict[str, float]]: ...

    async def waits(self, now: datetime) -> Sequence[PodWait]: ...

    async def busy(self, now: datetime) -> dict[str, float]: ...


class LiveScorecard:
    def __init__(
        self,
        *,
        headroom_metrics: Sequence[str],
        short_gpus: ShortGpus | None = None,
        capacity: CapacityReader | None = None,
        state_path: Path | None = None,
        dra_gpus: DraGpus | None = None,
    ) -> None:
        self.headroom_metrics = tuple(headroom_metrics)
        self.short_gpus = short_gpus
        self.dra_gpus = dra_gpus
        self.capacity = capacity
        self.state_path = state_path
        self.cards: dict[str, PoolScorecard] = {}
        self.pods: PodOutcomes | None = None
        self.workloads: WorkloadOutcomes | None = None  # Kueue Workloads' queue waits
        # Without the Workload watch: Kueue's own wait histograms in Prometheus, per ClusterQueue.
        self.kueue_histograms: KueueWaitHistograms | None = None
        self.cluster_queue_waits: QueueWaits = {}
        # With shards: whether this replica scores a pool (owns its headroom series); None: every pool.
        self.owns_pool: Callable[[str], bool] | None = None
        # (metric, pool) -> (decided at, due at, headroom served, GPUs requested at the decision)
        self._awaiting: dict[tuple[str, str], deque[tuple[float, float, float, float]]] = {}
        self._demand: dict[str, deque[tuple[float, float]]] = {}  # pool -> (at, GPUs requested)
        # Without a pod watch: uids of pods whose wait (read from Prometheus) is counted.
        self._waited: OrderedDict[str, None] = OrderedDict()
        self._collecting = False

    def owns(self, pool: str) -> bool:
        return bool(pool) and (self.owns_pool is None or self.owns_pool(pool))

    def owned_cards(self) -> dict[str, PoolScorecard]:
        """The scorecards of the pools this replica scores now (another replica's are not exported)."""
        return {pool: card for pool, card in self.cards.items() if self.owns(pool)}

    def pool_ledger(self, pool: str) -> MinuteLedger | None:
        """The minutes of a pool this replica scores whose GPUs short are known (None: not scored): a
        target calibrates on them."""
        card = self.cards.get(pool) if self.owns(pool) else None
        if card is None:
            return None
        ledger = card.ledger()
        return ledger.only(np.isfinite(ledger.short_gpu_seconds))

    def card(self, pool: str) -> PoolScorecard:
        return self.cards.setdefault(pool, PoolScorecard())

    def record(self, pool: str, what: Outcome, at_s: float, seconds: float) -> None:
        """A capacity wait or a window start delay (from ``scorecard.pods``), in an owned pool."""
        if not self.owns(pool):
            return
        if what == "capacity_wait":
            self.card(pool).record_wait(at_s, seconds)
        else:
            self.card(pool).record_window_delay(at_s, seconds)

    def record_queue_wait(self, pool: str, kind: QueueWait, at_s: float, seconds: float) -> None:
        """A Kueue Workload's quota, admission-check or capacity wait (from ``scorecard.workloads``)."""
        if self.owns(pool):
            self.card(pool).record_queue_wait(kind, at_s, seconds)

    async def collect(self, now: datetime, snapshot: Snapshot | None = None) -> None:
        """One sample per owned pool at ``now``, and the judgments that have come due; skipped (and said)
        while the previous collection still waits for Prometheus, so samples stay in time order."""
        if self._collecting:
            log.warning("scorecard: the previous minute is still being collected; %s not sampled", now)
            return
        self._collecting = True
        try:
            await self._collect(now, snapshot)
        finally:
            self._collecting = False

    async def _collect(self, now: datetime, snapshot: Snapshot | None) -> None:
        now_s = now.timestamp()
        if self.workloads is not None:  # Workloads listed before the watches that place them
            self.workloads.retry()
        # Without a Pending-pod watch no pod waiting for capacity is seen: GPUs short are unknown (None).
        short = dict(self.short_gpus()) if self.short_gpus is not None else None
        held: dict[str, float] = {}
        used: dict[str, float] = {}
        dra: PoolGpus | None = None
        if self.capacity is not None:
            try:
                held, used = await self.capacity.read(now)
                if self.pods is None:
                    self._prometheus_waits(now_s, await self.capacity.waits(now))
            except AdapterError as error:
                log.error("scorecard: GPUs held and used not read (%s); minute %s not sampled", error, now)
                short, held = {}, {}
            else:
                dra = self.dra_gpus() if self.dra_gpus is not None else None
        if dra is not None:  # kube-state-metrics exports no DRA device: added from the watches
            held = _added(held, dra.held)
            used = _added(used, dra.used)
        for pool in sorted((set(short or {}) | set(held)) - {""}):
            if not self.owns(pool):
                continue
            short_now = short.get(pool, 0.0) if short is not None else None
            values = (held.get(pool, 0.0), used.get(pool, 0.0))
            if not all(math.isfinite(v) and v >= 0 for v in (*values, short_now or 0.0)):
                log.error(
                    "scorecard: pool %s at %s: short, held, used %s: not counts; not sampled",
                    pool, now, (short_now, *values),
                )  # fmt: skip
                continue
            try:
                self.card(pool).sample(now_s, short_now, *values)
            except ValueError as error:
                log.error("scorecard: pool %s: %s", pool, error)
        # Judged before anything else is awaited: a reader that sees this minute's sample sees its judgments.
        if snapshot is not None:
            self._await_judgment(now_s, snapshot)
        self._judge_due()
        await self._busy(now)
        await self._kueue_histograms(now)

    async def _busy(self, now: datetime) -> None:
        """DCGM's busy share per owned pool, where dcgm-exporter runs (no series: nothing recorded)."""
        if self.capacity is None:
            return
        try:
            busy = await self.capacity.busy(now)
        except AdapterError as error:
            log.error("scorecard: GPU utilization not read (%s) at %s", error, now)
            return
        for pool, fraction in sorted(busy.items()):
            card = self.cards.get(pool) if self.owns(pool) else None
            if card is None:  # not scored (yet): no sample of its GPUs held and used
                continue
            try:
                card.record_busy(now.timestamp(), fraction)
            except ValueError as error:
                log.error("scorecard: pool %s: %s; not recorded", pool, error)

    async def _kueue_histograms(self, now: datetime) -> None:
        """Kueue's wait histograms, read where no Workload is watched; a failed read keeps the last."""
        if self.kueue_histograms is None or self.workloads is not None:
            return
        try:
            self.cluster_queue_waits = await self.kueue_histograms.read(now)
        except AdapterError as error:
            log.error("scorecard: Kueue's wait histograms not read (%s) at %s", error, now)

    def _prometheus_waits(self, now_s: float, waits: Sequence[tuple[str, str, float]]) -> None:
        """Waits kube-state-metrics shows (the pod watch is off), each pod counted once, stamped ``now``."""
        for uid, pool, seconds in waits:
            if uid in self._waited:
                continue
            self._waited[uid] = None
            while len(self._waited) > MAX_TRACKED:
                self._waited.popitem(last=False)
            self.record(pool, "capacity_wait", now_s, seconds)

    def _await_judgment(self, now_s: float, snapshot: Snapshot) -> None:
        for metric in self.headroom_metrics:
            for series in snapshot.series.get(metric, ()):
                pool = series.labels.get(NODEPOOL_LABEL, "")
                provenance = series.provenance
                if not self.owns(pool) or provenance is None or provenance.requested_now is None:
                    continue
                decided_s = provenance.decided_at.timestamp()
                if decided_s != now_s or not math.isfinite(provenance.requested_now):
                    continue  # a value decided at an earlier refresh is already awaiting
                demand = self._demand.setdefault(pool, deque(maxlen=MAX_AWAITING))
                if not demand or demand[-1][0] < now_s:
                    demand.append((now_s, provenance.requested_now))
                due_s = decided_s + provenance.lead_time.value.total_seconds()
                awaiting = self._awaiting.setdefault((metric, pool), deque(maxlen=MAX_AWAITING))
                awaiting.append((decided_s, due_s, series.value, provenance.requested_now))

    def _judge_due(self) -> None:
        for (metric, pool), awaiting in self._awaiting.items():
            demand = self._demand.get(pool) or deque()
            known_until = demand[-1][0] if demand else -math.inf
            while awaiting and awaiting[0][1] <= known_until:
                decided_s, due_s, served, requested = awaiting.popleft()
                seen = [gpus for at, gpus in demand if decided_s < at <= due_s]
                realized = max(seen) - requested if seen else math.nan
                self.card(pool).record_judgment(metric, decided_s, served, realized)
            while demand and awaiting and demand[0][0] < awaiting[0][0]:
                demand.popleft()

    def figures(self, now: datetime) -> dict[str, dict[str, Any]]:
        return {pool: card.figures(now.timestamp()) for pool, card in sorted(self.owned_cards().items())}

    def document(self) -> dict[str, Any]:
        pods = self.pods.document() if self.pods is not None else {}
        pools = {pool: card.document() for pool, card in self.cards.items()}
        workloads = self.workloads.document() if self.workloads is not None else {}
        return {"pools": pools, "pods": pods, "workloads": workloads, "waited_in_prometheus": list(self._waited)}

    def save(self, document: dict[str, Any]) -> None:
        """Write ``document()`` (taken on the event loop) to the state directory; off the loop is fine."""
        if self.state_path is None:
            return
        try:
            scorecard_store.save(self.state_path, document)
        except OSError as error:  # a read-only or full disk must not stop serving
            log.warning("scorecard: could not save %s: %s", self.state_path, error)

    def restore(self, now_s: float | None = None) -> None:
        """The scorecards saved before a restart; a pool whose entry is corrupt starts empty, and rows
        later than ``now_s`` (default: the clock) are left out, each said so."""
        if self.state_path is None or (document := scorecard_store.load(self.state_path)) is None:
            return
        pools = document.get("pools")
        if not isinstance(pools, dict):
            log.error("scorecard: %s: 'pools' is not a JSON object; the scorecard starts empty", self.state_path)
            return
        now_s = time.time() if now_s is None else now_s
        dropped = Dropped(self.state_path, log)
        for pool, entry in pools.items():
            try:
                current = scorecard_store.without_future_times(entry, now_s, str(pool), dropped)
                self.cards[str(pool)] = PoolScorecard.from_document(current)
            except ValueError as error:
                dropped.drop(f"pool {pool}", f"{error} (its scorecard starts empty)")
        dropped.done()
        waited = document.get("waited_in_prometheus", [])
        if isinstance(waited, list) and all(isinstance(uid, str) for uid in waited):
            self._waited.update((uid, None) for uid in waited[-MAX_TRACKED:])
        else:
            log.error("scorecard: %s: waited_in_prometheus is not a list of pod uids", self.state_path)
        for name, outcomes in (("pods", self.pods), ("workloads", self.workloads)):
            counted = document.get(name)
            if outcomes is not None and isinstance(counted, dict):
                try:
                    outcomes.restore(counted)
                except ValueError as error:
                    log.error("scorecard: %s: %s: %s", self.state_path, name, error)
        log.info("scorecard: restored %d pools from %s", len(self.cards), self.state_path)


def _added(counts: Mapping[str, float], more: Mapping[str, float]) -> dict[str, float]:
    return {pool: counts.get(pool, 0.0) + more.get(pool, 0.0) for pool in set(counts) | set(more)}
