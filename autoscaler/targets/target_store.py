"""The record of each metric served to a target, on disk (``targets.json`` in the state directory), so
that a restart neither forgets what was chosen nor waits a day of new record to choose again; and
the choice alone, as a GPUForecast item carries it to the next pod that serves the series.

Saved: each tuner's record (times, GPUs requested, windows due, every level's headroom), what it
serves, the level asked and when it chose. Not saved: the candidates' replayed ledgers, which the
next choice rebuilds by replaying the whole record once. Arrays are base64 of little-endian float64,
exact and about half the size of JSON numbers. A file or an entry that cannot be used is logged,
naming it and the fault, and that record starts again; the others are kept. An entry with a time
later than now (``state_files.not_in_the_future``: its choice, its record, its level-shift watch) is
one: kept, a choice made "in 2099" would be served and never made again before then.
"""

from __future__ import annotations

import base64
import binascii
import logging
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.scorecard.figures import ServiceTarget, make_target
from autoscaler.state_files import Dropped, UnusableFile, not_in_the_future, read_versioned_list, write_atomically
from autoscaler.targets.candidates import is_candidate
from autoscaler.targets.shift_watch import NO_SHIFT, ShiftWatch

log = logging.getLogger(__name__)

FILE_NAME = "targets.json"
FORMAT_VERSION = 1
_REASON_CHARS = 1024  # as the GPUForecast item schema bounds it


@dataclass(frozen=True)
class TunerState:
    """One (metric, series) tuner as saved: enough to serve its choice and replay its record."""

    metric: str
    series: object  # the series key: a string, or nested tuples of strings
    target: ServiceTarget
    gpus_per_node: int
    step_s: float
    chosen: str
    asked: float
    chosen_at: float | None
    reason: str
    lead_time_s: float
    plain_buffers: bool
    window_starts: tuple[float, ...]
    # The record as taken on the event loop (a copy of the tuner's ring, one array: the rows as arrays
    # of their own took milliseconds per tuner there); read back, a tuple of rows.
    times: tuple[float, ...]  # seconds since the epoch, increasing
    rows: np.ndarray | tuple[np.ndarray, ...]  # one row per time: requested, windows due, each level's headroom
    # Where the judged past starts after a level shift (absent from a file saved before it: none).
    shift: ShiftWatch = NO_SHIFT


def fits(state: TunerState, target: ServiceTarget, gpus_per_node: int, step_s: float) -> bool:
    """Whether a saved state can carry on for a metric with this target: a choice alone needs the same
    target; a record also the same node size and refresh interval (its rows are one per refresh)."""
    if state.target != target:
        return False
    return not len(state.times) or (state.gpus_per_node, state.step_s) == (gpus_per_node, step_s)


def choice_only(state: TunerState) -> TunerState:
    return replace(state, times=(), rows=())


def choice_entry(state: TunerState) -> dict[str, Any]:
    """The choice as a GPUForecast item's ``target`` holds it."""
    chosen_at = state.chosen_at if state.chosen_at is not None else 0.0
    return {
        "kind": state.target.kind,
        "value": state.target.value,
        "chosen": state.chosen,
        "asked": state.asked,
        "chosenAt": datetime.fromtimestamp(chosen_at, UTC).isoformat().replace("+00:00", "Z"),
        "reason": state.reason[:_REASON_CHARS],
    }


def choice_of(document: Any, metric: str, series: object) -> TunerState:
    """A GPUForecast item's ``target``, checked; ``ValueError`` names the field at fault."""
    if not isinstance(document, dict):
        raise ValueError("target is not an object")
    target = _target(document)
    chosen, reason = document.get("chosen"), document.get("reason")
    if not isinstance(chosen, str) or not is_candidate(chosen):
        raise ValueError(f"target.chosen {chosen!r} is not a level or a buffer this version chooses among")
    try:
        chosen_at = datetime.fromisoformat(str(document.get("chosenAt")))
    except ValueError:
        raise ValueError("target.chosenAt is not an RFC 3339 time") from None
    if chosen_at.tzinfo is None:
        raise ValueError("target.chosenAt has no time zone")
    return TunerState(
        metric, series, target, 0, 0.0, chosen,
        _number(document, "asked"), chosen_at.timestamp(), str(reason or "")[:_REASON_CHARS], 0.0, False,
        (), (), (),
    )  # fmt: skip


