"""The saved scorecard's building blocks: bounded lists of timed events stored as JSON columns,
checked on the way back in, and wait histograms cumulative like Prometheus's. Pure: numpy only."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autoscaler.quantity import is_normal_number
from autoscaler.scorecard.figures import MINUTE_S, WaitFigures

KEEP_S = 7 * 86400.0
MAX_EVENTS = 20_000
# Upper bounds of the wait histograms (seconds), from a scheduling blip to a day's queue.
WAIT_BUCKETS_S: tuple[float, ...] = (15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
EVENT_COLUMNS = ("at", "seconds")


@dataclass
class Histogram:
    """Cumulative like Prometheus's: ``counts[i]`` observations at most ``WAIT_BUCKETS_S[i]``, plus the rest."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(WAIT_BUCKETS_S) + 1))
    total_s: float = 0.0

    def observe(self, value_s: float) -> None:
        index = int(np.searchsorted(WAIT_BUCKETS_S, value_s, side="left"))
        self.counts[index] += 1
        self.total_s += value_s

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at most it), the last bound infinite."""
        bounds = [*WAIT_BUCKETS_S, math.inf]
        return list(zip(bounds, np.cumsum(self.counts).tolist(), strict=True))


def waits_json(figures: WaitFigures) -> dict[str, Any]:
    """p50, p95 and max of waits as the API shows them."""
    return {"count": figures.count, "p50": figures.p50_s, "p95": figures.p95_s, "max": figures.max_s}


def non_negative(value: Any, where: str, *, signed: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not is_normal_number(value):
        raise ValueError(f"{where}: {value!r} is not a finite number (nor subnormal)")
    if value < 0 and not signed:
        raise ValueError(f"{where}: {value!r} is not a finite number >= 0")
    return float(value)


def numbers(entry: Any, length: int | None, where: str, *, signed: bool = False, unknown: bool = False) -> list[float]:
    """``length`` numbers (None: up to a week of minutes and the event bound); ``unknown``: null, read
    as NaN, is one too."""
    limit = int(KEEP_S / MINUTE_S) + MAX_EVENTS
    if not isinstance(entry, list) or (len(entry) != length if length is not None else len(entry) > limit):
        raise ValueError(f"{where}: not a list of {length if length is not None else f'at most {limit}'} numbers")
    return [math.nan if unknown and value is None else non_negative(value, where, signed=signed) for value in entry]


def mapping(document: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = document.get(key, {})
    if not isinstance(value, dict):
        raise ValueError(f"{key}: not a JSON object")
    return value


def as_columns(rows: Iterable[Sequence[float | None]], names: Sequence[str]) -> dict[str, list[float | None]]:
    columns = [list(column) for column in zip(*rows, strict=True)] or [[] for _ in names]
    return dict(zip(names, columns, strict=True))


def checked_rows(
    document: Mapping[str, Any],
    key: str,
    names: Sequence[str],
    *,
    where: str = "",
    signed: Sequence[str] = (),
    unknown: Sequence[str] = (),
) -> list[tuple[float, ...]]:
    """The rows of columns ``names`` of ``document[key]``, each checked: finite, and not negative unless
    the column is ``signed``, or null (NaN) where it is ``unknown``; the columns of one length."""
    columns = mapping(document, key)
    checked = [
        numbers(columns.get(name, []), None, f"{where}{key}.{name}", signed=name in signed, unknown=name in unknown)
        for name in names
    ]
    if len({len(column) for column in checked}) > 1:
        raise ValueError(f"{where}{key}: columns {', '.join(names)} differ in length")
    return list(zip(*checked, strict=True))


def histogram(document: Mapping[str, Any], key: str) -> Histogram:
    value = mapping(document, key)
    if not value:
        return Histogram()
    counts = numbers(value.get("counts"), len(WAIT_BUCKETS_S) + 1, f"{key}.counts")
    return Histogram([int(c) for c in counts], non_negative(value.get("total_s"), f"{key}.total_s"))
