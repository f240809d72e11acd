"""Service-level targets: at each decision, serve the cheapest candidate that met the target over the
days before it (walk-forward tuning), judged on each candidate's replayed outcome.

This is how an operator tunes a heuristic on the past and runs it on the future
(``static_buffer@1%``: each day, the smallest buffer that would have kept minutes short under 1 %
over the previous 7 days), and how a metric with a ``target`` (the simulator's ``auto-slo``) chooses
the quantile level it serves. Each candidate's past is its own run through the same controller and
node pool (its ledger, :mod:`autoscaler.scorecard.figures`), so a choice is judged on the decision
itself, the capacity it made and what that cost, not on per-step forecast error.

A target also calibrates online, as adaptive conformal inference does for a coverage level: the
level it asks of the past moves down after a period that missed the target and back up after
periods that met it, so that a cluster whose demand or lead times shift is pulled back to its target.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from functools import partial

import numpy as np

from autoscaler.scorecard.figures import MinuteLedger, ServiceTarget, ShortFigures, wait_figures
from autoscaler.targets.candidate_ledgers import CandidateLedger, ShortAndHeld
from autoscaler.targets.launches import LearnedLaunches
from autoscaler.targets.shift_watch import ShiftWatch
from autoscaler.targets.tuning import TuningSettings

_NO_WINDOWS = np.zeros(0)
# Buffers up to this share of the largest demand (plus a node): past it a buffer costs more than any
# target on the GPU traces in docs/service-levels.md needs.
BUFFER_SHARE = 0.3


def buffer_grid(largest_demand: float, gpus_per_node: int) -> list[int]:
    """Buffers an operator would try: every GPU up to 16, then steps of 2, 4 and 8 GPUs up to 128,
    then a quarter more each time (rounded to 8), up to the ceiling. A larger demand only extends
    the grid (each grid is a prefix of the next)."""
    ceiling = max(16, math.ceil(BUFFER_SHARE * largest_demand) + gpus_per_node)
    grid = list(range(0, 17)) + list(range(18, 33, 2)) + list(range(36, 65, 4)) + list(range(72, 129, 8))
    while grid[-1] < ceiling:
        grid.append(8 * math.ceil(grid[-1] * 1.25 / 8))
    return [gpus for gpus in grid if gpus <= ceiling]


@dataclass(frozen=True)
class DeadBand:
    """The placeholder HPA's tolerances (KEP-4951; the simulator's ``hpa.Tolerance`` is one): it keeps
    its count while the served value over the count is within ``[1 - scale_down, 1 + scale_up]``. A
    constant buffer inside that band of the count a buffer holds now is never reached: the count, and
    the capacity, stay the current buffer's."""

    scale_up: float
    scale_down: float

    def within(self, usage_ratio: float) -> bool:
        """The controller's ``Tolerances.isWithin``: keep the count while
        ``1 - scaleDown <= ratio <= 1 + scaleUp``. A ratio of exactly 1 + 0.1 is within (the older
        ``|1 - ratio| > 0.1`` scaled there, float64 putting it just above); NaN is never within."""
        return (1.0 - self.scale_down) <= usage_ratio <= (1.0 + self.scale_up)

    def keeps(self, count: int, served: int) -> bool:
        """Whether ``count`` placeholders (of one GPU) stay when ``served`` GPUs are served."""
        return count > 0 and self.within(served / count)


@dataclass(frozen=True)
class Buffer:
    """A buffer candidate: its GPUs, and whether it serves them unchanged at every step (no windows
    due are added to it, so nothing but a new choice moves the HPA's count)."""

    gpus: int
    constant: bool


