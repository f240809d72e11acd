"""The last served values on disk, so a restarted service answers at once instead of 404 while its
first forecast is fitted. Values keep their original timestamps: their age, staleness TTLs and
fallbacks apply exactly as if the process had never stopped.

So the file is read as input from outside: a timestamp later than now (beyond :data:`CLOCK_SKEW`)
would be served as fresh forever, and a value must be a JSON number that could have been served.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from autoscaler.policy import unservable
from autoscaler.quantity import is_normal_number
from autoscaler.serving.provider import MetricInfo, ServedSeries, Snapshot
from autoscaler.state_files import UnusableFile, read_versioned, write_atomically

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
FILE_NAME = "served-values.json"
# How far ahead of this clock a saved timestamp may be: a peer's clock a little ahead, not a year.
CLOCK_SKEW = timedelta(seconds=60)


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
        items = list(document["series"])
    except (KeyError, TypeError, ValueError) as error:
        log.warning("ignoring saved values %s: %s", path, error)
        return None
    restored: dict[str, list[ServedSeries]] = {name: [] for name in known}
    for position, item in enumerate(items):
        series = _restored_series(item, known, saved_at, now)
        if isinstance(series, str):  # one bad entry costs that entry only
            log.warning("dropping saved value %d of %s: %s", position, path, series)
        elif series is not None:
            restored[series.metric].append(series)
    if not any(restored.values()):
        return None
    return Snapshot(created_at=saved_at, metrics=known, series={k: tuple(v) for k, v in restored.items()})


def _timestamp(text: Any, now: datetime) -> datetime:
    """An aware timestamp no later than ``now`` plus :data:`CLOCK_SKEW`; ValueError naming it if not."""
    if not isinstance(text, str):
        raise TypeError(f"timestamp {text!r} is not a string")
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"timestamp {text} has no time zone")
    if moment > now + CLOCK_SKEW:
        ahead = (moment - now).total_seconds()
        raise ValueError(
            f"timestamp {text} is {ahead:.0f} s in the future (a clock ahead when it was saved?); "
            f"at most {CLOCK_SKEW.total_seconds():.0f} s of skew is accepted"
        )
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
) -> ServedSeries | str | None:
    """The entry as a served series; None for a metric no longer configured; else why it is unusable."""
    try:
        if item["metric"] not in known:
            return None
        value = _value(item["value"])
        reason = unservable(value)
        if reason is not None:
            return f"{item['metric']}{dict(item['labels'])}: {reason}"
        return ServedSeries(
            metric=item["metric"],
            labels={str(k): str(v) for k, v in item["labels"].items()},
            value=value,
            timestamp=_timestamp(item["timestamp"], now),
            namespace=item.get("namespace"),
            window_seconds=item.get("window_seconds"),
            explanation=f"restored after a restart (saved {saved_at:%Y-%m-%dT%H:%M:%SZ}): "
            + str(item.get("explanation", "")),
        )
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as error:
        return f"{type(error).__name__}: {error}"
