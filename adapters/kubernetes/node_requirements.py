"""Node label requirements as Karpenter reasons about them (kubernetes-sigs/karpenter ``pkg/scheduling``).

A requirement is a set of allowed values for one label key: a finite set (``In``; empty: the label
must not exist), or the complement of one (``NotIn``, ``Exists``), optionally bounded to integers
(``Gt N`` is kept as ``>= N+1``, ``Lt N`` as ``<= N-1``, ``Gte``/``Lte`` as they are). Requirements on
the same key are intersected. A pod is compatible with a NodePool when (``Requirements.Compatible``
with ``AllowUndefinedWellKnownLabels``):

- every key the pod requires is one the pool defines, or a well-known label (the cloud provider's
  instance types decide those), or the pod only excludes values (``NotIn``, ``DoesNotExist``);
- and for every key both define, the two sets intersect (or both only exclude values).

Pure functions over plain values; ``pool_matching`` applies them to pods and NodePools.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from adapters.types import KARPENTER_NODEPOOL_LABEL

# Go's int on the 64-bit platforms Karpenter runs on.
_MAX_INT = 2**63 - 1
_MIN_INT = -(2**63)
_GO_ATOI = re.compile(r"^[+-]?[0-9]+$")

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte")
_ONLY_EXCLUDE = ("NotIn", "DoesNotExist")

# v1.WellKnownLabels: a pool that does not constrain one of these allows any value (its instance
# types decide). Cloud providers add their own at start-up; the AWS, Azure and GCP providers' label
# domains are taken as well-known whole, since every label they define there is.
WELL_KNOWN_LABELS = frozenset(
    {
        KARPENTER_NODEPOOL_LABEL,
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "karpenter.sh/capacity-type",
        "node.kubernetes.io/windows-build",
    }
)
WELL_KNOWN_LABEL_DOMAINS = ("karpenter.k8s.aws/", "karpenter.azure.com/", "karpenter.k8s.gcp/")

# v1.NormalizedLabels: deprecated aliases a pod may still use.
NORMALIZED_LABELS = {
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
    "beta.kubernetes.io/arch": "kubernetes.io/arch",
    "beta.kubernetes.io/os": "kubernetes.io/os",
    "beta.kubernetes.io/instance-type": "node.kubernetes.io/instance-type",
}


def is_well_known(key: str) -> bool:
    return key in WELL_KNOWN_LABELS or key.startswith(WELL_KNOWN_LABEL_DOMAINS)


def _go_int(text: str) -> int | None:
    """``strconv.Atoi``: an optionally signed decimal that fits an int64, else None."""
    if not _GO_ATOI.match(text):
        return None
    value = int(text)
    return value if _MIN_INT <= value <= _MAX_INT else None


def _within_bounds(value: str, gte: int | None, lte: int | None) -> bool:
    if gte is None and lte is None:
        return True
    number = _go_int(value)  # bounded requirements only ever hold integers
    if number is None:
        return False
    return (gte is None or number >= gte) and (lte is None or number <= lte)


def _tighter(a: int | None, b: int | None, pick: Any) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return int(pick(a, b))


@dataclass(frozen=True)
class Requirement:
    """The values one label key may take: ``values``, or everything but ``values`` (``complement``)."""

    key: str
    complement: bool
    values: frozenset[str] = frozenset()
    gte: int | None = None  # inclusive bounds; set only on complements (Gt/Lt/Gte/Lte)
    lte: int | None = None

    @property
    def operator(self) -> str:
        """The operator this set reads as (bounds aside), as Karpenter's ``Operator()``."""
        if self.complement:
            return "NotIn" if self.values else "Exists"
        return "In" if self.values else "DoesNotExist"

    def allows(self, value: str) -> bool:
        """Karpenter's ``Has``: may a node carry ``value`` for this key?"""
        inside = value in self.values
        return (not inside if self.complement else inside) and _within_bounds(value, self.gte, self.lte)

    def intersection(self, other: Requirement) -> Requirement:
        complement = self.complement and other.complement
        gte = _tighter(self.gte, other.gte, max)
        lte = _tighter(self.lte, other.lte, min)
        if gte is not None and lte is not None and gte > lte:
            return Requirement(self.key, complement=False)
        if self.complement and other.complement:
            values = self.values | other.values
        elif self.complement:
            values = other.values - self.values
        elif other.complement:
            values = self.values - other.values
        else:
            values = self.values & other.values
        values = frozenset(v for v in values if _within_bounds(v, gte, lte))
        if not complement:  # a finite set keeps only the values within the bounds
            gte = lte = None
        return Requirement(self.key, complement, values, gte, lte)

    def intersects(self, other: Requirement) -> bool:
        """Karpenter's ``HasIntersection``: is there a value both allow?"""
        gte = _tighter(self.gte, other.gte, max)
        lte = _tighter(self.lte, other.lte, min)
        if gte is not None and lte is not None and gte > lte:
            return False
        if self.complement and other.complement:
            return True
        if self.complement or other.complement:
            finite, excluded = (other, self) if self.complement else (self, other)
            return any(v not in excluded.values and _within_bounds(v, gte, lte) for v in finite.values)
        return any(v in other.values and _within_bounds(v, gte, lte) for v in self.values)

    def __str__(self) -> str:
        text = f"{self.key} {self.operator}"
        if self.values:
            text += " [" + ", ".join(sorted(self.values)) + "]"
        if self.gte is not None:
            text += f" >={self.gte}"
        if self.lte is not None:
            text += f" <={self.lte}"
        return text


