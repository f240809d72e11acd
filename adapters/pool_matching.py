"""Which Karpenter NodePool (``karpenter.sh/v1``) a pod's GPUs land in, decided as Karpenter decides.

Pure functions over raw JSON (pod specs and NodePools as the watches keep them), after
kubernetes-sigs/karpenter ``pkg/controllers/provisioning``:

- Pools: only those Karpenter provisions from: not static (``spec.replicas`` unset), not being
  deleted, ``Ready``; tried in ``OrderByWeight`` order: higher ``spec.weight`` first (unset is 0),
  equal weights by name in *descending* order, as Karpenter sorts them.
- A pool fits a pod when (``NodeClaim.CanAdd``) the pod tolerates every taint of
  ``spec.template.spec.taints`` (``startupTaints`` never block), and the pod's node requirements are
  compatible with the pool's (``node_requirements.incompatibility``): its template requirements and
  labels, plus ``karpenter.sh/nodepool: <name>`` and its node class label. The pool's ``limits`` must
  leave room (the scheduler's ``remainingResources``): ``nvidia.com/gpu`` and ``nodes``, less what its
  nodes already hold (``status.resources``, ``status.nodes``) for a pod waiting now; for a template of
  future pods the whole limit.
- A pod's requirements are its ``nodeSelector``, its first required node affinity term and its
  heaviest preferred term. When no pool fits, Karpenter relaxes (``Preferences.Relax``) one step at a
  time and tries every pool again: the next required term (terms are ORed), then the next preferred
  term, then, if a pool has ``PreferNoSchedule`` taints, a toleration of them.

What is not modelled: whether the cloud provider offers an instance type that meets the pod's
well-known-label requirements and resources, topology spread, pod (anti-)affinity and volumes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from adapters import node_requirements as reqs
from adapters.gpu_requests import parse_quantity
from adapters.gpu_units import WHOLE_GPU
from adapters.types import KARPENTER_NODEPOOL_LABEL

NodePool = Mapping[str, Any]

# content.IsDecimalInteger, which toleration comparisons require of both values: no sign but "-",
# no leading zeros.
_DECIMAL_INTEGER = re.compile(r"^-?(0|[1-9][0-9]*)$")


@dataclass(frozen=True)
class PoolChoice:
    """The pool Karpenter would launch a node of for a pod, and why."""

    pool: str | None  # None: no pool fits
    fits: tuple[str, ...]  # every pool that fits, in the order Karpenter tries them
    reason: str  # how the pool was chosen, or why none fits (a pool each)


@dataclass(frozen=True)
class UnplacedDemand:
    """GPUs that fit no NodePool: reported, never dropped silently."""

    kind: str  # "pending_pod" or "cronjob"
    namespace: str
    name: str
    gpus: float
    reason: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name} ({self.gpus:g} GPUs): {self.reason}"


def pool_name(nodepool: NodePool) -> str:
    return str((nodepool.get("metadata") or {}).get("name", ""))


def pool_weight(nodepool: NodePool) -> int:
    return int((nodepool.get("spec") or {}).get("weight") or 0)


def karpenter_order(nodepools: Sequence[NodePool]) -> list[NodePool]:
    """``OrderByWeight``: weight descending, then name descending (Go's ``a.Name > b.Name``)."""
    by_name = sorted(nodepools, key=pool_name, reverse=True)
    return sorted(by_name, key=pool_weight, reverse=True)  # stable: names stay descending within a weight


def not_provisioning(nodepool: NodePool) -> str | None:
    """Why Karpenter launches no node from this pool (the provisioner's filter), or None."""
    if (nodepool.get("spec") or {}).get("replicas") is not None:
        return "static (spec.replicas is set)"
    if (nodepool.get("metadata") or {}).get("deletionTimestamp"):
        return "being deleted"
    conditions = (nodepool.get("status") or {}).get("conditions") or []
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        return "not Ready"
    return None


def pool_requirements(nodepool: NodePool) -> dict[str, reqs.Requirement]:
    """``NewNodeClaimTemplate``: template requirements, template labels, the pool and node class labels."""
    template = (nodepool.get("spec") or {}).get("template") or {}
    spec = template.get("spec") or {}
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    labels[KARPENTER_NODEPOOL_LABEL] = pool_name(nodepool)
    node_class = spec.get("nodeClassRef") or {}
    if node_class.get("group") and node_class.get("kind"):
        labels[f"{node_class['group']}/{str(node_class['kind']).lower()}"] = str(node_class.get("name", ""))
    return reqs.combine(reqs.from_expressions(spec.get("requirements") or []) + reqs.from_labels(labels))


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """``Toleration.ToleratesTaint`` (k8s.io/api core/v1), comparison operators included."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    wanted, actual = str(toleration.get("value") or ""), str(taint.get("value") or "")
    if operator == "Equal":
        return wanted == actual
    if operator == "Exists":
        return True
    if operator in ("Lt", "Gt"):
        if not (_DECIMAL_INTEGER.match(wanted) and _DECIMAL_INTEGER.match(actual)):
            return False
        bound, value = int(wanted), int(actual)
        return value < bound if operator == "Lt" else value > bound
    return False


def _taint_text(taint: Mapping[str, Any]) -> str:
    return f"{taint.get('key')}={taint.get('value') or ''}:{taint.get('effect')}"


def untolerated_taint(nodepool: NodePool, tolerations: Sequence[Mapping[str, Any]]) -> str | None:
    """The first taint of the pool's nodes that the tolerations do not tolerate (startupTaints never
    count: Karpenter expects them removed), or None."""
    spec = ((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}
    for taint in spec.get("taints") or []:
        if not any(tolerates(toleration, taint) for toleration in tolerations):
            return f"taint {_taint_text(taint)} is not tolerated"
    return None


def _quantity(value: Any) -> float:
    try:
        return parse_quantity(value)
    except ValueError:
        return 0.0


def limit_refusal(nodepool: NodePool, gpus: float, *, count_in_use: bool) -> str | None:
    """Why the pool's ``limits`` leave no room for a pod of ``gpus`` GPUs, or None.

    ``count_in_use``: subtract what the pool's nodes hold now (a pod waiting now); False for the
    template of pods that run later, when only the whole limit is certain.
    """
    limits = (nodepool.get("spec") or {}).get("limits") or {}
    status = nodepool.get("status") or {}
    if WHOLE_GPU in limits:
        limit = _quantity(limits[WHOLE_GPU])
        used = _quantity((status.get("resources") or {}).get(WHOLE_GPU, 0)) if count_in_use else 0.0
        if gpus > limit - used:
            held = f", {used:g} in use" if count_in_use else ""
            return f"limit {limit:g} {WHOLE_GPU}{held}: no room for {gpus:g}"
    if "nodes" in limits:
        nodes = _quantity(limits["nodes"])
        in_use = _quantity(status.get("nodes", 0)) if count_in_use else 0.0
        if nodes - in_use <= 0:
            return f"node limit {nodes:g} reached"
    return None


@dataclass(frozen=True)
class _Attempt:
    """One round of Karpenter's scheduling of a pod: what it requires and tolerates this time."""

    requirements: dict[str, reqs.Requirement]
    tolerations: tuple[Mapping[str, Any], ...]


