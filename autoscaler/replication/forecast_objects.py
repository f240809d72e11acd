"""What is served, as GPUForecast objects hold it (``manifests/base/crd-gpuforecasts.yaml``), and back.

Series are batched into ``shards`` objects by a stable hash of their signal series (signal name and
labels), so every metric made from one signal series lands in the same object, and a later replica
that owns a shard (docs/high-availability.md) publishes exactly its objects. Each item carries the
served value as the external metrics API serves it, the provenance record's essential fields (the
forecast and the history stay in the pod that made them), the step-down pacing state and, for a
metric served to a target, what its tuner chose (its record stays in the pod). The
NodeClaim lead-time samples of each node pool go to the shard its key (``pool_key``) hashes to.

Reading back, an object or item that cannot be used is skipped with a reason naming it; the rest is
served.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from adapters.kubernetes.nodeclaims import LeadTimeSample
from adapters.types import ScheduledWindow
from autoscaler.policy import unservable
from autoscaler.refresh.fitting import SeriesKey
from autoscaler.serving.provenance import Provenance
from autoscaler.serving.provider import MetricInfo, PublishedRecord, ServedSeries, Snapshot
from autoscaler.targets.target_store import TunerState, choice_entry, choice_of

# The bound on one object (etcd takes 1.5 MiB; a list of many such objects must stay cheap).
MAX_OBJECT_BYTES = 256 * 1024
_SUMMARY_CHARS = 256

# (metric, signal series) -> the value the policy last decided and when: step-down pacing state.
Pacing = dict[tuple[str, SeriesKey], tuple[float, datetime]]
# (metric, signal series) -> what its target's tuner chose (the choice alone, no record).
Choices = Mapping[tuple[str, object], TunerState]


def shard_of(key: SeriesKey, shards: int) -> int:
    """The shard of a signal series: stable across processes and Python versions (not ``hash()``)."""
    digest = hashlib.sha256(json.dumps([key[0], [list(label) for label in key[1]]]).encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


def object_name(shard: int, shards: int) -> str:
    """The count is in the name: after a change of ``shards`` the old objects are never rewritten."""
    return f"shard-{shard}-of-{shards}"


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _provenance_fields(provenance: Provenance) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "model": provenance.model,
        "quantile": provenance.quantile,
        "work": provenance.work,
        "decidedAt": rfc3339(provenance.decided_at),
        "leadTime": {"seconds": provenance.lead_time_seconds, "source": provenance.lead_time.source},
        "windows": [_window_fields(w) for w in provenance.windows],
        "adjustments": [
            {"kind": a.kind, "before": a.before, "after": a.after, "reason": a.reason} for a in provenance.adjustments
        ],
    }
    if provenance.peak_at is not None:
        fields["peakAt"] = rfc3339(provenance.peak_at)
    return fields


def _window_fields(window: ScheduledWindow) -> dict[str, Any]:
    return {
        "source": window.source,
        "namespace": window.namespace,
        "name": window.name,
        "start": rfc3339(window.start),
        "end": rfc3339(window.end),
        "gpus": window.gpus,
    }


# The item fields _provenance_fields writes (the CRD's item schema has them all).
PROVENANCE_FIELDS = ("model", "quantile", "work", "decidedAt", "leadTime", "windows", "adjustments", "peakAt")


def served_item(
    series: ServedSeries, step_down: tuple[float, datetime] | None, choice: TunerState | None = None
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "metric": series.metric,
        "labels": dict(series.labels),
        "value": series.value,
        "timestamp": rfc3339(series.timestamp),
        "explanation": series.explanation,
    }
    if series.namespace is not None:
        item["namespace"] = series.namespace
    if series.window_seconds is not None:
        item["windowSeconds"] = series.window_seconds
    if series.provenance is not None:
        item.update(_provenance_fields(series.provenance))
    elif series.published is not None:  # restored from an object: pass on what it recorded
        item.update(series.published.as_published)
    if step_down is not None:
        item["stepDown"] = {"value": step_down[0], "at": rfc3339(step_down[1])}
    if choice is not None:
        item["target"] = choice_entry(choice)
    return item


def pool_key(nodepool: str) -> SeriesKey:
    """A node pool's lead-time samples are sharded like a series of this key."""
    return ("nodeclaims", (("nodepool", nodepool),))


def sample_item(sample: LeadTimeSample) -> dict[str, Any]:
    return {
        "nodepool": sample.nodepool,
        "name": sample.name,
        "uid": sample.uid,
        "created": rfc3339(sample.created),
        "ready": rfc3339(sample.ready),
        "condition": sample.condition,
    }


