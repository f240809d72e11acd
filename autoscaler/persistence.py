"""The last served values on disk, so a restarted service answers at once instead of 404 while its
first forecast is fitted. Values keep their original timestamps: their age, staleness TTLs and
fallbacks apply exactly as if the process had never stopped."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from autoscaler.policy import unservable
from autoscaler.provider import MetricInfo, ServedSeries, Snapshot

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
FILE_NAME = "served-values.json"


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
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(snapshot_document(snapshot)), encoding="utf-8")
    os.replace(temporary, path)


def load(path: Path, metrics: Sequence[MetricInfo]) -> Snapshot | None:
    """The saved values of metrics still configured; None (and a log line) when there is nothing usable."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        log.warning("ignoring unreadable saved values %s: %s", path, error)
        return None
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
        log.warning("ignoring saved values %s: unknown format", path)
        return None
    known = {info.name: info for info in metrics}
    try:
        saved_at = datetime.fromisoformat(document["created_at"])
        items = list(document["series"])
    except (KeyError, TypeError, ValueError) as error:
        log.warning("ignoring saved values %s: %s", path, error)
        return None
    restored: dict[str, list[ServedSeries]] = {name: [] for name in known}
    for position, item in enumerate(items):
        series = _restored_series(item, known, saved_at)
        if isinstance(series, str):  # one bad entry costs that entry only
            log.warning("dropping saved value %d of %s: %s", position, path, series)
        elif series is not None:
            restored[series.metric].append(series)
    if not any(restored.values()):
        return None
    return Snapshot(created_at=saved_at, metrics=known, series={k: tuple(v) for k, v in restored.items()})


def _restored_series(item: Any, known: Mapping[str, MetricInfo], saved_at: datetime) -> ServedSeries | str | None:
    """The entry as a served series; None for a metric no longer configured; else why it is unusable."""
    try:
        if item["metric"] not in known:
            return None
        value = float(item["value"])
        reason = unservable(value)
        if reason is not None:
            return f"{item['metric']}{dict(item['labels'])}: {reason}"
        return ServedSeries(
            metric=item["metric"],
            labels={str(k): str(v) for k, v in item["labels"].items()},
            value=value,
            timestamp=datetime.fromisoformat(item["timestamp"]),
            namespace=item.get("namespace"),
            window_seconds=item.get("window_seconds"),
            explanation=f"restored after a restart (saved {saved_at:%Y-%m-%dT%H:%M:%SZ}): "
            + str(item.get("explanation", "")),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        return f"{type(error).__name__}: {error}"