def requirement(key: str, operator: str, values: Sequence[str] = ()) -> Requirement:
    """``NewRequirement``: one node selector expression as a set. Raises ValueError for an operator
    Karpenter does not know or a bound that is not an integer (the API refuses both)."""
    key = NORMALIZED_LABELS.get(key, key)
    if operator in ("In", "NotIn"):
        return Requirement(key, complement=operator == "NotIn", values=frozenset(values))
    if operator in ("Exists", "DoesNotExist"):
        return Requirement(key, complement=operator == "Exists")
    if operator not in OPERATORS:
        raise ValueError(f"unknown operator {operator!r} for {key}")
    bound = _go_int(values[0]) if len(values) == 1 else None
    if bound is None:
        raise ValueError(f"{key} {operator} needs one integer value, not {list(values)}")
    if operator == "Gt":
        # Gt MaxInt matches nothing; otherwise Gt N is Gte N+1.
        return Requirement(key, complement=False) if bound == _MAX_INT else Requirement(key, True, gte=bound + 1)
    if operator == "Lt":
        return Requirement(key, True, lte=bound - 1)
    return Requirement(key, True, gte=bound) if operator == "Gte" else Requirement(key, True, lte=bound)


Requirements = Mapping[str, Requirement]


def combine(requirements: Iterable[Requirement]) -> dict[str, Requirement]:
    """``Requirements.Add``: one set per key, the intersection of everything said about it."""
    combined: dict[str, Requirement] = {}
    for item in requirements:
        existing = combined.get(item.key)
        combined[item.key] = item if existing is None else item.intersection(existing)
    return combined


def from_expressions(expressions: Iterable[Mapping[str, Any]]) -> list[Requirement]:
    """Node selector expressions (``key``, ``operator``, ``values``) as requirements."""
    return [
        requirement(str(e.get("key", "")), str(e.get("operator", "")), [str(v) for v in e.get("values") or []])
        for e in expressions
    ]


def from_labels(labels: Mapping[str, Any]) -> list[Requirement]:
    return [requirement(str(key), "In", [str(value)]) for key, value in labels.items()]


def incompatibility(pool: Requirements, pod: Requirements) -> str | None:
    """Why a pod's requirements cannot be met by a pool's (``Compatible``), or None when they can."""
    for key, wanted in sorted(pod.items()):
        if is_well_known(key) or key in pool or wanted.operator in _ONLY_EXCLUDE:
            continue
        return f'label "{key}" has no value on its nodes (the pod needs {wanted})'
    for key in sorted(pool.keys() & pod.keys()):
        offered, wanted = pool[key], pod[key]
        if offered.intersects(wanted):
            continue
        if wanted.operator in _ONLY_EXCLUDE and offered.operator in _ONLY_EXCLUDE:
            continue
        return f"the pod needs {wanted}, its nodes have {offered}"
    return None
