"""How the served headroom becomes spare capacity the node autoscaler provisions for: the actuation.

``placeholder-hpa`` (the default): an HPA scales a Deployment of 1-GPU placeholder pods on the
served metric (``AverageValue`` target 1, so one placeholder per GPU), every 15 s, with its
tolerances, scale-down stabilisation and rate limits (:mod:`autoscaler.simulation.hpa`). Placeholders
are real pods: real pods preempt them, and a preempted placeholder is Pending again, which triggers
the provisioner at once.

``capacity-buffer``: the served headroom is written as a CapacityBuffer's
``spec.replicas = ceil(headroom / GPUs per chunk)`` at every step of the served metric (the service's
refresh), with no HPA in between: no tolerance, no stabilisation window, no rate limit. The served
values are already what ``policy.decide`` serves (its minimum, maximum, pacing and caps, none of
which the simulator configures), so the replicas follow them exactly. The buffer's virtual pods are
as many as the autoscaler's sizing rule gives (``autoscaler.actuation.buffer_sizing.upstream_sizing``, July
2026): ``spec.replicas``, capped by the chunks that fit in ``spec.limits`` when ``--buffer-limit-gpus``
sets one (the buffer names a PodTemplate, so no ``percentage``; namespace quotas are not modelled).
What the node autoscaler does with the buffer is modelled on Karpenter's implementation (the
``CapacityBuffer`` feature gate):

- Each replica is a *virtual* pod of one chunk, added to the Pending pods of every provisioning pass
  (``GetPendingPods``) and placed in its scheduling simulation, first on free capacity of existing
  and launching nodes, then on new NodeClaims. No pod object exists, so nothing is preempted: real
  pods use any free GPU, and a virtual pod only asks for capacity beyond what real pods request.
  Provisioning therefore wants real requests plus the buffer's GPUs, as with placeholders, and new
  nodes take the same lead time, batching and launches.
- A node that hosts virtual pods is not empty (its emptiness check counts them), so virtual pods
  hold nodes against ``consolidateAfter`` as running placeholders do: they sit on free Ready GPUs,
  whole chunks at a time.
- The provisioner runs only when triggered: by a Pending real pod (which it requeues every 10 s while
  it stays Pending; taken here as at once), and by the buffer's controller, which triggers it on every
  reconcile: when the buffer changes (our write of ``spec.replicas``) and on its periodic requeue every
  30 s. A real pod that fits at once on free capacity is bound by the scheduler without ever being
  Pending, so the virtual pods it displaces are provisioned for at the next trigger: up to 30 s later
  (with placeholders, the preempted one is Pending at once). That is modelled: a deficit opens a
  batch only at a trigger. The requeue's phase comes from when the buffer was created (a write in
  between adds a reconcile without moving it), unrelated to the trace's minute grid, where fluid
  demand changes; the requeues are put half a period off that grid (15 s), the mean delay of a
  random phase. At phase 0 every minute boundary would be a trigger and the delay would vanish on
  a demand series.

What was read to model this (Karpenter at commit 226646810, not vendored): its capacity-buffer
design, the provisioner's virtual-pod injection and buffer status, the buffer controller's reconcile
(30 s requeue, provisioner trigger) and the emptiness check of disruption.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from autoscaler.actuation.buffer_sizing import chunks_within, replicas_for
from autoscaler.simulation.defaults import PLACEHOLDER_GPUS as PLACEHOLDER_GPUS  # re-exported
from autoscaler.simulation.defaults import ActuationKind
from autoscaler.simulation.hpa import SYNC_PERIOD_S, HPASpec, milli_value, placeholder_replicas

# The buffer controller requeues every buffer this often, and triggers the provisioner each time;
# the requeues fall this far after each whole step (see the module's docstring).
BUFFER_RESYNC_S = 30.0
BUFFER_RESYNC_OFFSET_S = 15.0
# A placeholder holds one GPU (PLACEHOLDER_GPUS: the HPA's AverageValue target of 1); a buffer chunk
# defaults to it.


@dataclass(frozen=True)
class Actuation:
    """Which actuation a run uses and its settings (the HPA's, or the buffer's chunk size)."""

    kind: ActuationKind = "placeholder-hpa"
    hpa: HPASpec = field(default_factory=HPASpec)
    chunk_gpus: int = PLACEHOLDER_GPUS
    # The buffer's spec.limits on its GPU resource (None: no limits).
    limit_gpus: int | None = None

    @property
    def buffer(self) -> bool:
        return self.kind == "capacity-buffer"


@dataclass(frozen=True)
class SpareCapacity:
    """What the node autoscaler is asked to hold besides real pods, as a step function on a regular
    grid from ``start``: ``replicas[i]`` placeholders or virtual pods of ``chunk_gpus`` each from
    ``start + i * interval``. ``triggers`` are the moments the buffer controller triggers the
    provisioner; ``None`` (placeholders): every deficit is a Pending pod, a trigger in itself."""

    start: float
    interval: float
    replicas: np.ndarray
    chunk_gpus: int
    triggers: np.ndarray | None

    @property
    def gpus(self) -> np.ndarray:
        return self.replicas * self.chunk_gpus

    def change_times(self) -> np.ndarray:
        """The grid moments where the count changes (the first one included)."""
        changed = np.flatnonzero(np.diff(self.replicas, prepend=-1) != 0)
        return self.start + self.interval * changed


def buffer_replicas(headroom: np.ndarray, chunk_gpus: int, limit_gpus: int | None = None) -> np.ndarray:
    """The virtual pods per step: the live writer's ``replicas_for`` (``ceil(headroom / chunk_gpus)``),
    capped as the autoscaler caps ``spec.replicas`` by ``spec.limits`` (whole chunks within
    ``limit_gpus``). A value that cannot be served (NaN, negative, infinite) writes nothing, so the last
    written count stays (0 before the first)."""
    replicas = np.zeros(len(headroom), dtype=np.int64)
    current = 0
    for position, value in enumerate(headroom.tolist()):
        if math.isfinite(value) and value >= 0:
            current = replicas_for(value, chunk_gpus)
        replicas[position] = current
    if limit_gpus is not None:
        np.minimum(replicas, chunks_within(limit_gpus, chunk_gpus), out=replicas)
    return replicas


def spare_capacity(actuation: Actuation, metric: np.ndarray, step_s: float, start: float, end: float) -> SpareCapacity:
    """The placeholders or the buffer's virtual pods, from ``start`` (on a whole step) to ``end``, for
    the served metric ``metric[step]``."""
    first_step = int(start // step_s)
    if actuation.buffer:
        replicas = buffer_replicas(metric[first_step:], actuation.chunk_gpus, actuation.limit_gpus)
        requeues = math.ceil((end - start - BUFFER_RESYNC_OFFSET_S) / BUFFER_RESYNC_S)
        ticks = start + BUFFER_RESYNC_OFFSET_S + BUFFER_RESYNC_S * np.arange(max(requeues, 0))
        writes = start + step_s * np.flatnonzero(np.diff(replicas, prepend=-1) != 0)
        triggers = np.unique(np.concatenate([ticks, writes]))
        return SpareCapacity(start, step_s, replicas, actuation.chunk_gpus, triggers)
    syncs = start + SYNC_PERIOD_S * np.arange(math.ceil((end - start) / SYNC_PERIOD_S))
    # The served value as the HPA reads it (a quantity in milli-units, rounded up), once per step;
    # NaN is a metric the HPA cannot read (-1). Read once per distinct value: a buffer serves a few.
    distinct, index = np.unique(metric[first_step:], return_inverse=True)
    readings = [-1 if math.isnan(value) else milli_value(max(value, 0.0)) for value in distinct.tolist()]
    served = np.asarray(readings, dtype=np.int64)[index.reshape(-1)]
    usage = served[np.minimum((syncs // step_s).astype(np.int64), len(metric) - 1) - first_step]
    replicas = placeholder_replicas(syncs, usage, actuation.hpa)
    return SpareCapacity(start, SYNC_PERIOD_S, replicas, PLACEHOLDER_GPUS, None)
