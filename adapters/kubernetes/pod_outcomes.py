"""What happened to a pod, as its JSON tells: waiting for capacity, when it was scheduled, when it ran,
and the CronJob run it belongs to. Pure functions over raw objects; a field the API would not have
written raises ``ValueError`` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

# Set by the CronJob controller on each Job it creates (Kubernetes 1.28+): the run's cron time.
SCHEDULED_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"


def _part(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``obj[key]`` if it is an object, else empty: a malformed pod answers "no" rather than raising."""
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def _condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    conditions = _part(pod, "status").get("conditions")
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return None


def timestamp_s(value: Any, field: str) -> float:
    """An RFC 3339 time as the API writes it, in seconds since the epoch."""
    if not isinstance(value, str):
        raise ValueError(f"{field}: {value!r} is not a timestamp")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{field}: {value!r} is not a timestamp") from None
    if moment.tzinfo is None:
        raise ValueError(f"{field}: {value!r} has no time zone")
    return moment.timestamp()


def waits_for_capacity(pod: Mapping[str, Any]) -> bool:
    """Pending, bound to no node, and the scheduler found no node for it (``Unschedulable``)."""
    if _part(pod, "status").get("phase") != "Pending" or _part(pod, "spec").get("nodeName"):
        return False
    condition = _condition(pod, "PodScheduled")
    return condition is not None and condition.get("status") == "False" and condition.get("reason") == "Unschedulable"


def uid(pod: Mapping[str, Any]) -> str:
    metadata = _part(pod, "metadata")
    return str(metadata.get("uid") or f"{metadata.get('namespace')}/{metadata.get('name')}")


def scheduled_at(pod: Mapping[str, Any]) -> float | None:
    """When the pod was scheduled (``PodScheduled`` turned True); None while it is not."""
    condition = _condition(pod, "PodScheduled")
    if condition is None or condition.get("status") != "True":
        return None
    return timestamp_s(condition.get("lastTransitionTime"), "status.conditions[PodScheduled].lastTransitionTime")


def capacity_wait_s(pod: Mapping[str, Any]) -> float | None:
    """Seconds from creation until scheduled; None while it is not scheduled."""
    scheduled = scheduled_at(pod)
    if scheduled is None:
        return None
    created = timestamp_s(_part(pod, "metadata").get("creationTimestamp"), "metadata.creationTimestamp")
    return max(0.0, scheduled - created)


def running_at(pod: Mapping[str, Any]) -> float | None:
    """When the pod started running (its first container started); None while it is not Running."""
    status = _part(pod, "status")
    if status.get("phase") not in ("Running", "Succeeded"):
        return None
    containers = status.get("containerStatuses")
    started = [
        timestamp_s(running["startedAt"], "status.containerStatuses[].state.running.startedAt")
        for container in (containers if isinstance(containers, list) else ())
        if isinstance(container, Mapping)
        and isinstance(running := _part(container, "state").get("running"), Mapping)
        and running.get("startedAt")
    ]
    if started:
        return min(started)
    return timestamp_s(status.get("startTime"), "status.startTime")


def owning_job(pod: Mapping[str, Any]) -> str | None:
    """``namespace/name`` of the Job that owns the pod, if one does."""
    metadata = _part(pod, "metadata")
    owners = metadata.get("ownerReferences")
    for owner in owners if isinstance(owners, list) else ():
        if isinstance(owner, Mapping) and owner.get("kind") == "Job" and owner.get("name"):
            return f"{metadata.get('namespace')}/{owner['name']}"
    return None


def cronjob_run(job: Mapping[str, Any]) -> tuple[float, int] | None:
    """A Job a CronJob made: its scheduled time and how many pods must run (parallelism); None otherwise."""
    annotations = _part(_part(job, "metadata"), "annotations")
    if SCHEDULED_ANNOTATION not in annotations:
        return None
    scheduled = timestamp_s(annotations[SCHEDULED_ANNOTATION], f"metadata.annotations[{SCHEDULED_ANNOTATION}]")
    spec = _part(job, "spec")
    wanted = []
    for field in ("parallelism", "completions"):
        value = spec.get(field, 1 if field == "parallelism" else None)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ValueError(f"spec.{field}: {value!r} is not a count of pods")
        if value is not None:
            wanted.append(value)
    return scheduled, min(wanted)