def _counted(values: Iterable[str]) -> str:
    text = ", ".join(f"{name} x{count}" if count > 1 else name for name, count in sorted(Counter(values).items()))
    return text if len(text) <= _SUMMARY_CHARS else text[: _SUMMARY_CHARS - 1] + "…"


def shard_status(items: list[dict[str, Any]], samples: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """A shard's status without ``publishedAt``: equal statuses mean nothing to write."""
    items = sorted(items, key=lambda item: (item["metric"], sorted(item["labels"].items())))
    status: dict[str, Any] = {
        "seriesCount": len(items),
        "metrics": _counted(item["metric"] for item in items),
        "labels": _counted(f"{k}={v}" for item in items for k, v in sorted(item["labels"].items())),
        "models": _counted(item["model"] for item in items if "model" in item),
        "items": items,
    }
    if items:
        status["newestTimestamp"] = max(item["timestamp"] for item in items)
    if samples:
        status["leadTimeSamples"] = sorted(samples, key=lambda sample: (sample["nodepool"], sample["ready"]))
    return status


def shard_statuses(
    snapshot: Snapshot,
    signal_of: Mapping[str, str],
    pacing: Pacing,
    shards: int,
    samples: Iterable[LeadTimeSample] = (),
    only: Collection[int] | None = None,
    choices: Choices | None = None,
) -> dict[int, dict[str, Any]]:
    """Every shard's status (an empty shard too: a series that left it must leave its object), or
    those of the shards in ``only``."""
    wanted = range(shards) if only is None else sorted(only)
    items: dict[int, list[dict[str, Any]]] = {shard: [] for shard in wanted}
    sample_items: dict[int, list[dict[str, Any]]] = {shard: [] for shard in wanted}
    for sample in samples:
        sample_shard = shard_of(pool_key(sample.nodepool), shards)
        if sample_shard in sample_items:
            sample_items[sample_shard].append(sample_item(sample))
    for metric, series_list in snapshot.series.items():
        signal = signal_of.get(metric)
        if signal is None:
            continue
        for series in series_list:
            key: SeriesKey = (signal, tuple(sorted(series.labels.items())))
            shard = shard_of(key, shards)
            if shard in items:  # served_item is the costly part: only for the shards asked for
                choice = choices.get((metric, key)) if choices else None
                items[shard].append(served_item(series, pacing.get((metric, key)), choice))
    return {shard: shard_status(shard_items, sample_items[shard]) for shard, shard_items in items.items()}


def object_bytes(status: Mapping[str, Any]) -> int:
    return len(json.dumps(status, separators=(",", ":")).encode())


@dataclass
class Published:
    """What a set of GPUForecast objects says: served values, pacing state, and what was skipped."""

    series: dict[str, list[ServedSeries]] = field(default_factory=dict)
    pacing: Pacing = field(default_factory=dict)
    choices: dict[tuple[str, object], TunerState] = field(default_factory=dict)
    lead_time_samples: list[LeadTimeSample] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    newest_published: datetime | None = None

    @classmethod
    def merged(cls, parts: Iterable[Published]) -> Published:
        """What several objects say together (each read on its own, e.g. once per resourceVersion)."""
        whole = cls()
        for part in parts:
            for metric, series in part.series.items():
                whole.series.setdefault(metric, []).extend(series)
            whole.pacing.update(part.pacing)
            whole.choices.update(part.choices)
            whole.lead_time_samples.extend(part.lead_time_samples)
            whole.problems.extend(part.problems)
            if part.newest_published is not None and (
                whole.newest_published is None or part.newest_published > whole.newest_published
            ):
                whole.newest_published = part.newest_published
        return whole

    def snapshot(self, metrics: Mapping[str, MetricInfo], now: datetime) -> Snapshot:
        ordered = {name: tuple(sorted(self.series.get(name, []), key=_order)) for name in metrics}
        return Snapshot(created_at=self.newest_published or now, metrics=metrics, series=ordered)


def _order(series: ServedSeries) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(series.labels.items()))


