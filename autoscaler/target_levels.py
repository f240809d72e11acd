"""Serving a headroom metric to a service-level target: the quantile level is chosen, not guessed.

For a metric with a ``target``, every refresh decides the headroom at each candidate level
(:data:`CANDIDATE_LEVELS`, through the one policy path, ``policy.decide``) and records it with the
GPUs requested at that moment. Every ``tune_every`` (a day by default), once a day of that record
exists, each level's recorded headroom is replayed against the demand that followed through the
simulator's controller model (placeholder HPA and node pool; a worker process runs it) and the
cheapest level that met the target over the past ``tune_window`` is served until the next choice
(:func:`autoscaler.service_levels.choose`, the simulator's ``auto-slo``). The level asked of the
past is calibrated by what the level served attained since the last choice: down after a miss,
back up after a period within the target.

Until the first choice, :data:`FIRST_LEVEL` is served. The record lives in memory: after a restart
it starts again (docs/service-levels.md).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

import numpy as np

from autoscaler import policy
from autoscaler.plans import MetricPlan
from autoscaler.scorecard import MinuteLedger, ServiceTarget
from autoscaler.service_levels import ReplayFunction, ReplayRequest, TuningSettings, calibrated, choose, prefixes_of

log = logging.getLogger(__name__)

# Finer where targets are met (0.95 and up), up to 0.999: with 0.995 the highest, a 0.3 % target on the
# DLRM trace chose the top level 14 days of 24 and missed (docs/service-levels.md).
CANDIDATE_LEVELS: tuple[float, ...] = (0.6, 0.7, 0.8, 0.9, 0.95, 0.97, 0.98, 0.985, 0.99, 0.995, 0.999)
FIRST_LEVEL = 0.95
# A choice needs at least this much record behind it.
MIN_RECORD_S = 86400.0
# Each choice replays only the record since the last replay, from this long before it: the pool's
# state (placeholders, stabilisation, empty nodes) settles within minutes, so the older days'
# ledgers are kept rather than replayed again (a week's replay of 8 levels is seconds of CPU).
REPLAY_SETTLE_S = 3600.0


# (series key, function, request, timeout in seconds) -> the function's result, run in a worker.
RunInWorker = Callable[[object, ReplayFunction, ReplayRequest, float], Awaitable[dict[str, MinuteLedger]]]


def level_text(level: float) -> str:
    return f"{level:g}"


class LevelTuner:
    """One (metric, series) served to a target: its record, and the level it serves."""

    def __init__(self, target: ServiceTarget, tuning: TuningSettings, gpus_per_node: int, step_s: float) -> None:
        self.target = target
        self.tuning = tuning
        self.gpus_per_node = gpus_per_node
        self.step_s = step_s
        self.level = FIRST_LEVEL
        self.asked = target.value
        self.chosen_at: float | None = None
        self.reason = f"no choice yet: p{FIRST_LEVEL * 100:g} until a day of record exists"
        capacity = int((tuning.window_s + tuning.every_s) / step_s) + 1
        self._times: deque[float] = deque(maxlen=capacity)
        self._requested: deque[float] = deque(maxlen=capacity)
        self._headroom: deque[tuple[float, ...]] = deque(maxlen=capacity)
        self._lead_time_s = 0.0
        # Each level's replayed ledger (times in seconds since the epoch) up to ``_replayed_to``.
        self._ledgers: dict[str, MinuteLedger] = {}
        self._replayed_to: float | None = None

    def record(self, now_s: float, requested: float, headroom: Sequence[float], lead_time_s: float) -> None:
        if self._times and now_s <= self._times[-1]:
            return  # a repeated or earlier refresh adds nothing
        self._times.append(now_s)
        self._requested.append(requested)
        self._headroom.append(tuple(headroom))
        self._lead_time_s = lead_time_s

    def due(self, now_s: float) -> bool:
        if not self._times or now_s - self._times[0] < MIN_RECORD_S:
            return False
        return self.chosen_at is None or now_s - self.chosen_at >= self.tuning.every_s

    def replay_request(self) -> ReplayRequest:
        """The record not replayed yet (from a settling hour before it) on a regular grid of
        ``step_s``; a missed refresh carries the last values."""
        times = np.asarray(self._times)
        first = times[0] if self._replayed_to is None else max(times[0], self._replayed_to - REPLAY_SETTLE_S)
        grid = np.arange(first, times[-1] + self.step_s / 2, self.step_s)
        rows = np.searchsorted(times, grid, side="right") - 1
        headroom = np.asarray(self._headroom)[rows]
        return ReplayRequest(
            step_s=self.step_s,
            requested=np.asarray(self._requested)[rows],
            headroom={level_text(level): headroom[:, index] for index, level in enumerate(CANDIDATE_LEVELS)},
            lead_time_s=self._lead_time_s,
            gpus_per_node=self.gpus_per_node,
            start_s=float(grid[0]),
        )

    def _extend(self, request: ReplayRequest, replayed: dict[str, MinuteLedger]) -> None:
        """The new replay's minutes (past its settling part) after those kept; older than the window
        and a period are dropped."""
        keep_from = self._replayed_to if self._replayed_to is not None else request.start_s
        oldest = request.start_s + len(request.requested) * request.step_s - self.tuning.window_s - self.tuning.every_s
        for level, ledger in replayed.items():
            shifted = MinuteLedger(
                ledger.starts + request.start_s,
                ledger.short_gpu_seconds,
                ledger.held_gpu_seconds,
                ledger.used_gpu_seconds,
            ).between(keep_from, np.inf)
            kept = self._ledgers.get(level)
            if kept is not None:
                shifted = MinuteLedger(
                    *(np.concatenate([old, new]) for old, new in zip(_arrays(kept), _arrays(shifted), strict=True))
                )
            self._ledgers[level] = shifted.between(oldest, np.inf)
        self._replayed_to = request.start_s + len(request.requested) * request.step_s

    def take(self, now_s: float, replayed: dict[str, MinuteLedger], request: ReplayRequest) -> None:
        """Calibrate on what the level served attained since the last choice, then choose again."""
        self._extend(request, replayed)
        prefixes = prefixes_of(self._ledgers)
        served = level_text(self.level)
        if self.chosen_at is not None and served in prefixes:
            figures, _ = prefixes[served].window(self.chosen_at, now_s)
            attained = self.target.attained(figures)
            if attained is not None:
                self.asked = calibrated(self.asked, self.target, attained, self.tuning)
        window_start = max(self._times[0], now_s - self.tuning.window_s)
        chosen, met, attained = choose(prefixes, self.target, self.asked, window_start, now_s)
        self.level, self.chosen_at = float(chosen), now_s
        days = (now_s - window_start) / 86400.0
        outcome = "met" if met else "came closest to"
        self.reason = (
            f"chosen by replaying {len(prefixes)} levels over the last {days:.1f} days: p{self.level * 100:g} "
            f"{outcome} {self.asked * 100:.2g} % asked, with {attained * 100:.2g} % "
            "of minutes short, at least cost"
        )


def _arrays(ledger: MinuteLedger) -> tuple[np.ndarray, ...]:
    return (ledger.starts, ledger.short_gpu_seconds, ledger.held_gpu_seconds, ledger.used_gpu_seconds)


class TargetLevels:
    """The tuners of every (metric, series) with a target; plans without one pass straight through."""

    def __init__(self, replay: ReplayFunction | None, step_s: float) -> None:
        self.replay = replay
        self.step_s = step_s
        self._tuners: dict[tuple[str, object], LevelTuner] = {}

    def levels(self, plan: MetricPlan) -> tuple[float, ...]:
        """The quantiles a plan needs forecast."""
        return CANDIDATE_LEVELS if plan.target is not None and self.replay is not None else (plan.quantile,)

    def level(self, plan: MetricPlan, key: object) -> float:
        tuner = self._tuners.get((plan.metric, key))
        return plan.quantile if tuner is None else tuner.level

    def decide(
        self, plan: MetricPlan, key: object, situation: policy.Situation, now_s: float
    ) -> policy.Decision | None:
        """The plan's decision; with a target, at the tuned level (every level's is recorded)."""
        if plan.target is None or self.replay is None:
            return policy.decide(plan.rule, situation)
        tuner = self._tuners.get((plan.metric, key))
        if tuner is None:
            tuner = LevelTuner(plan.target, plan.tuning, plan.target_gpus_per_node, self.step_s)
            self._tuners[(plan.metric, key)] = tuner
        decisions = [policy.decide(replace(plan.rule, quantile=level), situation) for level in CANDIDATE_LEVELS]
        served = decisions[CANDIDATE_LEVELS.index(tuner.level)]
        if served is None:
            return None
        values = [decision.value if decision is not None else np.nan for decision in decisions]
        if all(np.isfinite(values)) and np.isfinite(situation.requested_now):
            tuner.record(now_s, situation.requested_now, values, situation.lead_time.value.total_seconds())
        explanation = f"{served.explanation}; target: {plan.target.describe()}: p{tuner.level * 100:g} ({tuner.reason})"
        return replace(served, explanation=explanation)

    def forget(self, key: object) -> None:
        for tuner_key in [tuner_key for tuner_key in self._tuners if tuner_key[1] == key]:
            del self._tuners[tuner_key]

    async def tune_due(self, now_s: float, run: RunInWorker, timeout_s: float) -> None:
        """Replay and choose again for every tuner that is due; a failed replay keeps the level."""
        if self.replay is None:
            return
        for (metric, key), tuner in list(self._tuners.items()):
            if not tuner.due(now_s):
                continue
            request = tuner.replay_request()
            try:
                ledgers = await run(key, self.replay, request, timeout_s)
            except Exception as error:  # a failing replay must not stop the refresh
                log.warning("%s: replaying the target's levels failed (%s); keeping p%g", metric, error, tuner.level)
                tuner.chosen_at = now_s  # tried again at the next period, not every refresh
                continue
            tuner.take(now_s, ledgers, request)
            log.info("%s%s: target %s: %s", metric, key, tuner.target.describe(), tuner.reason)
