"""Several Karpenter-like node pools with scarce capacity: launches that fail, spot nodes reclaimed.

The provisioner batches as :class:`~autoscaler.simulation.provisioner.NodePool` does (one batch for
the whole cluster). When a batch closes, the GPUs wanted beyond what Ready and launching nodes hold
go to the heaviest pool that can take them (within its ``limit_gpus``, not passed over), then to the
next by weight, as Karpenter's scheduler falls back (docs/launch-outcomes.md):

- each node launch fails with the launch failure rate (a seeded generator: runs repeat exactly). A
  failed launch is known at once (the cloud's create call returns InsufficientCapacity) and costs
  nothing; its pool is passed over for ``UNAVAILABLE_S`` (the provider's unavailable-offerings
  cache), so the rest falls back to the next pool by weight. GPUs still wanted after a failure are
  retried by a new batch (its pods are still Pending): in the pools not passed over, or, when every
  pool with room is, in those again (Karpenter keeps trying a failing pool when no other fits).
- a spot node is reclaimed after an exponential time (interruptions per spot node-hour). The notice
  comes ``SPOT_NOTICE_S`` before: the node is cordoned, the provisioner counts it as gone (so its
  replacement launches at the notice), and its pods run until it goes. Then its GPUs are gone and
  whatever ran beyond the remaining Ready GPUs is Pending again (the cluster's ``allocate``).

GPUs are fluid across nodes and pools, as in the one-pool model: free GPUs form whole empty nodes
in the lightest pools first (pods pack onto the pools Karpenter prefers), and those reach
``consolidateAfter``. Held GPUs (Ready, cordoned or launching: what is billed) are integrated per
pool over the scored period, for the cost in money.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from autoscaler.simulation.pools import SPOT_NOTICE_S, UNAVAILABLE_S, PoolSpec, Scarcity
from autoscaler.simulation.provisioner import BatchWindow


@dataclass(frozen=True)
class PoolSetConfig:
    pools: tuple[PoolSpec, ...]  # in weight order
    scarcity: Scarcity
    consolidate_after_s: float
    scored_from: float = 0.0
    seed: int = 0


class _Pool:
    """One pool's nodes: Ready (cordoned ones included), launching, empty timers, spot timers."""

    def __init__(self, spec: PoolSpec) -> None:
        self.spec = spec
        self.gpus_per_node = spec.gpus_per_node
        self.distribution = spec.distribution
        self.ready = 0
        self.launching: list[float] = []  # heap of Ready times
        self.empty_since: deque[float] = deque()
        self.notices: list[float] = []  # heap: when each uncordoned spot node gets its notice
        self.cordoned: list[float] = []  # heap: when each cordoned node goes
        self.unavailable_until = -math.inf
        self.held_seconds = 0.0  # held GPU-seconds in the scored period
        self.held_since = 0.0
        self.launches = self.failures = self.interruptions = 0

    @property
    def held_nodes(self) -> int:
        return self.ready + len(self.launching)

    def room_nodes(self) -> int | float:
        limit = self.spec.limit_gpus
        return (
            math.inf if limit is None else max(0, (limit - self.held_nodes * self.gpus_per_node) // self.gpus_per_node)
        )

    def next_event(self, consolidate_after_s: float) -> float:
        candidates = []
        if self.launching:
            candidates.append(self.launching[0])
        if self.empty_since:
            candidates.append(self.empty_since[0] + consolidate_after_s)
        if self.notices:
            candidates.append(self.notices[0])
        if self.cordoned:
            candidates.append(self.cordoned[0])
        return min(candidates, default=math.inf)


class PoolSet:
    """The interface the engine's loop reads (as :class:`NodePool`'s): ``capacity``, ``held_gpus``,
    ``launches``, ``turn_ready``, ``track_empty``, ``provision``, ``next_event``."""

    def __init__(self, config: PoolSetConfig, ready_gpus: float = 0.0, start: float = 0.0) -> None:
        self.config = config
        self.pools = [_Pool(spec) for spec in config.pools]
        self._lightest_first = self.pools[::-1]
        self._rng = np.random.default_rng(config.seed)
        self._rate_per_s = config.scarcity.spot_interruptions_per_node_hour / 3600.0
        self._failure_rate = config.scarcity.launch_failure_rate
        self.capacity = 0
        self.held_gpus = 0
        self.launches = 0
        self._batch = BatchWindow()
        for pool in self.pools:  # the starting nodes, in weight order within limits
            pool.held_since = start
            nodes = min(pool.room_nodes(), math.ceil(max(0.0, ready_gpus) / pool.gpus_per_node - 1e-9))
            for _ in range(int(nodes)):
                self._add_ready(pool, start)
            self.held_gpus += int(nodes) * pool.gpus_per_node
            ready_gpus -= nodes * pool.gpus_per_node

    # -- bookkeeping -------------------------------------------------------------------------------

    def _held_changes(self, pool: _Pool, now: float) -> None:
        """Integrate the pool's held GPUs up to ``now`` (over the scored period) before they change."""
        since = max(pool.held_since, self.config.scored_from)
        if now > since:
            pool.held_seconds += pool.held_nodes * pool.gpus_per_node * (now - since)
        pool.held_since = now

    def _add_ready(self, pool: _Pool, now: float) -> None:
        """A node turns Ready (it was held while launching, or is a starting one)."""
        pool.ready += 1
        self.capacity += pool.gpus_per_node
        if pool.spec.spot and self._rate_per_s > 0:
            heapq.heappush(pool.notices, now + float(self._rng.exponential(1.0 / self._rate_per_s)))

    def _remove_ready(self, pool: _Pool, now: float, *, cordoned_first: bool) -> None:
        """A node goes: a cordoned one when it is reclaimed, else an uncordoned one (any spot timer:
        the times left are exponential, whichever node it is) unless only cordoned ones are left."""
        self._held_changes(pool, now)
        pool.ready -= 1
        self.capacity -= pool.gpus_per_node
        self.held_gpus -= pool.gpus_per_node
        if cordoned_first:
            heapq.heappop(pool.cordoned)
        elif pool.ready < len(pool.cordoned):
            pool.cordoned.pop()  # the last leaf: the heap stays a heap
        elif pool.notices:
            pool.notices.pop()  # the last leaf: the heap stays a heap

    def gpu_hours(self, end: float) -> dict[str, float]:
        """Held GPU-hours per pool over the scored period up to ``end``."""
        for pool in self.pools:
            self._held_changes(pool, end)
        return {pool.spec.name: pool.held_seconds / 3600 for pool in self.pools}

    def cost(self, end: float) -> float:
        hours = self.gpu_hours(end)
        return sum(hours[pool.spec.name] * pool.spec.price_per_gpu_hour for pool in self.pools)

    # -- the engine's interface ----------------------------------------------------------------------

    def next_event(self) -> float:
        after = self.config.consolidate_after_s
        return min(self._batch.close, *(pool.next_event(after) for pool in self.pools))

    def turn_ready(self, now: float) -> None:
        """Launched nodes turn Ready; spot notices cordon nodes; cordoned nodes whose notice ran out go."""
        for pool in self.pools:
            while pool.launching and pool.launching[0] <= now:
                heapq.heappop(pool.launching)
                self._add_ready(pool, now)
            while pool.notices and pool.notices[0] <= now:
                heapq.heappush(pool.cordoned, heapq.heappop(pool.notices) + SPOT_NOTICE_S)
                if now >= self.config.scored_from:
                    pool.interruptions += 1
            while pool.cordoned and pool.cordoned[0] <= now:
                self._remove_ready(pool, now, cordoned_first=True)

    def track_empty(self, now: float, free_gpus: float) -> None:
        """Free GPUs form whole empty nodes in the lightest pools first; nodes empty for
        ``consolidateAfter`` go."""
        after = self.config.consolidate_after_s  # as next_event adds it (NodePool.track_empty)
        for pool in self._lightest_first:
            empty = max(0, min(pool.ready, int(free_gpus // pool.gpus_per_node + 1e-9)))
            free_gpus -= empty * pool.gpus_per_node
            timers = pool.empty_since
            while len(timers) < empty:
                timers.append(now)
            while len(timers) > empty:
                timers.pop()
            while timers and timers[0] + after <= now:
                timers.popleft()
                self._remove_ready(pool, now, cordoned_first=False)

    def provision(self, now: float, wanted_gpus: float, triggered: bool = True) -> None:
        """Karpenter's batching (as :meth:`NodePool.provision`); cordoned nodes count as gone."""
        counted = self.held_gpus - sum(len(pool.cordoned) * pool.gpus_per_node for pool in self.pools)
        deficit = wanted_gpus - counted
        if now >= self._batch.close:
            retry = deficit > 0 and self._launch(now, deficit)
            self._batch.reset()
            if retry:  # the pods are still Pending: a new batch
                self._batch.open(now)
            return
        self._batch.observe(now, deficit, triggered)

    def _launch_order(self, now: float) -> list[_Pool]:
        """Pools with room in weight order, those passed over left out unless every one is."""
        with_room = [pool for pool in self.pools if pool.room_nodes() > 0]
        available = [pool for pool in with_room if pool.unavailable_until <= now]
        return available or with_room

    def _launch(self, now: float, deficit: float) -> bool:
        """Launch nodes for ``deficit`` GPUs, heaviest pool first; a failed launch passes its pool
        over and the rest falls back to the next. Whether GPUs are still wanted after a failure."""
        scored = now >= self.config.scored_from
        failed = False
        for pool in self._launch_order(now):
            nodes = min(pool.room_nodes(), math.ceil(deficit / pool.gpus_per_node - 1e-9)) if deficit > 0 else 0
            for _ in range(int(nodes)):
                if self._failure_rate and self._rng.random() < self._failure_rate:
                    pool.unavailable_until = now + UNAVAILABLE_S
                    pool.failures += scored
                    failed = True
                    break
                self._held_changes(pool, now)
                heapq.heappush(pool.launching, now + pool.distribution.sample(self._rng))
                self.held_gpus += pool.gpus_per_node
                self.launches += 1
                pool.launches += scored
                deficit -= pool.gpus_per_node
        return failed and deficit > 0