PREFER_NO_SCHEDULE_TOLERATION = {"operator": "Exists", "effect": "PreferNoSchedule"}


def _attempts(pod_spec: Mapping[str, Any], nodepools: Sequence[NodePool]) -> Iterator[_Attempt]:
    """The pod as Karpenter tries it: first as written, then relaxed one step at a time."""
    selector = reqs.from_labels(pod_spec.get("nodeSelector") or {})
    affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    terms = [reqs.from_expressions(term.get("matchExpressions") or []) for term in required] or [[]]
    preferred = sorted(
        affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or [],
        key=lambda p: -int(p.get("weight") or 0),  # sort.Slice by weight, heaviest first
    )
    preferences = [reqs.from_expressions((p.get("preference") or {}).get("matchExpressions") or []) for p in preferred]
    tolerations = tuple(pod_spec.get("tolerations") or ())
    while True:
        chosen = selector + terms[0] + (preferences[0] if preferences else [])
        yield _Attempt(reqs.combine(chosen), tolerations)
        if len(terms) > 1:  # terms are ORed, but the last one is never removed
            terms = terms[1:]
        elif preferences:
            preferences = preferences[1:]
        elif _has_prefer_no_schedule(nodepools) and PREFER_NO_SCHEDULE_TOLERATION not in tolerations:
            tolerations = (*tolerations, PREFER_NO_SCHEDULE_TOLERATION)
        else:
            return