def _packed(values: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(values, dtype="<f8").tobytes()).decode("ascii")


def _unpacked(text: Any, field: str) -> np.ndarray:
    if not isinstance(text, str):
        raise ValueError(f"{field} is not a base64 string")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{field} is not base64") from None
    if len(raw) % 8:
        raise ValueError(f"{field} is not a whole number of float64 values")
    values = np.frombuffer(raw, dtype="<f8").astype(np.float64)
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{field} holds a value that is not finite")
    return values


def _json_key(key: object) -> Any:
    return [_json_key(part) for part in key] if isinstance(key, tuple) else key


def _series_key(value: Any) -> object:
    if isinstance(value, list):
        return tuple(_series_key(part) for part in value)
    if isinstance(value, str):
        return value
    raise ValueError("series is not a string or a list of them")


def entry(state: TunerState) -> dict[str, Any]:
    return {
        "metric": state.metric,
        "series": _json_key(state.series),
        "target": {"kind": state.target.kind, "value": state.target.value},
        "gpus_per_node": state.gpus_per_node,
        "step_s": state.step_s,
        "chosen": state.chosen,
        "asked": state.asked,
        "chosen_at": state.chosen_at,
        "reason": state.reason,
        "lead_time_s": state.lead_time_s,
        "plain_buffers": state.plain_buffers,
        "window_starts": list(state.window_starts),
        "columns": len(state.rows[0]) if len(state.rows) else 0,
        "times": _packed(np.asarray(state.times, dtype=np.float64)),
        "rows": _packed(np.asarray(state.rows, dtype=np.float64)),
        "shift": _shift_entry(state.shift),
    }


def _shift_entry(shift: ShiftWatch) -> dict[str, Any]:
    judged_from = shift.judged_from_s if math.isfinite(shift.judged_from_s) else None
    return {
        "judged_from": judged_from,
        "burning_since": shift.burning_since_s,
        "burning_periods": shift.burning_periods,
        "recent": [[start, burned] for start, burned in shift.recent],
        "cause": shift.cause,
    }


def _shift(document: Any) -> ShiftWatch:
    """A saved level-shift watch; none saved (an older file) is no shift."""
    if document is None:
        return NO_SHIFT
    if not isinstance(document, dict):
        raise ValueError("shift is not a JSON object")
    judged_from = document.get("judged_from")
    since = document.get("burning_since")
    periods = document.get("burning_periods")
    if isinstance(periods, bool) or not isinstance(periods, int) or periods < 0:
        raise ValueError("shift.burning_periods is not a whole number of periods")
    cause = document.get("cause", "")
    if cause not in ("", "run", "drift"):
        raise ValueError("shift.cause is not '', 'run' or 'drift'")
    return ShiftWatch(
        -math.inf if judged_from is None else _number(document, "judged_from"),
        None if since is None else _number(document, "burning_since"),
        periods,
        _recent(document.get("recent", [])),
        cause,
    )


def _recent(document: Any) -> tuple[tuple[float, bool], ...]:
    """The drift rule's last periods, each ``[start, burned]``; an older file has none."""
    if not isinstance(document, list) or len(document) > 30:
        raise ValueError("shift.recent is not a list of at most 30 periods")
    recent = []
    for entry in document:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], bool)):
            raise ValueError("shift.recent holds an entry that is not [start, burned]")
        recent.append((_number({"shift.recent start": entry[0]}, "shift.recent start"), entry[1]))
    return tuple(recent)


def _target(document: dict[str, Any]) -> ServiceTarget:
    """A target's kind and value, checked as the settings check them (a ``TargetError`` names why)."""
    return make_target(str(document.get("kind")), _number(document, "value"))


