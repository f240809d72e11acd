"""The CEL rules of Kueue's CRDs (``tests/data/schemas/kueue.x-k8s.io_*.yaml``, v0.19.2), as Python,
for ``tests/kube_schemas.py``: rule text exactly as in the CRDs -> the same check. A field the rule
reads that the CRD defaults (``count``, ``reclaimWithinCohort``, ``whenCanBorrow``...) is read with
its default, as kube-apiserver applies defaults before it evaluates the rules."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

ADMISSION_MATCHES_POD_SETS = (
    "has(self.status) && has(self.status.conditions) && self.status.conditions.exists(c, c.type == 'QuotaReserved' "
    "&& c.status == 'True') && has(self.status.admission) ? size(self.spec.podSets) == "
    "size(self.status.admission.podSetAssignments) : true"
)


def _quota_reserved_has_every_pod_set(workload: Mapping[str, Any]) -> bool:
    status = workload.get("status") or {}
    reserved = any(
        c.get("type") == "QuotaReserved" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    if not (reserved and "admission" in status):
        return True
    return len(workload["spec"]["podSets"]) == len(status["admission"].get("podSetAssignments") or [])


def _no_borrowing_without_cohort(spec: Mapping[str, Any]) -> bool:
    if "cohortName" in spec or "resourceGroups" not in spec:
        return True
    return all("borrowingLimit" not in r for g in spec["resourceGroups"] for f in g["flavors"] for r in f["resources"])


def _reclaim_and_borrow(preemption: Mapping[str, Any]) -> bool:
    borrow = preemption.get("borrowWithinCohort")
    never = preemption.get("reclaimWithinCohort", "Never") == "Never"
    return not (never and borrow is not None and borrow.get("policy", "Never") != "Never")


KUEUE_CEL_RULES: dict[str, Callable[[Any], bool]] = {
    ADMISSION_MATCHES_POD_SETS: _quota_reserved_has_every_pod_set,
    (
        "!has(self.cohortName) && has(self.resourceGroups) ? self.resourceGroups.all(rg, rg.flavors.all(f, "
        "f.resources.all(r, !has(r.borrowingLimit)))) : true"
    ): _no_borrowing_without_cohort,
    (
        "!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) &&  "
        "self.borrowWithinCohort.policy != 'Never')"
    ): _reclaim_and_borrow,
    "!has(self.preference) || (self.whenCanBorrow == 'TryNextFlavor' && self.whenCanPreempt == 'TryNextFlavor')": (
        lambda f: (
            "preference" not in f
            or (f.get("whenCanBorrow", "MayStopSearch") == "TryNextFlavor" == f.get("whenCanPreempt", "TryNextFlavor"))
        )
    ),
    "self.flavors.all(x, size(x.resources) == size(self.coveredResources))": lambda group: all(
        len(f["resources"]) == len(group["coveredResources"]) for f in group["flavors"]
    ),
    (
        "!has(self.clusterName) || (!has(self.nominatedClusterNames) || (has(self.nominatedClusterNames) && "
        "size(self.nominatedClusterNames) == 0))"
    ): lambda status: "clusterName" not in status or not status.get("nominatedClusterNames"),
    "!has(self.priorityClassRef) || has(self.priority)": lambda spec: (
        "priorityClassRef" not in spec or "priority" in spec
    ),
    "(self.group == 'kueue.x-k8s.io') ? self.kind == 'WorkloadPriorityClass' : true": lambda ref: (
        ref.get("group") != "kueue.x-k8s.io" or ref.get("kind") == "WorkloadPriorityClass"
    ),
    "(self.group == 'scheduling.k8s.io') ? self.kind == 'PriorityClass' : true": lambda ref: (
        ref.get("group") != "scheduling.k8s.io" or ref.get("kind") == "PriorityClass"
    ),
    "has(self.minCount) ? self.minCount <= self.count : true": lambda pod_set: (
        "minCount" not in pod_set or pod_set["minCount"] <= pod_set.get("count", 1)
    ),
    "!has(self.topologyName) || self.nodeLabels.size() >= 1": lambda spec: (
        "topologyName" not in spec or len(spec.get("nodeLabels") or {}) >= 1
    ),
    # Topology-aware scheduling's assignments.
    "[has(self.universal),has(self.individual)].filter(x,x==true).size() == 1": lambda x: (
        ("universal" in x) + ("individual" in x) == 1
    ),
    "has(self.universal) != has(self.individual)": lambda x: ("universal" in x) != ("individual" in x),
    "!has(self.podCounts.individual) || size(self.podCounts.individual) == self.domainCount": lambda x: (
        "individual" not in x["podCounts"] or len(x["podCounts"]["individual"]) == x["domainCount"]
    ),
    "self.slices.all(x, size(x.valuesPerLevel) == size(self.levels))": lambda x: all(
        len(s["valuesPerLevel"]) == len(x["levels"]) for s in x["slices"]
    ),
    "self.valuesPerLevel.all(x, !has(x.individual) || size(x.individual.roots) == self.domainCount)": lambda x: all(
        "individual" not in v or len(v["individual"]["roots"]) == x["domainCount"] for v in x["valuesPerLevel"]
    ),
    # Tolerations (a pod set's, a flavor's) and a flavor's node taints.
    "self.all(x, !has(x.key) ? x.operator == 'Exists' : true)": lambda items: all(
        "key" in x or x.get("operator") == "Exists" for x in items
    ),
    "self.all(x, has(x.tolerationSeconds) ? x.effect == 'NoExecute' : true)": lambda items: all(
        "tolerationSeconds" not in x or x.get("effect") == "NoExecute" for x in items
    ),
    "self.all(x, !has(x.operator) || x.operator in ['Equal', 'Exists'])": lambda items: all(
        x.get("operator", "Equal") in ("Equal", "Exists") for x in items
    ),
    "self.all(x, has(x.operator) && x.operator == 'Exists' ? !has(x.value) : true)": lambda items: all(
        x.get("operator") != "Exists" or "value" not in x for x in items
    ),
    "self.all(x, !has(x.effect) || x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])": lambda items: all(
        x.get("effect", "NoSchedule") in ("NoSchedule", "PreferNoSchedule", "NoExecute") for x in items
    ),
    "self.all(x, x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])": lambda items: all(
        x.get("effect") in ("NoSchedule", "PreferNoSchedule", "NoExecute") for x in items
    ),
}