def unreached(current: str | None, buffers: Mapping[str, Buffer], band: DeadBand | None) -> frozenset[str]:
    """The constant buffers the HPA would not move to from the count ``current`` (a buffer) holds:
    choosing one would keep serving the current count, at the current buffer's cost, not its own."""
    held = buffers.get(current) if current is not None else None
    if band is None or held is None:
        return frozenset()
    return frozenset(
        text
        for text, buffer in buffers.items()
        if buffer.constant and buffer.gpus != held.gpus and band.keeps(held.gpus, buffer.gpus)
    )


@dataclass(frozen=True)
class Choice:
    """One decision: ``candidate`` is served from ``start_s`` to ``end_s``."""

    start_s: float
    end_s: float
    candidate: str
    asked: float  # the level asked of the past (the target, or the calibrated level)
    met_in_window: bool  # the candidate met the level asked over the window before


class LedgerPrefix:
    """One candidate's ledger as prefix sums, so that any window's figures cost O(log n).

    The GPU-seconds short are summed over the minutes with any (a compact ledger keeps only those):
    adding a minute's zero leaves a sum as it was, so each window's sum is the dense prefix sums'
    to the bit. Held GPU-seconds are summed over every minute."""

    def __init__(self, ledger: ShortAndHeld) -> None:
        self.starts = ledger.starts
        if isinstance(ledger, CandidateLedger):
            short_at, short_values = ledger.short_at, ledger.short_values
        else:
            dense = ledger.short_gpu_seconds
            short_at = np.flatnonzero(dense)
            short_values = dense[short_at]
        self._short_at = short_at
        self._short_sums = np.concatenate([[0.0], np.cumsum(short_values)])
        # The minutes counted short, as scorecard.short_figures counts them.
        self._counted_at = short_at[short_values > 1e-6]
        self.held = np.concatenate([[0.0], np.cumsum(ledger.held_gpu_seconds)])
        self._next_clear: np.ndarray | None = None

    @property
    def next_clear(self) -> np.ndarray:
        """For each minute, the first minute from it on with no GPU short (len when none is): made
        when a window start delay target first asks (of ~100 candidates, a tenth of a choice)."""
        if self._next_clear is None:
            short = np.zeros(len(self.starts), dtype=bool)
            short[self._counted_at] = True
            clear_at = np.where(short, len(short), np.arange(len(short)))
            self._next_clear = np.minimum.accumulate(clear_at[::-1])[::-1] if len(short) else clear_at
        return self._next_clear

    def window(self, start_s: float, end_s: float) -> tuple[ShortFigures, float]:
        first = int(np.searchsorted(self.starts, start_s, side="left"))
        last = int(np.searchsorted(self.starts, end_s, side="left"))
        short_from, short_to = np.searchsorted(self._short_at, (first, last), side="left").tolist()
        counted_from, counted_to = np.searchsorted(self._counted_at, (first, last), side="left").tolist()
        figures = ShortFigures(
            short_gpu_minutes=float(self._short_sums[short_to] - self._short_sums[short_from]) / 60.0,
            minutes_short=counted_to - counted_from,
            minutes_scored=last - first,
        )
        return figures, float(self.held[last] - self.held[first])

    def window_start_delays(self, window_starts: np.ndarray) -> np.ndarray:
        """For each window run starting at these times, the seconds until capacity covered every GPU
        requested (the start of the first minute from its start on with none short, the ledger's
        end when none is): on a ledger of fluid demand, how long its pods waited for capacity. A
        window that starts in a minute with nothing short waited 0 s."""
        if not len(self.starts):
            return np.zeros(0)
        starts = np.asarray(window_starts, dtype=np.float64)
        minute = np.searchsorted(self.starts, starts, side="right") - 1
        starts, minute = starts[minute >= 0], minute[minute >= 0]
        clear = self.next_clear[minute]
        end = self.starts[-1] + 60.0
        clear_s = np.where(clear < len(self.starts), self.starts[np.minimum(clear, len(self.starts) - 1)], end)
        return np.asarray(np.maximum(clear_s - starts, 0.0), dtype=np.float64)

    def attained(self, target: ServiceTarget, start_s: float, end_s: float, window_starts: np.ndarray) -> float | None:
        """The figure ``target`` is stated on over ``[start_s, end_s)``; window delays of the runs
        that started in it."""
        figures, _ = self.window(start_s, end_s)
        if target.kind != "window_start_delay_p95_s":
            return target.attained(figures)
        runs = window_starts[(window_starts >= start_s) & (window_starts < end_s)]
        return target.attained(figures, wait_figures(self.window_start_delays(runs)))


