"""Each node pool's launch record, learned from the NodeClaim watch: failed and slow launches per
instance type, lead times that include retries, whether the pool keeps failing, and the node sizes
its NodeClaims reported (``status.capacity``). docs/launch-outcomes.md defines every figure.

A need: the pool's NodeClaims from the first one that failed until one becomes Ready, as long as
each follows the previous failure within ``need_gap``. The lead-time sample of the NodeClaim that
ends a need runs from the need's first NodeClaim's creation, so the time lost to retries counts.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from adapters.kubernetes.client import parse_kube_time
from adapters.kubernetes.nodeclaim_states import (
    ClaimState,
    MalformedNodeClaim,
    failed_condition,
    gone_reason,
    read_claim,
)
from adapters.kubernetes.nodeclaims import LeadTimeHistory, LeadTimeSample
from adapters.kubernetes.watch import WatchCache, WatchEvent, object_key
from adapters.types import Clock

log = logging.getLogger(__name__)

KEEP_OUTCOMES = 20  # per pool, for "keeps failing" and the page
KEEP_COUNTED = 20_000  # NodeClaims remembered as counted (a relist must not count them again)


@dataclass(frozen=True)
class LaunchSettings:
    slow_after: timedelta = timedelta(minutes=10)  # a Ready launch that took longer is slow
    need_gap: timedelta = timedelta(minutes=15)  # a NodeClaim this long after a failure starts anew
    failing_after: int = 3  # this many failures in a row, none Ready since: the pool keeps failing
    failing_for: timedelta = timedelta(minutes=30)  # ... until this long after its last failure


@dataclass(frozen=True)
class Outcome:
    at: datetime
    name: str
    instance_type: str
    reason: str | None  # None: Ready
    seconds: float | None = None  # Ready: its own lead time; with retries, from the need's start
    retries: int = 0  # failed NodeClaims of the need it ended


@dataclass
class PoolLaunches:
    failures: Counter[tuple[str, str]] = field(default_factory=Counter)  # (instance type, reason)
    ready: Counter[str] = field(default_factory=Counter)  # instance type
    slow: Counter[str] = field(default_factory=Counter)  # instance type
    recent: deque[Outcome] = field(default_factory=lambda: deque(maxlen=KEEP_OUTCOMES))
    need_start: datetime | None = None  # creation of the need's first NodeClaim
    need_failures: int = 0
    last_failure: datetime | None = None
    node_sizes: dict[str, Mapping[str, float]] = field(default_factory=dict)  # instance type -> capacity

    def failures_by_reason(self) -> Counter[str]:
        counted: Counter[str] = Counter()
        for (_, reason), count in self.failures.items():
            counted[reason] += count
        return counted


class LaunchRecord:
    """Plugs into the NodeClaim watch (``on_change``); feeds ``history`` the lead-time samples."""

    def __init__(
        self, history: LeadTimeHistory, settings: LaunchSettings | None = None, clock: Clock | None = None
    ) -> None:
        self.history = history
        self.settings = settings or LaunchSettings()
        self.clock = clock or (lambda: datetime.now(UTC))
        self.pools: dict[str, PoolLaunches] = {}
        self._in_flight: dict[str, ClaimState] = {}  # watch key -> not yet Ready nor failed
        self._counted: dict[str, None] = {}  # uids whose outcome is recorded (insertion-ordered)

    def on_change(self, cache: WatchCache, event: WatchEvent | None) -> None:
        """A ``watch.OnChange``: a list (event None) or one event; never raises for bad input."""
        if event is None:
            for key, obj in cache.objects.items():
                self._observe(key, obj, gone=False)
            for key in [key for key in self._in_flight if key not in cache.objects]:
                self._gone(self._in_flight.pop(key), self.clock())  # deleted while the watch was down
        elif event.type in ("ADDED", "MODIFIED", "DELETED"):
            try:
                key = object_key(event.object)
            except (AttributeError, KeyError, TypeError):
                log.error("NodeClaim watch: an event without metadata, ignored: %.200s", event.object)
                return
            self._observe(key, event.object, gone=event.type == "DELETED")

    def _observe(self, key: str, obj: Mapping[str, Any], *, gone: bool) -> None:
        try:
            claim = read_claim(obj)
        except MalformedNodeClaim as error:
            log.error("NodeClaim %s ignored: %s", key, error)
            return
        self._node_size(claim)
        if claim.uid in self._counted:
            self._in_flight.pop(key, None)
            return
        ready = claim.ready_at
        if ready is not None:
            self._in_flight.pop(key, None)
            self._ready(claim, ready)
            return
        reason = failed_condition(claim)
        if reason is None and (gone or claim.deleting):
            reason = gone_reason(claim, self._gone_at(obj))
        if reason is not None:
            self._in_flight.pop(key, None)
            self._failed(claim, reason, self._gone_at(obj) if gone or claim.deleting else self.clock())
        elif gone:
            self._in_flight.pop(key, None)
        else:
            self._in_flight[key] = claim

    def _gone_at(self, obj: Mapping[str, Any]) -> datetime:
        """When it went: its ``deletionTimestamp``, else now."""
        return parse_kube_time((obj.get("metadata") or {}).get("deletionTimestamp")) or self.clock()

    def _gone(self, claim: ClaimState, at: datetime) -> None:
        reason = gone_reason(claim, at)
        if reason is not None and claim.uid not in self._counted:
            self._failed(claim, reason, at)

    def _node_size(self, claim: ClaimState) -> None:
        if claim.capacity and claim.instance_type:
            self.pool(claim.pool).node_sizes[claim.instance_type] = dict(claim.capacity)

    def pool(self, name: str) -> PoolLaunches:
        return self.pools.setdefault(name, PoolLaunches())

    def _count(self, uid: str) -> None:
        self._counted[uid] = None
        while len(self._counted) > KEEP_COUNTED:
            del self._counted[next(iter(self._counted))]

    def _failed(self, claim: ClaimState, reason: str, at: datetime) -> None:
        self._count(claim.uid)
        pool = self.pool(claim.pool)
        pool.failures[(claim.instance_type, reason)] += 1
        if pool.need_start is None or not self._continues_need(pool, claim):
            pool.need_start, pool.need_failures = claim.created, 0
        pool.need_start = min(pool.need_start, claim.created)
        pool.need_failures += 1
        pool.last_failure = max(pool.last_failure or at, at)
        pool.recent.append(Outcome(at, claim.name, claim.instance_type, reason))
        log.warning("NodeClaim %s of pool %r failed to launch: %s", claim.name, claim.pool, reason)

    def _continues_need(self, pool: PoolLaunches, claim: ClaimState) -> bool:
        """The NodeClaim belongs to the pool's open need: created no later than ``need_gap`` after its
        last failure."""
        return pool.last_failure is not None and claim.created <= pool.last_failure + self.settings.need_gap

    def _ready(self, claim: ClaimState, ready: datetime) -> None:
        self._count(claim.uid)
        pool = self.pool(claim.pool)
        own = (ready - claim.created).total_seconds()
        start, retries = claim.created, 0
        if pool.need_start is not None and claim.created >= pool.need_start:  # an older one leaves it open
            if self._continues_need(pool, claim):
                start, retries = pool.need_start, pool.need_failures
            pool.need_start, pool.need_failures, pool.last_failure = None, 0, None
        pool.ready[claim.instance_type] += 1
        if own > self.settings.slow_after.total_seconds():
            pool.slow[claim.instance_type] += 1
        seconds = (ready - start).total_seconds()
        pool.recent.append(Outcome(ready, claim.name, claim.instance_type, None, seconds, retries))
        condition = "Ready" if "Ready" in claim.conditions else "Initialized"
        sample = LeadTimeSample(claim.pool, claim.name, claim.uid, start, ready, condition)
        self.history.add(sample)

    def failing(self, pool: str, now: datetime | None = None) -> str | None:
        """Why the pool keeps failing (its last ``failing_after`` launches failed, the latest within
        ``failing_for``), or None."""
        launches = self.pools.get(pool)
        if launches is None or self.settings.failing_after < 1:
            return None
        last = list(launches.recent)[-self.settings.failing_after :]
        if len(last) < self.settings.failing_after or any(outcome.reason is None for outcome in last):
            return None
        now = now or self.clock()
        if now - last[-1].at > self.settings.failing_for:
            return None
        reasons = ", ".join(f"{reason} x{count}" for reason, count in Counter(o.reason or "" for o in last).items())
        return f"its last {len(last)} launches failed ({reasons}), the latest at {last[-1].at:%H:%M:%SZ}"

    def failing_pools(self, now: datetime | None = None) -> dict[str, str]:
        found = {name: self.failing(name, now) for name in self.pools}
        return {name: why for name, why in found.items() if why is not None}

    def node_sizes(self, pool: str) -> list[Mapping[str, float]]:
        launches = self.pools.get(pool)
        return [launches.node_sizes[kind] for kind in sorted(launches.node_sizes)] if launches is not None else []