def _number(document: dict[str, Any], field: str) -> float:
    value = document.get(field)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{field} is not a finite number")
    return float(value)


def state_of(document: Any, columns: int, now_s: float = math.inf) -> TunerState:
    """A saved entry, checked (its times no later than ``now_s``); ``ValueError`` names the field at fault."""
    if not isinstance(document, dict):
        raise ValueError("the entry is not a JSON object")
    metric, chosen, reason = document.get("metric"), document.get("chosen"), document.get("reason")
    if not (isinstance(metric, str) and isinstance(chosen, str) and isinstance(reason, str)):
        raise ValueError("metric, chosen and reason must be strings")
    if not is_candidate(chosen):
        raise ValueError(f"chosen {chosen!r} is not a level or a buffer this version chooses among")
    saved_target = document.get("target")
    if not isinstance(saved_target, dict):
        raise ValueError("target is not a JSON object")
    target = _target(saved_target)
    times = _unpacked(document.get("times"), "times")
    rows = _unpacked(document.get("rows"), "rows")
    if len(times) and document.get("columns") != columns:  # a choice alone (no record) has no columns
        raise ValueError(f"columns is not {columns} (saved by another version's candidate levels)")
    if len(rows) != len(times) * columns or np.any(np.diff(times) <= 0):
        raise ValueError("times and rows do not make one increasing record")
    starts = document.get("window_starts")
    if not isinstance(starts, list) or not all(isinstance(start, int | float) for start in starts):
        raise ValueError("window_starts is not a list of numbers")
    gpus_per_node = _number(document, "gpus_per_node")
    if gpus_per_node < (1 if len(times) else 0) or gpus_per_node != int(gpus_per_node):  # a choice alone: 0
        raise ValueError("gpus_per_node is not a positive whole number")
    state = TunerState(
        metric=metric,
        series=_series_key(document.get("series")),
        target=target,
        gpus_per_node=int(gpus_per_node),
        step_s=_number(document, "step_s"),
        chosen=chosen,
        asked=_number(document, "asked"),
        chosen_at=None if document.get("chosen_at") is None else _number(document, "chosen_at"),
        reason=reason,
        lead_time_s=_number(document, "lead_time_s"),
        plain_buffers=document.get("plain_buffers") is True,
        window_starts=tuple(float(start) for start in starts),
        times=tuple(times.tolist()),
        rows=tuple(rows.reshape(len(times), columns)),
        shift=_shift(document.get("shift")),
    )
    _not_in_the_future(state, now_s)
    return state


def _not_in_the_future(state: TunerState, now_s: float) -> None:
    """ValueError naming the first of the entry's times later than ``now_s`` (beyond the clock skew)."""
    times = {
        "chosen_at": state.chosen_at,
        "times": state.times[-1] if state.times else None,
        "shift.judged_from": state.shift.judged_from_s,
        "shift.burning_since": state.shift.burning_since_s,
        "shift.recent": max((start for start, _ in state.shift.recent), default=None),
    }
    for field, at_s in times.items():
        if at_s is not None:
            not_in_the_future(at_s, now_s, field)


def save(path: Path, states: Iterable[TunerState]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, {"version": FORMAT_VERSION, "tuners": [entry(state) for state in states]})


def load(path: Path, columns: int, now_s: float | None = None) -> list[TunerState]:
    """The saved tuners; an unusable file or entry is logged (naming it and why) and left out."""
    now_s = time.time() if now_s is None else now_s
    try:
        entries = read_versioned_list(path, FORMAT_VERSION, "tuners")
    except UnusableFile as problem:
        log.error("targets: ignoring %s (every target's record starts again): %s", path, problem)
        return []
    states = []
    dropped = Dropped(path, log, "its record starts again")
    for index, saved in enumerate(entries):
        try:
            states.append(state_of(saved, columns, now_s))
        except ValueError as error:
            dropped.drop(f"tuner {index}", error)
    dropped.done()
    return states