def judge(
    prefixes: Mapping[str, LedgerPrefix],
    target: ServiceTarget,
    start_s: float,
    end_s: float,
    window_starts: np.ndarray = _NO_WINDOWS,
) -> list[tuple[str, float, float]]:
    """Each candidate's (text, what it attained over ``[start_s, end_s)``, infinite when nothing can
    be judged, held GPU-seconds), in order."""
    judged = []
    for text, prefix in prefixes.items():
        _, held = prefix.window(start_s, end_s)
        attained = prefix.attained(target, start_s, end_s, window_starts)
        judged.append((text, math.inf if attained is None else attained, held))
    return judged


def choose(
    prefixes: Mapping[str, LedgerPrefix],
    target: ServiceTarget,
    asked: float,
    window_start_s: float,
    now_s: float,
    window_starts: np.ndarray = _NO_WINDOWS,
    *,
    forecasts: Collection[str] = (),
    forecast_margin: float = 0.0,
    unreachable: Collection[str] = (),
) -> tuple[str, bool, float]:
    """The candidate to serve from ``now_s``, judged over ``[window_start_s, now_s)``: the cheapest
    (fewest held GPU-seconds) that met the level asked, where a candidate in ``forecasts`` beats the
    cheapest other one that met only when it held ``forecast_margin`` fewer GPU-seconds; if none
    met, the one that came closest (of equals, the cheapest). Ties go to the first in order. Also
    whether it met the level, and what it attained (infinite when the window holds nothing to judge:
    no minute, or for a window start delay target, no window run). Candidates in ``unreachable``
    (:func:`unreached`) are not chosen."""
    judged = judge(
        {text: prefix for text, prefix in prefixes.items() if text not in unreachable},
        target,
        window_start_s,
        now_s,
        window_starts,
    )
    met = [entry for entry in judged if entry[1] <= asked + 1e-12]
    if not met:
        text, attained, _ = min(judged, key=lambda entry: (entry[1], entry[2]))
        return text, False, attained
    text, attained, held = min(met, key=lambda entry: entry[2])
    buffers = [entry for entry in met if entry[0] not in forecasts]
    if text in forecasts and buffers:
        buffer = min(buffers, key=lambda entry: entry[2])
        if held > buffer[2] * (1.0 - forecast_margin):
            text, attained, held = buffer
    return text, True, attained


# choose's signature: (prefixes, target, asked, judged from, now, window run starts) -> choice.
Chooser = Callable[
    [Mapping[str, LedgerPrefix], ServiceTarget, float, float, float, np.ndarray], tuple[str, bool, float]
]


def calibrated(asked: float, target: ServiceTarget, attained: float, settings: TuningSettings) -> float:
    """The level to ask next: lower after a period short of the target, higher after one within it."""
    moved = asked + settings.gain * (target.value - attained)
    return min(max(moved, settings.floor * target.value), settings.ceiling * target.value)


def prefixes_of(candidates: Mapping[str, ShortAndHeld]) -> dict[str, LedgerPrefix]:
    if not candidates:
        raise ValueError("walk-forward tuning needs at least one candidate")
    return {text: LedgerPrefix(ledger) for text, ledger in candidates.items()}


