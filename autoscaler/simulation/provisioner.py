"""A Karpenter-like node pool: batches Pending pods, launches nodes that turn Ready after a drawn lead
time, and removes nodes that stayed empty for ``consolidateAfter`` (``consolidationPolicy: WhenEmpty``).

GPUs are treated as fluid across nodes (perfect packing): whatever is free forms whole empty nodes
first, as if the scheduler packed pods tightly (``MostAllocated``) and a node emptied whenever the
free GPUs add up to one. Pods never need more GPUs than a node has (the inputs check this).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from autoscaler.simulation.lead_times import LeadTimeDistribution

# Karpenter's defaults: a batch closes 1 s after the last new Pending pod, at most 10 s after the first.
BATCH_IDLE_S = 1.0
BATCH_MAX_S = 10.0


@dataclass(frozen=True)
class PoolConfig:
    gpus_per_node: int
    lead_time: LeadTimeDistribution
    consolidate_after_s: float
    batch_idle_s: float = BATCH_IDLE_S
    batch_max_s: float = BATCH_MAX_S
    seed: int = 0


class BatchWindow:
    """Karpenter's provisioning batch: opened by pods that do not fit (when something triggers the
    provisioner), extended by ``idle_s`` whenever more arrive, closed at most ``max_s`` after it
    opened. One window for a node pool and for a set of pools alike."""

    __slots__ = ("_last_deficit", "close", "idle_s", "max_s", "start")

    def __init__(self, idle_s: float = BATCH_IDLE_S, max_s: float = BATCH_MAX_S) -> None:
        self.idle_s, self.max_s = idle_s, max_s
        self.start = self.close = math.inf
        self._last_deficit = 0.0

    def reset(self) -> None:
        """The batch closed: nothing open until pods that do not fit open the next."""
        self.start = self.close = math.inf
        self._last_deficit = 0.0

    def open(self, now: float) -> None:
        self.start, self.close = now, now + self.idle_s

    def observe(self, now: float, deficit: float, triggered: bool) -> None:
        """GPUs wanted past the nodes held (``deficit``) open or extend the batch at a trigger."""
        if deficit <= 0:
            self._last_deficit = 0.0
            return
        if not triggered:
            return
        if self.start == math.inf:
            self.open(now)
        elif deficit > self._last_deficit:  # new Pending pods extend the batch, up to its maximum
            self.close = min(now + self.idle_s, self.start + self.max_s)
        self._last_deficit = deficit


class NodePool:
    """Nodes Ready and launching, the provisioner's batch window, and empty-node timers."""

    def __init__(self, config: PoolConfig, ready: int = 0) -> None:
        self.config = config
        self.ready = ready
        self.held_gpus = ready * config.gpus_per_node  # Ready and launching (what is billed)
        self.launches = 0
        self._launching: list[float] = []  # heap of Ready times
        # When each currently empty Ready node became empty; the most recent is reused first.
        self._empty_since: deque[float] = deque()
        self._batch = BatchWindow(config.batch_idle_s, config.batch_max_s)
        self._rng = np.random.default_rng(config.seed)
        self.launch_times: list[float] = []

    @property
    def launching(self) -> int:
        return len(self._launching)

    @property
    def capacity(self) -> int:
        """GPUs on Ready nodes."""
        return self.ready * self.config.gpus_per_node

    def next_event(self) -> float:
        """The next moment the pool changes by itself: a node turns Ready, a batch closes, or an
        empty node reaches ``consolidateAfter``."""
        ready = self._launching[0] if self._launching else math.inf
        due = self._empty_since[0] + self.config.consolidate_after_s if self._empty_since else math.inf
        return min(ready, self._batch.close, due)

    def turn_ready(self, now: float) -> None:
        """Nodes whose lead time has passed become Ready."""
        while self._launching and self._launching[0] <= now:
            heapq.heappop(self._launching)
            self.ready += 1

    def track_empty(self, now: float, free_gpus: float) -> None:
        """Update the empty-node timers from the GPUs no pod (real or placeholder) holds, then remove
        the nodes empty for ``consolidateAfter``. Removing only empty nodes never moves a pod."""
        empty = int(free_gpus // self.config.gpus_per_node + 1e-9)
        timers = self._empty_since
        while len(timers) < empty:
            timers.append(now)
        while len(timers) > empty:
            timers.pop()  # a node that filled up again: the newest empty one
        # The same sum as next_event's: now - after can round below a fractional timer that
        # timer + after reaches, and the loop would wait for that moment for ever.
        after = self.config.consolidate_after_s
        while timers and timers[0] + after <= now:
            timers.popleft()
            self.ready -= 1
            self.held_gpus -= self.config.gpus_per_node

    def provision(self, now: float, wanted_gpus: float, triggered: bool = True) -> None:
        """Karpenter's loop for ``wanted_gpus`` requested by pods (Pending or not): pods that do not
        fit on Ready or launching nodes open or extend a batch; when it closes, nodes are launched.

        ``triggered`` says whether something triggers the provisioner now. A Pending pod always does
        (the default); a CapacityBuffer's virtual pods do only through the buffer controller, so an
        unmet virtual pod opens or extends a batch only at such a trigger."""
        config = self.config
        deficit = wanted_gpus - (self.ready + len(self._launching)) * config.gpus_per_node
        if now >= self._batch.close:
            nodes = math.ceil(deficit / config.gpus_per_node - 1e-9) if deficit > 0 else 0
            for _ in range(nodes):
                ready_at = now + config.lead_time.sample(self._rng)
                heapq.heappush(self._launching, ready_at)
                self.launch_times.append(now)
            self.launches += nodes
            self.held_gpus += nodes * config.gpus_per_node
            self._batch.reset()
            return
        self._batch.observe(now, deficit, triggered)