def _has_prefer_no_schedule(nodepools: Sequence[NodePool]) -> bool:
    return any(
        taint.get("effect") == "PreferNoSchedule"
        for pool in nodepools
        for taint in (((pool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("taints") or []
    )


def misfit(
    nodepool: NodePool, offered: reqs.Requirements, attempt: _Attempt, gpus: float, *, count_in_use: bool
) -> str | None:
    """Why the pool (whose nodes meet ``offered``) cannot take the pod in this attempt, or None."""
    return (
        untolerated_taint(nodepool, attempt.tolerations)
        or reqs.incompatibility(offered, attempt.requirements)
        or limit_refusal(nodepool, gpus, count_in_use=count_in_use)
    )


def _usable(nodepools: Sequence[NodePool]) -> tuple[list[tuple[NodePool, reqs.Requirements]], dict[str, str]]:
    """The pools Karpenter provisions from, in its order, with their requirements; and why not the rest."""
    usable: list[tuple[NodePool, reqs.Requirements]] = []
    idle: dict[str, str] = {}
    for pool in karpenter_order(nodepools):
        reason = not_provisioning(pool)
        if reason is None:
            try:
                usable.append((pool, pool_requirements(pool)))
                continue
            except ValueError as exc:  # the CRD's own validation refuses these; a stale object may not
                reason = f"unreadable requirements: {exc}"
        idle[pool_name(pool)] = reason
    return usable, idle


def _describe(pool: NodePool) -> str:
    return f"{pool_name(pool)} (weight {pool_weight(pool)})"


def selected_pool(pod_spec: Mapping[str, Any]) -> PoolChoice:
    """The pool a pod names with a ``karpenter.sh/nodepool`` selector, for when NodePools are unknown."""
    pool = (pod_spec.get("nodeSelector") or {}).get(KARPENTER_NODEPOOL_LABEL)
    if pool:
        return PoolChoice(str(pool), (str(pool),), f"NodePool {pool} (its nodeSelector; NodePools not known)")
    return PoolChoice(None, (), "NodePools not known and no karpenter.sh/nodepool selector")


def choose_pool(
    pod_spec: Mapping[str, Any], nodepools: Sequence[NodePool], gpus: float, *, count_in_use: bool
) -> PoolChoice:
    """The pool Karpenter would launch a node of for this pod; ``gpus``: the pod's ``nvidia.com/gpu``.

    Raises ValueError for a pod whose node requirements do not parse (an unknown operator).
    """
    usable, idle = _usable(nodepools)
    misfits: dict[str, str] = {}
    for attempt in _attempts(pod_spec, [pool for pool, _ in usable]):
        misfits = {}
        fits: list[NodePool] = []
        for pool, offered in usable:
            why = misfit(pool, offered, attempt, gpus, count_in_use=count_in_use)
            if why is None:
                fits.append(pool)
            else:
                misfits[pool_name(pool)] = why
        if len(fits) == 1:
            return PoolChoice(pool_name(fits[0]), (pool_name(fits[0]),), f"NodePool {pool_name(fits[0])}")
        if fits:
            listed = ", ".join(_describe(pool) for pool in fits)
            first = pool_name(fits[0])
            reason = f"NodePools {listed} fit; Karpenter tries {first} first"
            return PoolChoice(first, tuple(pool_name(pool) for pool in fits), reason)
    if not nodepools:
        return PoolChoice(None, (), "no NodePool exists")
    why = "; ".join(f"{name}: {reason}" for name, reason in sorted({**idle, **misfits}.items()))
    return PoolChoice(None, (), f"fits no NodePool ({why})")
