"""The scorecard: one definition of every outcome figure, shared by the live service and the simulator.

Both sides reduce what happened in a pool to the same per-minute ledger (:class:`MinuteLedger`) and the
same lists of waits, and read every figure from them with the functions here, so that a simulated
figure and a live one mean the same thing:

- **GPUs short**: GPUs requested by pods that wait for capacity (Pending, ``PodScheduled=False``
  with reason ``Unschedulable``), in the pool they wait for. ``short_gpu_minutes`` integrates them;
  a minute counts as *short* when any GPU was short in it (its short GPU-seconds are above zero).
- **Capacity wait**: seconds from a GPU pod's creation until it was scheduled; p50, p95 and max.
- **Window start delay**: for each run of a declared window (a CronJob), seconds from its scheduled
  time until all its pods were running.
- **Idle GPU-hours**: GPU capacity held by the pool (its nodes, launching ones included, since they
  are billed) minus GPUs requested by running non-placeholder pods. Placeholders and buffer capacity
  count as idle, on purpose: they are what pre-provisioning costs.
- **GPU allocation**: requested over held, over the same minutes.
- **Live coverage**: for each served headroom, whether the rise of demand realized over the lead
  time stayed within it; the fraction that did is the served quantile's coverage.

A **service-level target** (:class:`ServiceTarget`) is stated on one of these figures, as an
operator would: at most 1 % of minutes short, at most 30 short GPU-minutes a day, or window pods
started within 5 minutes at p95.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from forecast.durations import parse_duration

MINUTE_S = 60.0
DAY_S = 86400.0

TargetKind = Literal["minutes_short_fraction", "short_gpu_minutes_per_day", "window_start_delay_p95_s"]
TARGET_KINDS: tuple[TargetKind, ...] = (
    "minutes_short_fraction",
    "short_gpu_minutes_per_day",
    "window_start_delay_p95_s",
)


class TargetError(ValueError):
    """A service-level target that cannot be met or read; the message names what is wrong."""


@dataclass(frozen=True)
class MinuteLedger:
    """What one pool held and lacked, minute by minute: GPU-seconds in each whole minute.

    ``starts`` are the minutes' start times in seconds (any origin, ascending, one minute apart
    where the ledger has no gaps); every other array is aligned with it.
    """

    starts: np.ndarray
    short_gpu_seconds: np.ndarray  # GPUs requested by pods waiting for capacity, integrated (NaN: unknown)
    held_gpu_seconds: np.ndarray  # GPU capacity of the pool's nodes (launching ones included)
    used_gpu_seconds: np.ndarray  # GPUs requested by running non-placeholder pods

    def __post_init__(self) -> None:
        arrays = (self.starts, self.short_gpu_seconds, self.held_gpu_seconds, self.used_gpu_seconds)
        lengths = {len(array) for array in arrays}
        if len(lengths) != 1:
            raise ValueError(f"ledger arrays differ in length: {sorted(lengths)}")

    def __len__(self) -> int:
        return len(self.starts)

    def between(self, start_s: float, end_s: float) -> MinuteLedger:
        """The minutes starting in ``[start_s, end_s)``."""
        return self.only((self.starts >= start_s) & (self.starts < end_s))

    def only(self, keep: np.ndarray) -> MinuteLedger:
        """The minutes where ``keep`` (a boolean per minute) is true."""
        return MinuteLedger(
            self.starts[keep], self.short_gpu_seconds[keep], self.held_gpu_seconds[keep], self.used_gpu_seconds[keep]
        )


def integrate_per_minute(change_times: np.ndarray, rates: np.ndarray, start_s: float, end_s: float) -> np.ndarray:
    """Per-minute integrals of a step function: ``rates[i]`` holds from ``change_times[i]`` until the
    next change. Minutes start at ``start_s`` (which must be a whole number of minutes from the
    simulation's origin); a last partial minute is integrated over its part.

    Exact: the running integral is piecewise linear between changes, so it is interpolated at the
    minute boundaries.
    """
    if end_s <= start_s:
        return np.zeros(0)
    times = np.asarray(change_times, dtype=np.float64)
    values = np.asarray(rates, dtype=np.float64)
    if len(times) == 0:
        return np.zeros(math.ceil((end_s - start_s) / MINUTE_S))
    # Clip the step function to [start_s, end_s]: the value in force at start_s, then later changes.
    first = max(0, int(np.searchsorted(times, start_s, side="right")) - 1)
    times, values = times[first:].copy(), values[first:]
    times[0] = max(times[0], start_s)
    keep = times < end_s
    times, values = times[keep], values[keep]
    knots = np.append(times, end_s)
    cumulative = np.concatenate([[0.0], np.cumsum(values * np.diff(knots))])
    if times[0] > start_s:  # nothing known before the first change: zero
        knots = np.concatenate([[start_s], knots])
        cumulative = np.concatenate([[0.0], cumulative])
    boundaries = np.append(np.arange(start_s, end_s, MINUTE_S), end_s)
    return np.diff(np.interp(boundaries, knots, cumulative))


@dataclass(frozen=True)
class ShortFigures:
    short_gpu_minutes: float
    minutes_short: int
    minutes_scored: int

    @property
    def minutes_short_fraction(self) -> float:
        return self.minutes_short / self.minutes_scored if self.minutes_scored else 0.0

    @property
    def short_gpu_minutes_per_day(self) -> float:
        days = self.minutes_scored * MINUTE_S / DAY_S
        return self.short_gpu_minutes / days if days else 0.0


# Below this, a minute's short GPU-seconds are float residue, not a GPU short (one GPU short for a
# millisecond is 1e-3).
_SHORT_EPSILON_GPU_S = 1e-6


def short_figures(ledger: MinuteLedger) -> ShortFigures:
    """Over the minutes whose GPUs short are known: a live minute without a Pending-pod watch has NaN
    short GPU-seconds and is not scored (its held and used GPUs still count)."""
    short = ledger.short_gpu_seconds
    known = ~np.isnan(short)
    return ShortFigures(
        short_gpu_minutes=float(short[known].sum()) / MINUTE_S,
        minutes_short=int(np.count_nonzero(short[known] > _SHORT_EPSILON_GPU_S)),
        minutes_scored=int(np.count_nonzero(known)),
    )


def idle_gpu_hours(ledger: MinuteLedger) -> float:
    return float(np.sum(ledger.held_gpu_seconds - ledger.used_gpu_seconds)) / 3600.0


def gpu_allocation(ledger: MinuteLedger) -> float | None:
    """Requested over held GPU-seconds; None when nothing was held."""
    held = float(ledger.held_gpu_seconds.sum())
    return float(ledger.used_gpu_seconds.sum()) / held if held > 0 else None


@dataclass(frozen=True)
class WaitFigures:
    count: int
    p50_s: float | None
    p95_s: float | None
    max_s: float | None


def wait_figures(waits_s: np.ndarray) -> WaitFigures:
    """p50, p95 and max of waits in seconds (capacity waits of pods, or window start delays).

    Percentiles are numpy's default (linear interpolation), the same on both sides.
    """
    values = np.asarray(waits_s, dtype=np.float64)
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return WaitFigures(0, None, None, None)
    p50, p95 = np.percentile(values, [50, 95])
    return WaitFigures(len(values), float(p50), float(p95), float(values.max()))


def window_start_delay(scheduled_s: float, pods_running_s: np.ndarray) -> float:
    """One run of a declared window: from its scheduled time until the last of its pods was running
    (never negative: pods started early by a cron scaler are on time)."""
    if len(pods_running_s) == 0:
        return 0.0
    return max(0.0, float(np.max(pods_running_s)) - scheduled_s)


def coverage(served_headroom: np.ndarray, realized_rise: np.ndarray) -> tuple[int, int]:
    """How many served headroom values covered the rise realized over their lead time, of how many
    could be judged (a rise not yet known is NaN and is not counted)."""
    served = np.asarray(served_headroom, dtype=np.float64)
    realized = np.asarray(realized_rise, dtype=np.float64)
    known = np.isfinite(served) & np.isfinite(realized)
    return int(np.count_nonzero(realized[known] <= served[known] + 1e-9)), int(np.count_nonzero(known))


@dataclass(frozen=True)
class ServiceTarget:
    """A service level as an operator states it: ``kind`` at most ``value``."""

    kind: TargetKind
    value: float

    def describe(self) -> str:
        if self.kind == "minutes_short_fraction":
            return f"at most {self.value * 100:g} % of minutes with any GPU short"
        if self.kind == "short_gpu_minutes_per_day":
            return f"at most {self.value:g} short GPU-minutes a day"
        return f"window pods started within {self.value:g} s at p95"

    def attained(self, shorts: ShortFigures, window_delays: WaitFigures | None = None) -> float | None:
        """The figure the target is stated on, as attained (None when it cannot be judged yet)."""
        if self.kind == "minutes_short_fraction":
            return shorts.minutes_short_fraction if shorts.minutes_scored else None
        if self.kind == "short_gpu_minutes_per_day":
            return shorts.short_gpu_minutes_per_day if shorts.minutes_scored else None
        return None if window_delays is None or window_delays.p95_s is None else window_delays.p95_s

    def met(self, shorts: ShortFigures, window_delays: WaitFigures | None = None) -> bool | None:
        attained = self.attained(shorts, window_delays)
        return None if attained is None else attained <= self.value + 1e-12


_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


def parse_fraction_target(text: str) -> ServiceTarget:
    """``1%`` or ``0.3%``: at most that share of minutes with any GPU short.

    Written as a percentage on purpose: ``0.01`` could be read as 1 % or 0.01 %. Plain digits only
    (no ``1_000``, exponents or signs), above 0 and below 100.
    """
    match = _PERCENT.match(text)
    if match is None:
        raise TargetError(f"target {text!r}: write the share of minutes short as a percentage, e.g. '1%'")
    percent = float(match.group(1))
    if not 0.0 < percent < 100.0:
        raise TargetError(f"target {text!r}: the share of minutes short must be above 0 % and below 100 %")
    return ServiceTarget("minutes_short_fraction", percent / 100.0)


_WINDOW_P95 = "window-p95="


def parse_target_text(text: str) -> ServiceTarget:
    """A target as the simulator's policies write it: ``1%`` (the share of minutes short, as
    :func:`parse_fraction_target`) or ``window-p95=2m`` (window pods started within 2 minutes at p95)."""
    if text.strip().startswith(_WINDOW_P95):
        duration = text.strip().removeprefix(_WINDOW_P95)
        try:
            seconds = parse_duration(duration).total_seconds()
        except ValueError as error:
            raise TargetError(f"target {text!r}: {error}") from None
        return make_target("window_start_delay_p95_s", seconds)
    if not text.strip().endswith("%"):
        raise TargetError(
            f"target {text!r}: write the share of minutes short as a percentage (e.g. '1%') or the window "
            f"start delay p95 as {_WINDOW_P95}DURATION (e.g. '{_WINDOW_P95}2m')"
        )
    return parse_fraction_target(text)


def make_target(kind: str, value: float) -> ServiceTarget:
    """A target from a kind and a number already parsed (configuration), checked."""
    if kind not in TARGET_KINDS:
        raise TargetError(f"target kind {kind!r} is unknown; known: {', '.join(TARGET_KINDS)}")
    if not math.isfinite(value) or value < 0:
        raise TargetError(f"target {kind}: {value!r} must be a finite number, at least 0")
    if kind == "minutes_short_fraction" and not 0.0 < value < 1.0:
        raise TargetError(f"target {kind}: {value!r} must be above 0 % and below 100 %")
    known_kind = next(known for known in TARGET_KINDS if known == kind)
    return ServiceTarget(known_kind, float(value))


def minute_is_short(short_gpu_seconds: float) -> bool:
    """Whether a minute with these short GPU-seconds counts as short (as ``short_figures`` counts it)."""
    return short_gpu_seconds > _SHORT_EPSILON_GPU_S