def read_objects(
    objects: Iterable[Mapping[str, Any]], metrics: Mapping[str, MetricInfo], signal_of: Mapping[str, str], shards: int
) -> Published:
    """The served values of the objects published with ``shards``; metrics not configured here are left out."""
    published = Published()
    for obj in objects:
        name = str((obj.get("metadata") or {}).get("name", "?"))
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if spec.get("shards") != shards:
            continue  # published with another shard count (before a settings change): not ours to read
        at = _time(status.get("publishedAt"))
        if at is not None and (published.newest_published is None or at > published.newest_published):
            published.newest_published = at
        items = status.get("items") or []
        if not isinstance(items, list):
            published.problems.append(f"GPUForecast {name}: status.items is not a list")
            continue
        for position, item in enumerate(items):
            problem = _read_item(item, metrics, signal_of, published)
            if problem is not None:
                published.problems.append(f"GPUForecast {name} status.items[{position}]: {problem}")
        for position, item in enumerate(status.get("leadTimeSamples") or []):
            sample = read_sample(item)
            if isinstance(sample, str):
                published.problems.append(f"GPUForecast {name} status.leadTimeSamples[{position}]: {sample}")
            else:
                published.lead_time_samples.append(sample)
    return published


def _record(item: Mapping[str, Any]) -> PublishedRecord | None:
    """The provenance essentials of an item; raises KeyError, TypeError or ValueError when garbled."""
    if "model" not in item:
        return None  # published without provenance (itself restored): nothing to add
    lead_time = item.get("leadTime") or {}
    windows = tuple(
        ScheduledWindow(
            source=str(window.get("source", "")),
            namespace=str(window.get("namespace", "")),
            name=str(window["name"]),
            start=_required_time(window["start"]),
            end=_required_time(window["end"]),
            gpus=float(window["gpus"]),
        )
        for window in item.get("windows") or []
    )
    seconds = lead_time.get("seconds")
    return PublishedRecord(
        model=str(item["model"]),
        quantile=float(item["quantile"]) if "quantile" in item else None,
        lead_time_seconds=int(seconds) if seconds is not None else None,
        lead_time_source=str(lead_time["source"]) if "source" in lead_time else None,
        windows=windows,
        as_published={key: item[key] for key in PROVENANCE_FIELDS if key in item},
    )


def _required_time(value: Any) -> datetime:
    moment = _time(value)
    if moment is None:
        raise ValueError(f"{value!r} is not an RFC 3339 time with a zone")
    return moment


def read_sample(item: Any) -> LeadTimeSample | str:
    try:
        created, ready = _time(item["created"]), _time(item["ready"])
        if created is None or ready is None or ready < created:
            return f"created {item['created']!r} and ready {item['ready']!r} are not two times in order"
        return LeadTimeSample(
            nodepool=str(item["nodepool"]),
            name=str(item.get("name", "")),
            uid=str(item["uid"]),
            created=created,
            ready=ready,
            condition=str(item["condition"]),
        )
    except (KeyError, TypeError) as error:
        return f"{type(error).__name__}: {error}"


def _time(value: Any) -> datetime | None:
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _read_item(
    item: Any, metrics: Mapping[str, MetricInfo], signal_of: Mapping[str, str], published: Published
) -> str | None:
    """Add one item to ``published``; why it cannot be used, if it cannot."""
    try:
        metric = str(item["metric"])
        if metric not in metrics or metric not in signal_of:
            return None
        value = float(item["value"])
        reason = unservable(value)
        if reason is not None:
            return f"{metric}: {reason}"
        timestamp = _time(item["timestamp"])
        if timestamp is None:
            return f"{metric}: timestamp {item['timestamp']!r} is not an RFC 3339 time with a zone"
        labels = {str(k): str(v) for k, v in item["labels"].items()}
        window = item.get("windowSeconds")
        series = ServedSeries(
            metric=metric,
            labels=labels,
            value=value,
            timestamp=timestamp,
            namespace=item.get("namespace"),
            window_seconds=int(window) if window is not None else None,
            explanation=str(item.get("explanation", "")),
            published=_record(item),
        )
        step_down = item.get("stepDown")
        paced = (float(step_down["value"]), _time(step_down["at"])) if step_down is not None else None
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        return f"{type(error).__name__}: {error}"
    published.series.setdefault(metric, []).append(series)
    key: SeriesKey = (signal_of[metric], tuple(sorted(labels.items())))
    if paced is not None and paced[1] is not None:
        published.pacing[(metric, key)] = (paced[0], paced[1])
    if "target" in item:  # only the choice is lost when it cannot be read: the value is served
        try:
            published.choices[(metric, key)] = choice_of(item["target"], metric, key)
        except ValueError as error:
            return f"{metric}: the target's choice is not carried on: {error}"
    return None
