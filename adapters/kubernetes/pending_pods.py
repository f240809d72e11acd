"""Pending GPU pods: demand waiting for a node, resolved to the NodePool Karpenter would launch it in.

The watch lists and watches only pods in phase ``Pending`` (field selector ``status.phase=Pending``);
a pod that starts running leaves it (the API server sends DELETED). Of those, only pods no node has
been chosen for (no ``spec.nodeName``) wait for Karpenter: a pod bound to a node that is still
pulling its image already carries its node's pool in Prometheus (``kube_node_labels``).

GPUs are what the pod requests (the scheduler's effective request) of the resources the
``gpus_requested`` signal counts, in the same units (``adapters.gpu_units.GpuUnits``). Pure
functions over raw pod JSON, apart from the watch itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from kubernetes_asyncio.client import ApiClient, CoreV1Api

from adapters.gpu_units import WHOLE_GPU, GpuUnits
from adapters.kubernetes.dra_claims import AllRequest, ClaimLookup, pod_claims
from adapters.kubernetes.gpu_requests import pod_gpu_requests
from adapters.kubernetes.pool_matching import NodePool, PoolChoice, UnplacedDemand, choose_pool, selected_pool
from adapters.kubernetes.watch import WatchedResource

log = logging.getLogger(__name__)

PENDING = "status.phase=Pending"


def pending_pod_resource(api: ApiClient) -> WatchedResource:
    """Pods in phase Pending, in every namespace."""
    core = CoreV1Api(api)
    return WatchedResource("pending pods", partial(core.list_pod_for_all_namespaces, field_selector=PENDING))


def waiting_for_a_node(pod: Mapping[str, Any]) -> bool:
    """Pending and not yet bound to a node: the pods Karpenter provisions for."""
    status = pod.get("status") or {}
    return status.get("phase") == "Pending" and not (pod.get("spec") or {}).get("nodeName")


@dataclass(frozen=True)
class PendingGpus:
    """One waiting pod's GPUs and the pool they land in (``choice.pool`` None: no pool fits)."""

    namespace: str
    name: str
    gpus: float
    choice: PoolChoice
    # Of ``gpus``, those asked for through DRA claims: kube-state-metrics exports none of them, so
    # the GPU signal's pool-less series does not hold them.
    claimed: float = 0.0


def _pod_choice(spec: Mapping[str, Any], gpus: float, nodepools: Sequence[NodePool] | None) -> PoolChoice:
    if nodepools is None:  # NodePools unknown (no Karpenter, or not listed yet): the selector alone
        return selected_pool(spec)
    try:
        return choose_pool(spec, nodepools, gpus, count_in_use=True)
    except ValueError as exc:  # an affinity the API would not have accepted; said, not dropped
        return PoolChoice(None, (), f"unreadable node affinity: {exc}")


def pending_gpus(
    pods: Iterable[Mapping[str, Any]],
    nodepools: Sequence[NodePool] | None,
    is_placeholder: Callable[[Mapping[str, Any]], bool],
    units: GpuUnits | None = None,
    claims: ClaimLookup | None = None,
) -> list[PendingGpus]:
    """The GPUs of every pod waiting for a node, placeholders left out, each with its pool.

    ``nodepools`` None: the NodePools are not known, and only a ``karpenter.sh/nodepool`` selector
    names a pool. GPUs are physical ones, as the GPU series count them (``units``, default
    ``GpuUnits()``: a MIG instance by its slices, a time-sliced resource by its replicas); a pool's
    ``nvidia.com/gpu`` limit is checked against the ``nvidia.com/gpu`` the pod asks for.

    ``claims``: the ResourceClaims and templates the watches hold (None: DRA not watched); a pod's
    claims add their GPUs (``adapters.kubernetes.dra_claims``), a claim several pods share only once.
    """
    units = units or GpuUnits()
    shared_counted: set[str] = set()
    found: list[PendingGpus] = []
    for pod in pods:
        if not waiting_for_a_node(pod) or is_placeholder(pod):
            continue
        spec = pod.get("spec") or {}
        try:
            requests = pod_gpu_requests(spec, units)
        except ValueError as exc:  # a quantity the API would not have accepted, a MIG name of no known shape
            metadata = pod.get("metadata") or {}
            log.warning("Pending pod %s/%s skipped: %s", metadata.get("namespace"), metadata.get("name"), exc)
            continue
        metadata = pod.get("metadata") or {}
        namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
        claimed, all_requests, problems = 0.0, tuple[AllRequest, ...](), list[str]()
        if claims is not None and spec.get("resourceClaims"):
            resolved = pod_claims(spec, pod.get("status") or {}, namespace, claims)
            claimed, all_requests = resolved.take(shared_counted)
            problems += resolved.problems
        # The pool is chosen on the GPUs known without a node; All requests then count what a node
        # of that pool offers.
        choice = _pod_choice(spec, requests.get(WHOLE_GPU, 0.0) + claimed, nodepools)
        if all_requests and claims is not None:
            on_node, unresolved = claims.all_gpus(all_requests, choice.pool)
            claimed += on_node
            problems += unresolved
        for problem in problems:
            log.warning("Pending pod %s/%s: %s (not counted)", namespace, name, problem)
        gpus = units.gpus(requests) + claimed
        if gpus > 0:
            found.append(PendingGpus(namespace, name, gpus, choice, claimed))
    return found


def unplaced(pending: Iterable[PendingGpus]) -> list[UnplacedDemand]:
    return [
        UnplacedDemand("pending_pod", pod.namespace, pod.name, pod.gpus, pod.choice.reason)
        for pod in pending
        if pod.choice.pool is None
    ]
