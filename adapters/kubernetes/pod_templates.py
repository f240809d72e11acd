"""The GPUs of pods that do not exist yet: a pod template run ``pods`` at once (a CronJob's next run, a
Kueue Workload's pod set), and the NodePool Karpenter would launch them in.

Counted as a pod is (``adapters.kubernetes.gpu_requests`` in the units of ``adapters.gpu_units``),
plus the template's DRA claims (``adapters.kubernetes.dra_claims``): each pod's own per pod, a claim
the template names once. Pure functions over raw JSON.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from adapters.gpu_units import WHOLE_GPU, GpuUnits
from adapters.kubernetes.dra_claims import AllRequest, ClaimLookup, pod_claims
from adapters.kubernetes.gpu_requests import pod_gpu_requests
from adapters.kubernetes.pool_matching import NodePool, PoolChoice, choose_pool, selected_pool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuTemplate:
    """What ``pods`` pods of one template ask for."""

    pod_spec: Mapping[str, Any]
    per_pod: Mapping[str, float]  # GPUs of one pod, per resource
    gpus: float  # of all the pods: pods at once x GPUs per pod, plus the claims they share
    claimed: float = 0.0  # GPUs of one pod's resource claims (adapters.kubernetes.dra_claims)
    pods: int = 1
    # All requests, counted on a node of the pool the pods land in: each pod's, and the shared claims'.
    own_all: tuple[AllRequest, ...] = ()
    shared_all: tuple[AllRequest, ...] = ()
    what: str = "template"  # whose template, for the log

    def run_gpus(self, pool: str | None, claims: ClaimLookup | None) -> float:
        """GPUs of all the pods in ``pool``: ``gpus`` plus their All requests on a node of the pool."""
        if claims is None or not (self.own_all or self.shared_all):
            return self.gpus
        own, own_problems = claims.all_gpus(self.own_all, pool)
        shared, shared_problems = claims.all_gpus(self.shared_all, pool)
        for problem in dict.fromkeys(own_problems + shared_problems):
            log.warning("%s in pool %s: %s (not counted)", self.what, pool, problem)
        return self.gpus + self.pods * own + shared

    def pool(self, nodepools: Sequence[NodePool] | None, *, count_in_use: bool = False) -> PoolChoice:
        """The pool the pods land in; ``count_in_use`` False: the pool's whole limit counts (pods of a
        later run), True: what its nodes hold already is taken off it (pods due now)."""
        if nodepools is None:
            return selected_pool(self.pod_spec)
        try:
            gpus = self.per_pod.get(WHOLE_GPU, 0.0) + self.claimed
            return choose_pool(self.pod_spec, nodepools, gpus, count_in_use=count_in_use)
        except ValueError as exc:
            return PoolChoice(None, (), f"unreadable node affinity: {exc}")


def template_gpus(
    pod_spec: Mapping[str, Any],
    namespace: str,
    pods: int,
    units: GpuUnits,
    claims: ClaimLookup | None = None,
    what: str = "template",
) -> GpuTemplate | None:
    """The GPUs ``pods`` pods of ``pod_spec`` ask for; None when they ask for none. Raises ValueError
    for a GPU request it cannot read. ``claims`` None: DRA not watched."""
    per_pod = pod_gpu_requests(pod_spec, units)
    # In physical GPUs, as the GPU series count them: MIG by its slices, time-slicing by replicas.
    per_pod_gpus = units.gpus(per_pod)
    claimed, shared, own_all, shared_all = 0.0, 0.0, tuple[AllRequest, ...](), tuple[AllRequest, ...]()
    if claims is not None and pod_spec.get("resourceClaims"):
        resolved = pod_claims(pod_spec, {}, namespace, claims)
        for problem in resolved.problems:
            log.warning("%s: %s (not counted)", what, problem)
        claimed, shared = resolved.own, sum(resolved.shared.values())
        own_all, shared_all = resolved.own_all, tuple(r for rs in resolved.shared_all.values() for r in rs)
    gpus = pods * (float(per_pod_gpus) + claimed) + shared
    if gpus <= 0 and not (own_all or shared_all):
        return None
    return GpuTemplate(pod_spec, per_pod, gpus, claimed + shared, pods, own_all, shared_all, what)
