"""The last served values on disk, so a restarted service answers at once instead of 404 while its
first forecast is fitted. Values keep their original timestamps: their age, staleness TTLs and
fallbacks apply exactly as if the process had never stopped.

So the file is read as input from outside: a timestamp later than now (beyond the state files'
clock skew, ``state_files.not_in_the_future``) would be served as fresh forever, a value must be a
JSON number that could have been served, and every field must have the type this code writes. Each
entry left out is named in the log (``state_files.Dropped``), a metric no longer configured too.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autoscaler.policy import unservable
from autoscaler.quantity import is_normal_number
from autoscaler.serving.provider import MetricInfo, ServedSeries, Snapshot
from autoscaler.state_files import Dropped, UnusableFile, not_in_the_future, read_versioned, write_atomically

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
FILE_NAME = "served-values.json"
_KINDS = {str: "a string", int: "a whole number"}  # of the optional fields, as a log line names them


def snapshot_document(snapshot: Snapshot) -> dict[str, Any]:
    return {
        "version": FORMAT_VERSION,
        "created_at": snapshot.created_at.isoformat(),
        "series": [
            {
                "metric": series.metric,
                "labels": dict(series.labels),
                "value": series.value,
                "timestamp": series.timestamp.isoformat(),
                "namespace": series.namespace,
                "window_seconds": series.window_seconds,
                "explanation": series.explanation,
            }
            for series_list in snapshot.series.values()
            for series in series_list
        ],
    }


def save(path: Path, snapshot: Snapshot) -> None:
    """Write atomically: a crash mid-write leaves the previous file, never half of one."""
    write_atomically(path, snapshot_document(snapshot))


def load(path: Path, metrics: Sequence[MetricInfo], now: datetime | None = None) -> Snapshot | None:
    """The saved values of metrics still configured; None (and a log line) when there is nothing usable."""
    now = now or datetime.now(UTC)
    try:
        document = read_versioned(path, FORMAT_VERSION)
    except UnusableFile as problem:
        log.warning("ignoring saved values %s: %s", path, problem)
        return None
    if document is None:
        return None
    known = {info.name: info for info in metrics}
    try:
        saved_at = _timestamp(document["created_at"], now)
        items = document["series"]
        if not isinstance(items, list):
            raise TypeError("series is not a list")
    except (KeyError, TypeError, ValueError) as error:
        log.warning("ignoring saved values %s: %s", path, error)
        return None
    restored: dict[str, list[ServedSeries]] = {name: [] for name in known}
    dropped = Dropped(path, log)
    for position, item in enumerate(items):
        series = _restored_series(item, known, saved_at, now)
        if isinstance(series, str):  # one bad entry costs that entry only
            dropped.drop(f"saved value {position}", series)
        else:
            restored[series.metric].append(series)
    dropped.done()
    if not any(restored.values()):
        if items:
            log.warning("ignoring saved values %s: none of its %d values is usable", path, len(items))
        return None
    return Snapshot(created_at=saved_at, metrics=known, series={k: tuple(v) for k, v in restored.items()})


def _timestamp(text: Any, now: datetime) -> datetime:
    """An aware timestamp no later than ``now`` plus the state files' clock skew; ValueError naming it if not."""
    if not isinstance(text, str):
        raise TypeError(f"timestamp {text!r} is not a string")
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"timestamp {text} has no time zone")
    not_in_the_future(moment.timestamp(), now.timestamp(), "timestamp", text)
    return moment


def _value(value: Any) -> float:
    """A JSON number (not a string, not true/false), not subnormal; ``unservable`` judges the rest."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"value {value!r} is not a JSON number")
    number = float(value)
    if math.isfinite(number) and not is_normal_number(number):
        raise ValueError(f"value {value!r} is subnormal, not a number that was ever served")
    return number


def _restored_series(
    item: Any, known: Mapping[str, MetricInfo], saved_at: datetime, now: datetime
) -> ServedSeries | str:
    """The entry as a served series; else why it is left out (a metric no longer configured too)."""
    try:
        metric, labels = item["metric"], item["labels"]
        if not isinstance(metric, str):
            raise TypeError(f"metric {metric!r} is not a string")
        if metric not in known:
            return f"{metric} is no longer configured"
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise TypeError(f"labels {labels!r} are not an object of strings")
        value = _value(item["value"])
        reason = unservable(value)
        if reason is not None:
            return f"{metric}{labels}: {reason}"
        return ServedSeries(
            metric=metric,
            labels=labels,
            value=value,
            timestamp=_timestamp(item["timestamp"], now),
            namespace=_optional(item, "namespace", str),
            window_seconds=_optional(item, "window_seconds", int),
            explanation=f"restored after a restart (saved {saved_at:%Y-%m-%dT%H:%M:%SZ}): "
            + _optional(item, "explanation", str, ""),
        )
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as error:
        return f"{type(error).__name__}: {error}"


def _optional(item: Mapping[str, Any], field: str, kind: type[Any], default: Any = None) -> Any:
    """``item[field]`` when it is a ``kind`` (true and false are not numbers), ``default`` when absent
    or null; TypeError naming the field otherwise."""
    value = item.get(field)
    if value is None:
        return default
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TypeError(f"{field} {value!r} is not {_KINDS[kind]}")
    return value
