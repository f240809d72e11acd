"""Serving a headroom metric to a service-level target: what to serve is chosen, not guessed.

For a metric with a ``target``, every refresh decides the headroom at each candidate level
(:data:`CANDIDATE_LEVELS`, through the one policy path, ``policy.decide``) and records it with the
GPUs requested at that moment and the GPUs of declared windows due within the lead time. Every
``tune_every`` (a day by default), once a day of that record exists, each candidate is replayed
against the demand that followed through the simulator's controller model (placeholder HPA and the
node pool its NodeClaims taught, :mod:`autoscaler.targets.launches`; a worker process runs it): the
levels' recorded headroom, and the operator's static buffers (:func:`service_levels.buffer_grid`)
each with the windows due and, once the record holds a window, each without them. The cheapest
candidate that met the target over the past ``tune_window`` is served until the next choice
(:func:`service_levels.choose`, the simulator's ``auto-slo``; a level only when clearly cheaper than
every buffer that met). The level asked of the past is calibrated by what the candidate served
attained since the last choice: down after a miss, back up after a period within the target.

Until the first choice, :data:`FIRST_LEVEL` is served. The record and the choice are saved in the
state directory (:mod:`autoscaler.targets.target_store`) and carry on across a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

import numpy as np

from autoscaler.scorecard.figures import MinuteLedger, ServiceTarget
from autoscaler.targets.candidate_ledgers import CandidateLedger
from autoscaler.targets.candidates import (
    BUFFER_PREFIX,
    CANDIDATE_LEVELS,
    FIRST_LEVEL,
    PLAIN_BUFFER_PREFIX,
    buffer_of,
    buffer_text,
    describe,
    level_text,
)
from autoscaler.targets.launches import ReplayedPool
from autoscaler.targets.reasons import covered, figure, margin_note, shift_note, unreached_note
from autoscaler.targets.records import Record
from autoscaler.targets.service_levels import (
    Buffer,
    DeadBand,
    LedgerPrefix,
    ReplayFunction,
    ReplayRequest,
    buffer_grid,
    calibrated,
    choose,
    prefixes_of,
    unreached,
)
from autoscaler.targets.shift_watch import ShiftWatch
from autoscaler.targets.target_store import TunerState
from autoscaler.targets.tuning import TuningSettings

log = logging.getLogger(__name__)
__all__ = ["CANDIDATE_LEVELS", "FIRST_LEVEL", "LevelTuner", "RunInWorker", "describe"]

# A choice needs at least this much record behind it.
MIN_RECORD_S = 86400.0
# Each choice replays only the record since the last replay, from this long before it: the pool's
# state (placeholders, stabilisation, empty nodes) settles within minutes, so the older days'
# ledgers are kept rather than replayed again (a week's replay of 8 levels is seconds of CPU).
REPLAY_SETTLE_S = 3600.0
# The buffer grid is sized on this multiple of the largest demand recorded; a demand past it sizes the
# grid again, and the whole record is replayed once (the new buffers have no ledgers).
GRID_MARGIN = 1.5
# More refreshes than this missed in a row (the service was down) and the minutes after are not judged.
RECORD_GAP_STEPS = 5


# (series key, function, request, timeout in seconds) -> the function's result, run in a worker.
RunInWorker = Callable[[object, ReplayFunction, ReplayRequest, float], Awaitable[dict[str, CandidateLedger]]]


class LevelTuner:
    """One (metric, series) served to a target: its record, and the candidate it serves."""

    def __init__(
        self, target: ServiceTarget, tuning: TuningSettings, gpus_per_node: int, step_s: float, pool: str = ""
    ) -> None:
        self.target = target
        self.pool = pool  # whose live scorecard calibrates it
        self.tuning = tuning
        self.gpus_per_node = gpus_per_node
        self.step_s = step_s
        self.chosen = level_text(FIRST_LEVEL)
        self.asked = target.value
        self.chosen_at: float | None = None
        self.reason = f"no choice yet: p{FIRST_LEVEL * 100:g} until a day of record exists"
        self.replay_attained: float | None = None  # the chosen one's, in the replay over the tune window
        self.shift = ShiftWatch()  # where the judged past starts after a level shift
        # Per refresh: GPUs requested, GPUs of windows due within the lead time, each level's headroom.
        self._record = Record(int((tuning.window_s + tuning.every_s) / step_s) + 1)
        self._lead_time_s = 0.0
        self.pool_replayed = ReplayedPool()
        self._grid_basis: float | None = None  # the demand the buffer grid is sized on
        # Buffers without the windows due are candidates once the record holds a window due.
        self._plain_buffers = False
        # Start times of the declared window runs seen (a window start delay target judges them).
        self._window_starts: set[float] = set()
        # Each candidate's replayed ledger (times in seconds since the epoch) up to ``_replayed_to``.
        self._ledgers: dict[str, CandidateLedger] = {}
        self._replayed_to: float | None = None

    @property
    def level(self) -> float | None:
        """The quantile level served; None while a buffer is."""
        return None if self.chosen.startswith((BUFFER_PREFIX, PLAIN_BUFFER_PREFIX)) else float(self.chosen)

    @property
    def buffer_gpus(self) -> int | None:
        """The buffer served; None while a level is."""
        buffer = buffer_of(self.chosen)
        return None if buffer is None else buffer[0]

    @property
    def buffer_windows(self) -> bool:
        """Whether the buffer served holds the windows due."""
        return not self.chosen.startswith(PLAIN_BUFFER_PREFIX)

    def state(self, metric: str, key: object, record: bool = True) -> TunerState:
        """What to save (``record``: with the record, by reference) or to publish (the choice alone)."""
        return TunerState(
            metric, key, self.target, self.gpus_per_node, self.step_s, self.chosen, self.asked, self.chosen_at,
            self.reason, self._lead_time_s, self._plain_buffers, tuple(sorted(self._window_starts)),
            tuple(self._record.times().tolist()) if record else (), self._record.rows() if record else (),
            self.shift,
        )  # fmt: skip

    def resume(self, state: TunerState) -> None:
        """Carry on from a saved state; its candidates' ledgers are rebuilt by replaying it all once."""
        self.chosen, self.asked, self.chosen_at, self.reason = state.chosen, state.asked, state.chosen_at, state.reason
        for time_s, row in zip(state.times, state.rows, strict=True):
            self._record.append(time_s, row)
        self._lead_time_s, self._plain_buffers = state.lead_time_s, state.plain_buffers
        self._window_starts = set(state.window_starts)
        self.shift = state.shift

    def record(
        self,
        now_s: float,
        requested: float,
        headroom: Sequence[float],
        lead_time_s: float,
        due_gpus: float = 0.0,
        window_starts: Sequence[float] = (),
    ) -> None:
        if len(self._record) and now_s <= self._record.last_time:
            return  # a repeated or earlier refresh adds nothing
        self._record.append(now_s, np.array([requested, due_gpus, *headroom], dtype=np.float64))
        self._lead_time_s = lead_time_s
        self._window_starts.update(window_starts)
        if due_gpus > 0 and not self._plain_buffers:  # the first window due: replay all with them
            self._plain_buffers = True
            self._ledgers, self._replayed_to = {}, None
        if self._record.full:  # the record's oldest moment moves on
            self._window_starts = {start for start in self._window_starts if start >= self._record.first_time}

    def due(self, now_s: float) -> bool:
        if not len(self._record) or now_s - self._record.first_time < MIN_RECORD_S:
            return False
        return self.chosen_at is None or now_s - self.chosen_at >= self.tuning.every_s

    def buffers(self) -> list[int]:
        """The buffer grid, sized on the largest demand recorded (with a margin). When demand
        outgrows it, the grid grows and the whole record is replayed again."""
        largest = self._record.highest(0)
        if self._grid_basis is None or largest > self._grid_basis:
            before = buffer_grid(self._grid_basis, self.gpus_per_node) if self._grid_basis is not None else None
            self._grid_basis = GRID_MARGIN * largest
            if before is not None and buffer_grid(self._grid_basis, self.gpus_per_node) != before:
                self._ledgers, self._replayed_to = {}, None
        return buffer_grid(self._grid_basis, self.gpus_per_node)

    def replay_request(self) -> ReplayRequest:
        """The record not replayed yet (from a settling hour before it) on a regular grid of
        ``step_s``, for every level and buffer (and, once the record holds a window due, every buffer
        without the windows: the whole record is replayed once for them); a missed refresh carries
        the last values (minutes past ``RECORD_GAP_STEPS`` missed ones are not judged)."""
        if self._replayed_to is not None and self.pool_replayed.moved():
            self._ledgers, self._replayed_to = {}, None
        buffers = self.buffers()
        times = self._record.times()
        first = times[0] if self._replayed_to is None else max(times[0], self._replayed_to - REPLAY_SETTLE_S)
        grid = np.arange(first, times[-1] + self.step_s / 2, self.step_s)
        rows = self._record.rows()[np.searchsorted(times, grid, side="right") - 1]
        headroom = {level_text(level): rows[:, 2 + index] for index, level in enumerate(CANDIDATE_LEVELS)}
        headroom.update({buffer_text(gpus): gpus + rows[:, 1] for gpus in buffers})
        if self._plain_buffers:
            headroom.update({buffer_text(gpus, False): np.full(len(rows), float(gpus)) for gpus in buffers})
        return ReplayRequest(
            step_s=self.step_s,
            requested=rows[:, 0],
            headroom=headroom,
            lead_time_s=self._lead_time_s,
            gpus_per_node=self.gpus_per_node,
            start_s=float(grid[0]),
            hpa_tolerance_up=self.tuning.hpa_tolerance_up,
            hpa_tolerance_down=self.tuning.hpa_tolerance_down,
            launches=self.pool_replayed.launches,
        )

    def _extend(self, request: ReplayRequest, replayed: Mapping[str, CandidateLedger]) -> None:
        """The new replay's minutes (past its settling part) after those kept; older than the window
        and a period are dropped. Candidates replayed together keep one array of minute starts."""
        keep_from = self._replayed_to if self._replayed_to is not None else request.start_s
        oldest = request.start_s + len(request.requested) * request.step_s - self.tuning.window_s - self.tuning.every_s
        times = self._record.times()
        # By (the replay's starts, the kept ones), the same for every candidate replayed together:
        # which new minutes are kept and their starts, how many of the oldest are dropped, the starts
        # of all those kept (and both arrays they were made from, so that their ids name them while
        # this runs).
        minutes: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, int, np.ndarray, tuple[np.ndarray, ...]]] = {}
        nothing = CandidateLedger.of(np.zeros(0), np.zeros(0), np.zeros(0))
        for candidate, ledger in replayed.items():
            kept = self._ledgers.get(candidate)
            made_from = (ledger.starts,) if kept is None else (ledger.starts, kept.starts)
            key = (id(ledger.starts), id(kept.starts) if kept is not None else 0)
            if key not in minutes:
                starts = ledger.starts + request.start_s
                new = (starts >= keep_from) & self._recorded(starts, times)
                joined = np.concatenate([*made_from[1:], starts[new]])
                dropped = int(np.searchsorted(joined, oldest, side="left"))
                minutes[key] = (new, starts[new], dropped, joined[dropped:].copy(), made_from)
            new, added_starts, dropped, joined, _ = minutes[key]
            added = CandidateLedger.of(added_starts, ledger.short_gpu_seconds[new], ledger.held_gpu_seconds[new])
            self._ledgers[candidate] = (kept if kept is not None else nothing).then(added, joined, dropped)
        self._replayed_to = request.start_s + len(request.requested) * request.step_s
        self.pool_replayed.replayed_with = request.launches

    def _buffers(self, candidates: Iterable[str]) -> dict[str, Buffer]:
        """The buffers among ``candidates``: those without the windows are constant, and so are those
        with them while the record holds no window due."""
        buffers = {}
        for text in candidates:
            buffer = buffer_of(text)
            if buffer is not None:
                gpus, with_windows = buffer
                buffers[text] = Buffer(gpus, constant=not (with_windows and self._plain_buffers))
        return buffers

    def _recorded(self, starts: np.ndarray, times: np.ndarray) -> np.ndarray:
        """Which minutes the record (``times``) covers: not past ``RECORD_GAP_STEPS`` refreshes without
        one. The grid carries the last values over a gap: an outage would be judged as flat demand."""
        last = times[np.maximum(np.searchsorted(times, starts, side="right") - 1, 0)]
        return np.asarray(starts - last <= RECORD_GAP_STEPS * self.step_s)

    def take(
        self,
        now_s: float,
        replayed: Mapping[str, CandidateLedger],
        request: ReplayRequest,
        live: MinuteLedger | None = None,
    ) -> None:
        """Calibrate on what the candidate served attained since the last choice (in the pool's live
        scorecard when it covers most of that period, else in the replay), then choose again."""
        self._extend(request, replayed)
        prefixes = prefixes_of(self._ledgers)
        window_starts = np.asarray(sorted(self._window_starts), dtype=np.float64)
        live_prefix = LedgerPrefix(live) if live is not None and len(live) else None
        if self.chosen_at is not None:
            attained = covered(live_prefix, self.target, self.chosen_at, now_s, window_starts)
            if attained is None and self.chosen in prefixes:
                attained = prefixes[self.chosen].attained(self.target, self.chosen_at, now_s, window_starts)
            if attained is not None:
                self.asked = calibrated(self.asked, self.target, attained, self.tuning)
            self.shift = self.shift.after(self.chosen_at, attained, self.target, self.tuning)
        window_start = max(self._record.first_time, now_s - self.tuning.window_s, self.shift.judged_from_s)
        so_far = covered(live_prefix, self.target, window_start, now_s, window_starts)
        levels = {level_text(level) for level in CANDIDATE_LEVELS}
        served_gpus = self.buffer_gpus
        band = DeadBand(request.hpa_tolerance_up, request.hpa_tolerance_down)
        unreachable = unreached(self.chosen, self._buffers(prefixes), band)
        chosen, met, attained = choose(
            prefixes,
            self.target,
            self.asked,
            window_start,
            now_s,
            window_starts,
            forecasts=levels,
            forecast_margin=self.tuning.forecast_margin,
            unreachable=unreachable,
        )
        self.chosen, self.chosen_at, self.replay_attained = chosen, now_s, attained
        days = (now_s - window_start) / 86400.0
        outcome = "met" if met else "came closest to"
        self.reason = (
            f"chosen by replaying {len(CANDIDATE_LEVELS)} levels and {len(prefixes) - len(CANDIDATE_LEVELS)} "
            f"buffers over the last {days:.1f} days: {describe(chosen)} {outcome} the level asked "
            f"({figure(self.target, self.asked)}) with {figure(self.target, attained)}, at least cost"
            + (margin_note(self.tuning.forecast_margin) if met else "")
            + unreached_note(unreachable, served_gpus)
            + self.pool_replayed.note(request.lead_time_s)
            + shift_note(self.shift, window_start, self.target, self.tuning)
            + ("" if so_far is None else f"; live: {figure(self.target, so_far)} in the pool's scorecard")
        )
