"""One Karpenter NodeClaim (``karpenter.sh/v1``) read as a launch: where it stands and, once it is
over, whether it failed and why. Pure functions over the raw JSON the watch keeps.

The rules (docs/launch-outcomes.md says where in Karpenter each one comes from):

- Ready: the ``Ready`` condition (``Initialized`` when Ready is missing) is ``True``.
- Failed, at once: ``Launched``, ``Registered`` or ``Initialized`` is ``False``; the reason is that
  condition's reason.
- Failed when the NodeClaim goes away (deleted, or ``deletionTimestamp`` set) before it was Ready:
  - ``Launched`` not True: the reason ``Launched`` carries (``LaunchFailed`` or a cloud provider's
    own), else ``InsufficientCapacity`` when it went within ``LAUNCH_TIMEOUT`` of its creation
    (Karpenter deletes a NodeClaim at once when the cloud has no capacity; a NodeClassNotReady error
    does the same and cannot be told apart from the NodeClaim), else ``LaunchTimeout``;
  - launched but not registered: ``RegistrationTimeout``; registered but not initialized:
    ``NotInitialized``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from adapters.kubernetes.client import parse_kube_time
from adapters.kubernetes.gpu_requests import parse_quantity
from adapters.types import KARPENTER_NODEPOOL_LABEL

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
UNKNOWN = ""  # no pool label, or no instance type yet
# Karpenter's liveness controller deletes a NodeClaim not launched this long after its Launched
# condition last moved (pkg/controllers/nodeclaim/lifecycle/liveness.go: LaunchTimeout).
LAUNCH_TIMEOUT = timedelta(minutes=5)
# Reasons a condition has before any controller judged it: not a failure reason.
INITIAL_REASONS = frozenset({"", "AwaitingReconciliation", "Unknown"})
STAGES = ("Launched", "Registered", "Initialized")


class MalformedNodeClaim(ValueError):
    """A NodeClaim this module cannot read; the message names it and says what is wrong."""


@dataclass(frozen=True)
class Condition:
    status: str  # "True", "False" or "Unknown"
    reason: str
    since: datetime | None


@dataclass(frozen=True)
class ClaimState:
    uid: str
    name: str
    pool: str
    instance_type: str
    created: datetime
    conditions: Mapping[str, Condition]
    deleting: bool
    capacity: Mapping[str, float] = field(default_factory=dict)  # status.capacity, parsed

    def is_true(self, condition: str) -> bool:
        found = self.conditions.get(condition)
        return found is not None and found.status == "True"

    @property
    def ready_at(self) -> datetime | None:
        """When it became Ready (Initialized where no Ready condition is kept); None: not yet."""
        name = "Ready" if "Ready" in self.conditions else "Initialized"
        found = self.conditions.get(name)
        if found is None or found.status != "True" or found.since is None or found.since < self.created:
            return None
        return found.since


def _conditions(name: str, raw: Any) -> dict[str, Condition]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise MalformedNodeClaim(f"NodeClaim {name}: status.conditions is not a list")
    found: dict[str, Condition] = {}
    for item in raw:
        if not isinstance(item, Mapping) or not item.get("type"):
            raise MalformedNodeClaim(f"NodeClaim {name}: a condition without a type: {item!r}")
        since_text = item.get("lastTransitionTime")
        since = parse_kube_time(since_text)
        if since_text and since is None:
            raise MalformedNodeClaim(
                f"NodeClaim {name}: condition {item['type']} has an unreadable lastTransitionTime {since_text!r}"
            )
        found[str(item["type"])] = Condition(str(item.get("status", "Unknown")), str(item.get("reason") or ""), since)
    return found


def _capacity(name: str, raw: Any) -> dict[str, float]:
    if not isinstance(raw, Mapping):
        return {}
    try:
        return {str(key): parse_quantity(value) for key, value in raw.items()}
    except ValueError as error:
        raise MalformedNodeClaim(f"NodeClaim {name}: status.capacity: {error}") from None


def read_claim(nodeclaim: Mapping[str, Any]) -> ClaimState:
    """The NodeClaim as a launch; ``MalformedNodeClaim`` when it has no name, uid or creation time,
    or a condition or capacity that does not parse."""
    metadata = nodeclaim.get("metadata")
    if not isinstance(metadata, Mapping) or not metadata.get("name"):
        raise MalformedNodeClaim(f"a NodeClaim without metadata.name: {str(nodeclaim)[:200]}")
    name = str(metadata["name"])
    created = parse_kube_time(metadata.get("creationTimestamp"))
    if created is None:
        raise MalformedNodeClaim(f"NodeClaim {name}: creationTimestamp {metadata.get('creationTimestamp')!r}")
    labels = metadata.get("labels") or {}
    status = nodeclaim.get("status") or {}
    if not isinstance(labels, Mapping) or not isinstance(status, Mapping):
        raise MalformedNodeClaim(f"NodeClaim {name}: labels or status is not an object")
    return ClaimState(
        uid=str(metadata.get("uid") or name),
        name=name,
        pool=str(labels.get(KARPENTER_NODEPOOL_LABEL, UNKNOWN)),
        instance_type=str(labels.get(INSTANCE_TYPE_LABEL, UNKNOWN)),
        created=created,
        conditions=_conditions(name, status.get("conditions")),
        deleting=bool(metadata.get("deletionTimestamp")),
        capacity=_capacity(name, status.get("capacity")),
    )


def failed_condition(claim: ClaimState) -> str | None:
    """The reason of a launch stage that is ``False`` (a failure without waiting for deletion)."""
    for stage in STAGES:
        found = claim.conditions.get(stage)
        if found is not None and found.status == "False":
            return found.reason or f"{stage}False"
    return None


def gone_reason(claim: ClaimState, gone_at: datetime) -> str | None:
    """Why a NodeClaim that went away at ``gone_at`` failed; None when it had become Ready."""
    if claim.ready_at is not None:
        return None
    failed = failed_condition(claim)
    if failed is not None:
        return failed
    if not claim.is_true("Launched"):
        launched = claim.conditions.get("Launched")
        if launched is not None and launched.reason not in INITIAL_REASONS:
            return launched.reason
        return "InsufficientCapacity" if gone_at - claim.created < LAUNCH_TIMEOUT else "LaunchTimeout"
    if not claim.is_true("Registered"):
        return "RegistrationTimeout"
    return "NotInitialized"