def walk_forward(
    candidates: Mapping[str, MinuteLedger],
    target: ServiceTarget,
    decisions_from_s: float,
    end_s: float,
    settings: TuningSettings,
    *,
    calibrate: bool,
    history_from_s: float,
    window_starts: np.ndarray = _NO_WINDOWS,
    forecasts: Collection[str] = (),
    chooser: Chooser | None = None,
    buffers: Mapping[str, Buffer] | None = None,
    band: DeadBand | None = None,
) -> list[Choice]:
    """The choice for each period of ``settings.every_s`` from ``decisions_from_s`` to ``end_s``, each
    judged over ``[max(history_from_s, now - window), now)`` (:func:`choose`, ``forecasts`` the
    candidates held to ``settings.forecast_margin``; ``window_starts``: the window runs' start
    times, for a window start delay target). Calibrating, the level asked moves after each period by
    what the chosen candidate attained in it. ``chooser`` replaces :func:`choose`
    (benchmarks/slo_rules.py compares rules on the same candidates). With ``buffers`` and the
    placeholder HPA's ``band``, a constant buffer the HPA would not move to from the buffer served
    is not chosen (:func:`unreached`)."""
    prefixes = prefixes_of(candidates)
    asked = target.value
    choices: list[Choice] = []
    now = decisions_from_s
    watch = ShiftWatch(judged_from_s=history_from_s)
    while now < end_s:
        following = min(now + settings.every_s, end_s)
        judged_from_s = max(watch.judged_from_s, now - settings.window_s)
        current = choices[-1].candidate if choices else None
        pick = chooser or partial(
            choose,
            forecasts=frozenset(forecasts),
            forecast_margin=settings.forecast_margin,
            unreachable=unreached(current, buffers or {}, band),
        )
        text, met, _ = pick(prefixes, target, asked, judged_from_s, now, window_starts)
        choices.append(Choice(now, following, text, asked, met))
        if calibrate:
            attained = prefixes[text].attained(target, now, following, window_starts)
            if attained is not None:
                asked = calibrated(asked, target, attained, settings)
            watch = watch.after(now, attained, target, settings)
        now = following
    return choices


def stitched_metric(
    choices: list[Choice], metrics: Mapping[str, np.ndarray], step_s: float, first_step: int
) -> np.ndarray:
    """The served metric of a tuned policy: each choice's candidate metric over its period. Before the
    first decision (the settling run before scoring) it serves its first choice."""
    steps = len(next(iter(metrics.values())))
    out = np.zeros(steps)
    for index, choice in enumerate(choices):
        begin = first_step if index == 0 else math.ceil(choice.start_s / step_s)
        end = steps if index == len(choices) - 1 else math.ceil(choice.end_s / step_s)
        out[begin:end] = metrics[choice.candidate][begin:end]
    return out


@dataclass(frozen=True)
class ReplayRequest:
    """What a worker replays: demand per step and each level's served headroom per step, on a pool
    whose launches take ``lead_time_s``, or, once its NodeClaims taught them, as ``launches`` say."""

    step_s: float
    requested: np.ndarray
    headroom: dict[str, np.ndarray]  # by level, as text ("0.95")
    lead_time_s: float
    gpus_per_node: int
    consolidate_after_s: float = 600.0
    start_s: float = 0.0  # the time of the first step (the ledgers returned count from it)
    # The placeholder HPA's behavior tolerances, as manifests/examples ships it.
    hpa_tolerance_up: float = 0.0
    hpa_tolerance_down: float = 0.05
    # The pool's learned lead times and failed launches (autoscaler/targets/launches.py); None: a
    # fixed ``lead_time_s`` and no failed launch.
    launches: LearnedLaunches | None = None


# The simulator's controller model over each level's headroom (autoscaler/simulation/replay.py):
# injected, since the core sits below the simulator.
ReplayFunction = Callable[[ReplayRequest], dict[str, CandidateLedger]]
# A pool's live minute ledger (autoscaler/scorecard/live.py), None where this replica does not score it.
LiveLedgerFunction = Callable[[str], MinuteLedger | None]
