"""Provisioning lead time learned from Karpenter NodeClaims (karpenter.sh/v1), per node pool.

lead time = lastTransitionTime of the ``Ready`` condition (``Initialized`` when Ready is missing;
status True) - ``metadata.creationTimestamp``. For GPU nodes ``Initialized`` already waits for
``nvidia.com/gpu`` to be allocatable, so either is the moment placeholder pods could have run.

NodeClaims disappear when Karpenter consolidates nodes, so the samples are kept here (the last N per
pool), not read from the watch cache alone. ``LeadTimeHistory.on_change`` plugs into a WatchGroup.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, Literal

import numpy as np
from kubernetes_asyncio.client import ApiClient, CustomObjectsApi

from adapters.kubernetes.client import parse_kube_time
from adapters.kubernetes.watch import WatchCache, WatchedResource, WatchEvent
from adapters.types import KARPENTER_NODEPOOL_LABEL

UNKNOWN_POOL = ""  # NodeClaims without the node pool label (created outside a NodePool)


def nodeclaim_resource(api: ApiClient) -> WatchedResource:
    """The cluster-scoped karpenter.sh/v1 NodeClaims; the list answers 404 where Karpenter is absent."""
    custom = CustomObjectsApi(api)
    return WatchedResource("nodeclaims", partial(custom.list_cluster_custom_object, "karpenter.sh", "v1", "nodeclaims"))


@dataclass(frozen=True)
class LeadTimeSample:
    nodepool: str
    name: str
    uid: str
    created: datetime
    ready: datetime
    condition: str  # "Ready" or "Initialized"

    @property
    def seconds(self) -> float:
        return (self.ready - self.created).total_seconds()


@dataclass(frozen=True)
class LeadTimeEstimate:
    """What the history says about one pool. ``seconds`` is None unless ``status == "learned"``:

    - "learned": the quantile of ``samples`` lead times;
    - "no-samples": Karpenter is there but no NodeClaim of this pool has become ready yet;
    - "absent": the NodeClaim API does not exist (no Karpenter): use the configured default.
    """

    nodepool: str | None
    seconds: float | None
    samples: int
    status: Literal["learned", "no-samples", "absent"]


def _true_since(conditions: Iterable[Mapping[str, Any]], condition_type: str) -> datetime | None:
    for condition in conditions:
        if condition.get("type") == condition_type and condition.get("status") == "True":
            return parse_kube_time(condition.get("lastTransitionTime"))
    return None


def lead_time_sample(nodeclaim: Mapping[str, Any]) -> LeadTimeSample | None:
    """The sample a NodeClaim gives, or None while it is not ready (or its times are unusable)."""
    metadata = nodeclaim.get("metadata") or {}
    created = parse_kube_time(metadata.get("creationTimestamp"))
    conditions = (nodeclaim.get("status") or {}).get("conditions") or []
    condition = "Ready"
    ready = _true_since(conditions, "Ready")
    if ready is None and not any(c.get("type") == "Ready" for c in conditions):
        condition = "Initialized"
        ready = _true_since(conditions, "Initialized")
    if created is None or ready is None or ready < created:
        return None
    return LeadTimeSample(
        nodepool=str((metadata.get("labels") or {}).get(KARPENTER_NODEPOOL_LABEL, UNKNOWN_POOL)),
        name=str(metadata.get("name", "")),
        uid=str(metadata.get("uid") or metadata.get("name", "")),
        created=created,
        ready=ready,
        condition=condition,
    )


class LeadTimeHistory:
    """The last ``keep_last`` lead times per node pool, each NodeClaim counted once."""

    def __init__(self, keep_last: int = 50) -> None:
        if keep_last < 1:
            raise ValueError("keep_last must be at least 1")
        self.keep_last = keep_last
        self._by_pool: dict[str, list[LeadTimeSample]] = {}  # oldest first, by readiness

    def observe(self, nodeclaim: Mapping[str, Any]) -> bool:
        """Record the NodeClaim's lead time if it is ready and new; True when a sample was added."""
        sample = lead_time_sample(nodeclaim)
        return sample is not None and self.add(sample)

    def restore(self, samples: Iterable[LeadTimeSample]) -> int:
        """Take samples another process learned (published with the forecasts); how many were new.

        NodeClaims consolidated away since are only in those: a new pod keeps learning from them.
        """
        return sum(self.add(sample) for sample in samples)

    def add(self, sample: LeadTimeSample) -> bool:
        """Record a sample unless its NodeClaim is known or it is older than the last ``keep_last``."""
        samples = self._by_pool.setdefault(sample.nodepool, [])
        if any(kept.uid == sample.uid for kept in samples):
            return False
        # A relist brings back NodeClaims older than everything kept: they are not "the last N".
        if len(samples) >= self.keep_last and sample.ready <= samples[0].ready:
            return False
        bisect.insort(samples, sample, key=lambda kept: kept.ready)
        del samples[: -self.keep_last]
        return True

    def observe_all(self, nodeclaims: Iterable[Mapping[str, Any]]) -> int:
        return sum(self.observe(nodeclaim) for nodeclaim in nodeclaims)

    def on_change(self, cache: WatchCache, event: WatchEvent | None) -> None:
        """A ``watch.OnChange`` callback: learn from every list and ADDED/MODIFIED event."""
        if event is None:
            self.observe_all(cache.objects.values())
        elif event.type in ("ADDED", "MODIFIED"):
            self.observe(event.object)

    def pools(self) -> list[str]:
        return sorted(self._by_pool)

    def samples(self, nodepool: str | None = None) -> list[LeadTimeSample]:
        """Samples of one pool, or of all pools (None), oldest first."""
        if nodepool is not None:
            return list(self._by_pool.get(nodepool, ()))
        return sorted((s for pool in self._by_pool.values() for s in pool), key=lambda s: s.ready)

    def estimate(self, nodepool: str | None, quantile: float, *, absent: bool = False) -> LeadTimeEstimate:
        """The ``quantile`` (e.g. 0.9) of the pool's lead times; ``nodepool`` None pools them all.

        Pass ``absent=cache.absent`` from the NodeClaim watch: with no samples it then says why.
        """
        if not 0.0 <= quantile <= 1.0:
            raise ValueError("quantile must be within [0, 1]")
        samples = self.samples(nodepool)
        if samples:
            seconds = float(np.quantile([s.seconds for s in samples], quantile))
            return LeadTimeEstimate(nodepool, seconds, len(samples), "learned")
        return LeadTimeEstimate(nodepool, None, 0, "absent" if absent else "no-samples")
