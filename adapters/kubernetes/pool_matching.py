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

from adapters.gpu_units import WHOLE_GPU
from adapters.kubernetes import node_requirements as reqs
from adapters.kubernetes.gpu_requests import parse_quantity
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

    kind: str  # "pending_pod", "cronjob" or "workload" (a queued Kueue Workload)
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


# Where ``with_observations`` puts what the service learned of a pool from its NodeClaims; never a
# Kubernetes field, never written back.
OBSERVED = "x-gpu-autoscaler-observed"


def with_observations(
    nodepool: NodePool, node_sizes: Sequence[Mapping[str, float]], failing: str | None = None
) -> dict[str, Any]:
    """A copy of the NodePool with the node sizes its NodeClaims reported (``status.capacity``, or the
    configured ones) and why its launches keep failing (None: they do not)."""
    return {**nodepool, OBSERVED: {"nodeSizes": [dict(size) for size in node_sizes], "launchesFailing": failing}}


def launches_failing(nodepool: NodePool) -> str | None:
    return (nodepool.get(OBSERVED) or {}).get("launchesFailing")


def node_sizes(nodepool: NodePool) -> list[Mapping[str, float]]:
    return list((nodepool.get(OBSERVED) or {}).get("nodeSizes") or [])


def _in_use(status: Mapping[str, Any]) -> dict[str, float]:
    used = {str(name): _quantity(value) for name, value in (status.get("resources") or {}).items()}
    if "nodes" in status:
        used["nodes"] = _quantity(status.get("nodes"))
    return used


def limit_refusal(nodepool: NodePool, gpus: float, *, count_in_use: bool) -> str | None:
    """Why the pool's ``limits`` leave no room for a node that holds a pod of ``gpus`` GPUs, or None.

    As Karpenter's scheduler (docs/launch-outcomes.md): every resource in ``limits`` counts; the
    remaining room is the limit less what the pool's nodes hold (``count_in_use``: a pod waiting now;
    False for the template of pods that run later, when only the whole limit is certain); a node
    size fits when its capacity of every limited resource is within the room. Node sizes are those
    the pool's NodeClaims reported that hold the pod; with none known, a node of the pod's own GPUs
    (whose other resources are unknown, so only ``nvidia.com/gpu`` and ``nodes`` are checked).
    """
    limits = {str(name): _quantity(value) for name, value in ((nodepool.get("spec") or {}).get("limits") or {}).items()}
    if not limits:
        return None
    used = _in_use(nodepool.get("status") or {}) if count_in_use else {}
    over = [name for name, limit in sorted(limits.items()) if used.get(name, 0.0) > limit]
    if over:  # Limits.ExceededBy: the provisioner launches nothing more in this pool
        return "limits exceeded: " + ", ".join(f"{name} {used[name]:g} of {limits[name]:g}" for name in over)
    room = {name: limit - used.get(name, 0.0) for name, limit in limits.items()}
    if "nodes" in room and room["nodes"] <= 0:
        return f"node limit {limits['nodes']:g} reached"
    known = [size for size in node_sizes(nodepool) if size.get(WHOLE_GPU, 0.0) >= gpus]
    sizes = known or [{WHOLE_GPU: gpus}]
    checked = [name for name in room if name != "nodes" and (known or name == WHOLE_GPU)]
    if any(all(size.get(name, 0.0) <= room[name] for name in checked) for size in sizes):
        return None
    if not known:
        held = f", {used.get(WHOLE_GPU, 0.0):g} in use" if count_in_use else ""
        return f"limit {limits[WHOLE_GPU]:g} {WHOLE_GPU}{held}: no room for {gpus:g}"
    left = ", ".join(f"{name} {room[name]:g} of {limits[name]:g} left" for name in checked)
    described = "; ".join(", ".join(f"{k} {v:g}" for k, v in sorted(size.items()) if k in checked) for size in known)
    return f"no node size of the pool fits its limits ({left}; nodes seen: {described})"


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


def _first_launching(fits: Sequence[NodePool]) -> PoolChoice:
    """The first of the fitting pools (Karpenter's order) whose launches do not keep failing: when the
    cloud has no capacity for a pool's instance types, Karpenter's scheduler finds none of them
    available and launches in the next pool by weight (docs/launch-outcomes.md). When all keep
    failing, the first: Karpenter keeps trying it."""
    names = tuple(pool_name(pool) for pool in fits)
    failing = [(pool, why) for pool in fits if (why := launches_failing(pool)) is not None]
    skipped = [pool for pool, _ in failing]
    launching = [pool for pool in fits if pool not in skipped] or list(fits)
    chosen = launching[0]
    if len(fits) == 1:
        reason = f"NodePool {names[0]}"
    else:
        listed = ", ".join(_describe(pool) for pool in fits)
        reason = f"NodePools {listed} fit; Karpenter tries {names[0]} first"
    passed = [(pool, why) for pool, why in failing if fits.index(pool) < fits.index(chosen)]
    if passed:
        said = "; ".join(f"{pool_name(pool)}: {why}" for pool, why in passed)
        reason = f"{reason}, but its launches keep failing ({said}): Karpenter falls back to {_describe(chosen)}"
    elif failing:
        reason += f" (its launches keep failing: {failing[0][1]})"
    return PoolChoice(pool_name(chosen), names, reason)


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
        if fits:
            return _first_launching(fits)
    if not nodepools:
        return PoolChoice(None, (), "no NodePool exists")
    why = "; ".join(f"{name}: {reason}" for name, reason in sorted({**idle, **misfits}.items()))
    return PoolChoice(None, (), f"fits no NodePool ({why})")
