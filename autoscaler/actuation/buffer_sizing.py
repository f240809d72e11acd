"""How many chunks each pool's CapacityBuffer should hold, from the served values, and what the
writer knows about each buffer (for the inspection API, the page and ``/metrics``).

``spec.replicas = ceil(served value / GPUs per chunk)``: the served value already went through the
metric's min/max, pacing and caps, and its staleness fallback applies as for an HPA.

What the cluster's autoscaler then provisions follows its sizing rule (kubernetes/autoscaler
``capacitybuffer/translators/replicas.go`` since July 2026, Karpenter's controller alike):
max(``replicas``, ceil(``percentage`` x the scalable's replicas / 100)), capped by how many chunks fit
in ``limits``; with neither, as many as fit. Namespace ResourceQuotas may then lower it further,
which Cluster Autoscaler reports as the condition ``LimitedByQuotas``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from adapters.kubernetes.gpu_requests import parse_quantity
from autoscaler.config.actuator_settings import BufferPoolSettings
from autoscaler.serving.provider import MetricUnavailable, Snapshot, apply_staleness

# What the writer does with a buffer: writes it; would write it (dry run); leaves it to the replica
# holding the Lease; cannot (CapacityBuffers not served by the cluster, or no cluster at all).
Mode = Literal["writing", "dry-run", "standby", "unavailable"]
# The condition Cluster Autoscaler sets when namespace ResourceQuotas lowered a buffer's replicas.
LIMITED_BY_QUOTAS = "LimitedByQuotas"


@dataclass(frozen=True)
class Desired:
    """The replicas a served value asks for, or why there are none (``replicas`` None)."""

    replicas: int | None
    value: float | None
    reason: str


def replicas_for(value: float, gpus_per_chunk: int) -> int:
    """ceil(value / GPUs per chunk), blind to float residue (8.000000001 GPUs is one 8-GPU chunk)."""
    return max(0, math.ceil(round(value / gpus_per_chunk, 6)))


def desired(snapshot: Snapshot, pool: BufferPoolSettings, now: datetime) -> Desired:
    """The replicas the pool's served series asks for now; None when it has none (nothing is written)."""
    info = snapshot.metrics.get(pool.metric)
    wanted = pool.series_labels
    matching = [
        series
        for series in snapshot.series.get(pool.metric, ())
        if all(series.labels.get(key) == value for key, value in wanted.items())
    ]
    shown = ",".join(f"{key}={value}" for key, value in sorted(wanted.items()))
    if info is None or not matching:
        return Desired(None, None, f"no served series {pool.metric}{{{shown}}} yet")
    if len(matching) > 1:
        return Desired(None, None, f"{len(matching)} series of {pool.metric} match {{{shown}}}; labels must pick one")
    try:
        served = apply_staleness(info, matching[0], now)
    except MetricUnavailable as error:
        return Desired(None, matching[0].value, f"{error}; the buffer keeps its replicas")
    replicas = replicas_for(served.value, pool.gpus_per_chunk)
    return Desired(replicas, served.value, f"ceil({served.value:g} GPUs / {pool.gpus_per_chunk} per chunk)")


@dataclass(frozen=True)
class Sizing:
    """The chunks the cluster's autoscaler sizes a buffer to (``replicas`` None: it refuses the spec)."""

    replicas: int | None
    reason: str


def chunks_within(limit: float, request: float) -> int:
    """Whole chunks of ``request`` that fit in ``limit``, compared in milli-units as the autoscaler does."""
    return max(0, math.ceil(round(limit * 1000, 6)) // math.ceil(round(request * 1000, 6)))


def upstream_sizing(
    spec: Mapping[str, Any], chunk_requests: Mapping[str, float], scalable_replicas: int | None = None
) -> Sizing:
    """The autoscaler's sizing of a buffer ``spec`` whose chunk requests ``chunk_requests`` (before quotas).

    ``percentage`` counts only with a ``scalableRef`` (``scalable_replicas``); the writer's buffers
    name a PodTemplate, so for them it is ``replicas`` capped by ``limits``.
    """
    replicas, percentage, limits = spec.get("replicas"), spec.get("percentage"), spec.get("limits")
    sized: int | None = None
    reason = ""
    if isinstance(replicas, int):
        sized, reason = max(0, replicas), f"spec.replicas {replicas}"
    if isinstance(percentage, int) and scalable_replicas is not None:
        share = max(0, math.ceil(percentage * scalable_replicas / 100))
        if sized is None or share > sized:
            sized, reason = share, f"ceil({percentage} % of {scalable_replicas} replicas)"
    if isinstance(limits, Mapping) and limits:
        fits = {
            name: chunks_within(parse_quantity(limits[name]), request)
            for name, request in chunk_requests.items()
            if request > 0 and name in limits
        }
        if not fits:
            return Sizing(None, f"spec.limits names none of the chunk's requests ({', '.join(sorted(chunk_requests))})")
        name = min(fits, key=lambda key: fits[key])
        if sized is None or fits[name] < sized:
            capped = f"{reason}, capped by " if sized is not None else "as many as fit in "
            sized, reason = fits[name], f"{capped}spec.limits {name}={limits[name]}"
    if sized is None:
        return Sizing(None, "neither replicas, percentage of a scalableRef nor limits is set")
    return Sizing(sized, reason)


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str


@dataclass
class BufferState:
    """One pool's buffer as the writer sees it; mutated only by the actuator, on the event loop."""

    pool: BufferPoolSettings
    api_version: str | None = None
    mode: Mode = "unavailable"
    desired: Desired = field(default_factory=lambda: Desired(None, None, "no refresh yet"))
    # The spec.replicas this replica last wrote or read (None: not yet known).
    written: int | None = None
    written_at: datetime | None = None
    writes: int = 0
    # What the autoscaler reports in status (from the watch); None until it does.
    reported: int | None = None
    conditions: tuple[Condition, ...] = ()
    # The autoscaler's sizing rule applied to the spec as read back (None until read).
    sizing: Sizing | None = None
    last_error: str | None = None

    @property
    def limited_by_quotas(self) -> Condition | None:
        """Cluster Autoscaler's ``LimitedByQuotas`` condition, if it reports one."""
        return next((c for c in self.conditions if c.type == LIMITED_BY_QUOTAS), None)


def reported_status(obj: Mapping[str, Any]) -> tuple[int | None, tuple[Condition, ...]]:
    """``status.replicas`` and the conditions of a CapacityBuffer object."""
    status = obj.get("status") or {}
    replicas = status.get("replicas")
    conditions = tuple(
        Condition(
            type=str(item.get("type", "")),
            status=str(item.get("status", "")),
            reason=str(item.get("reason", "")),
            message=str(item.get("message", "")),
        )
        for item in status.get("conditions") or []
        if isinstance(item, Mapping)
    )
    return (int(replicas) if isinstance(replicas, int) else None), conditions
