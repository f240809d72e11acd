"""The live scorecards on disk (``scorecard.json`` in the state directory), written atomically as
``persistence`` writes the served values, so their minutes and counters carry on across a restart.

A row or a last sample later than now (``state_files.not_in_the_future``) is dropped before the
pool's entry is read, and named: the minutes to come would be refused as older than it, and the
pool's scorecard would stop until that time came."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from autoscaler.scorecard.queue_waits import SAVED_EVENTS
from autoscaler.state_files import (
    Dropped,
    UnusableFile,
    in_the_future,
    not_in_the_future,
    read_versioned,
    write_atomically,
)

log = logging.getLogger(__name__)

FILE_NAME = "scorecard.json"
FORMAT_VERSION = 1
# Each list of rows a pool's entry holds, and its column of times.
TIMED_ROWS = {"minutes": "start", "waits": "at", "window_delays": "at", "busy": "at"} | {
    key: "at" for key in SAVED_EVENTS.values()
}


def save(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, {"version": FORMAT_VERSION, **document})


def load(path: Path) -> dict[str, Any] | None:
    """The saved document; None (and a logged error naming the file and the fault) when unusable."""
    try:
        return read_versioned(path, FORMAT_VERSION)
    except UnusableFile as problem:
        log.error("scorecard: ignoring %s (the scorecard starts empty): %s", path, problem)
        return None


def without_future_times(entry: Any, now_s: float, pool: str, dropped: Dropped) -> Any:
    """A pool's saved ``entry`` without its rows (and last sample) later than ``now_s``, each list of
    rows dropped from named once; what is malformed is left for ``PoolScorecard.from_document``."""
    if not isinstance(entry, dict):
        return entry
    entry = dict(entry)
    last = entry.get("last_sample")
    if isinstance(last, list) and last and _future(last[0], now_s):
        _drop(f"pool {pool}: last sample", last[0], now_s, "last_sample.at", dropped)
        entry["last_sample"] = None
    for key, time_column in TIMED_ROWS.items():
        entry[key] = _past_rows(entry.get(key), time_column, now_s, key, f"pool {pool}", dropped)
    judgments = entry.get("judgments")
    if isinstance(judgments, dict):
        entry["judgments"] = {
            metric: _past_rows(rows, "at", now_s, f"judgments.{metric}", f"pool {pool}", dropped)
            for metric, rows in judgments.items()
        }
    return entry


def _past_rows(columns: Any, time_column: str, now_s: float, key: str, where: str, dropped: Dropped) -> Any:
    """The columns without the rows whose time is in the future (named once, with their count)."""
    if not isinstance(columns, dict) or not isinstance(columns.get(time_column), list):
        return columns
    times = columns[time_column]
    if not all(isinstance(column, list) and len(column) == len(times) for column in columns.values()):
        return columns
    future = {index for index, at in enumerate(times) if _future(at, now_s)}
    if not future:
        return columns
    _drop(f"{where}: {len(future)} rows of {key}", times[min(future)], now_s, f"{key}.{time_column}", dropped)
    return {name: [value for i, value in enumerate(column) if i not in future] for name, column in columns.items()}


def _future(at: Any, now_s: float) -> bool:
    return not isinstance(at, bool) and isinstance(at, int | float) and in_the_future(at, now_s)


def _drop(entry: str, at_s: float, now_s: float, field: str, dropped: Dropped) -> None:
    try:
        not_in_the_future(at_s, now_s, field)
    except ValueError as error:
        dropped.drop(entry, error)
