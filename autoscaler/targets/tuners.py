"""Every (metric, series) a refresh serves to a target, each with its tuner (:class:`LevelTuner`,
``targets.target_levels``): created on the first decision (resumed from a saved or published state
when one fits), recorded at each refresh, and replayed and chosen again when due."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

import numpy as np

from adapters.types import QUEUED_SOURCE
from autoscaler import policy
from autoscaler.targets.candidates import CANDIDATE_LEVELS, describe
from autoscaler.targets.launches import LearnedLaunchesFunction
from autoscaler.targets.plans import MetricPlan
from autoscaler.targets.service_levels import LiveLedgerFunction, ReplayFunction
from autoscaler.targets.target_levels import LevelTuner, RunInWorker
from autoscaler.targets.target_store import TunerState, choice_only, fits

log = logging.getLogger(__name__)
__all__ = ["TargetLevels"]


class TargetLevels:
    """The tuners of every (metric, series) with a target; plans without one pass straight through."""

    def __init__(
        self, replay: ReplayFunction | None, step_s: float, live_ledger: LiveLedgerFunction | None = None
    ) -> None:
        self.replay = replay
        self.step_s = step_s
        self.live_ledger = live_ledger
        self.learned_launches: LearnedLaunchesFunction | None = None  # the pool each replay runs (the refresher's)
        self._tuners: dict[tuple[str, object], LevelTuner] = {}
        self._saved: dict[tuple[str, object], TunerState] = {}  # restored, not yet claimed by a refresh
        self.saved_at: float | None = None  # when the records were last saved (monotonic seconds)

    def restore(self, states: Sequence[TunerState]) -> None:
        self._saved.update(((state.metric, state.series), state) for state in states)

    def states(self) -> list[TunerState]:
        """Every tuner's state to save, and the restored ones no refresh has claimed yet."""
        return [tuner.state(*key) for key, tuner in self._tuners.items()] + list(self._saved.values())

    def choices(self) -> dict[tuple[str, object], TunerState]:
        """What each tuner that has chosen serves, without its record: published for the next owner."""
        chosen = {
            key: tuner.state(*key, record=False) for key, tuner in self._tuners.items() if tuner.chosen_at is not None
        }
        unclaimed = {key: choice_only(state) for key, state in self._saved.items() if state.chosen_at is not None}
        return unclaimed | chosen

    def tuner(self, metric: str, key: object) -> LevelTuner | None:
        """The tuner of a (metric, series), to read what it serves (``targets.observed``); None without one."""
        return self._tuners.get((metric, key))

    def levels(self, plan: MetricPlan) -> tuple[float, ...]:
        """The quantiles a plan needs forecast."""
        return CANDIDATE_LEVELS if plan.target is not None and self.replay is not None else (plan.quantile,)

    def level(self, plan: MetricPlan, key: object) -> float:
        """The quantile level of the value served (the plan's own while a buffer is served: the
        forecast band drawn with it does not decide the value then)."""
        tuner = self._tuners.get((plan.metric, key))
        level = None if tuner is None else tuner.level
        return plan.quantile if level is None else level

    def decide(
        self, plan: MetricPlan, key: object, situation: policy.Situation, now_s: float, pool: str = ""
    ) -> policy.Decision | None:
        """The plan's decision; with a target, the tuned candidate's (every level's is recorded)."""
        if plan.target is None or self.replay is None:
            return policy.decide(plan.rule, situation)
        tuner = self._tuners.get((plan.metric, key))
        if tuner is None:
            tuner = LevelTuner(plan.target, plan.tuning, plan.target_gpus_per_node, self.step_s, pool)
            self._tuners[(plan.metric, key)] = tuner
            saved = self._saved.pop((plan.metric, key), None)
            if saved is not None and fits(saved, plan.target, plan.target_gpus_per_node, self.step_s):
                tuner.resume(saved)
            elif saved is not None:
                log.info(
                    "%s%s: the saved record was for another target or node size: it starts again", plan.metric, key
                )
        decisions = [policy.decide(replace(plan.rule, quantile=level), situation) for level in CANDIDATE_LEVELS]
        if tuner.level is not None:
            served = decisions[CANDIDATE_LEVELS.index(tuner.level)]
        else:
            served = policy.decide(plan.rule, situation, tuner.buffer_gpus, tuner.buffer_windows)
        if served is None:
            return None
        values = [decision.value if decision is not None else np.nan for decision in decisions]
        if all(np.isfinite(values)) and np.isfinite(situation.requested_now):
            self._record(tuner, situation, values, now_s)
        chosen = describe(tuner.chosen)
        explanation = f"{served.explanation}; target: {plan.target.describe()}: {chosen} ({tuner.reason})"
        return replace(served, explanation=explanation)

    def _record(self, tuner: LevelTuner, situation: policy.Situation, values: list[float], now_s: float) -> None:
        lead_time = situation.lead_time.value
        due = sum(window.gpus for window in policy.windows_due(situation.windows, situation.now, lead_time))
        # Window runs that start by the next refresh or just did (each is judged once, by its start);
        # demand queued now (Kueue) opens at every refresh and is no run.
        seen_from, seen_to = situation.now - timedelta(seconds=2 * self.step_s), situation.now + lead_time
        starts = [
            window.start.timestamp()
            for window in situation.windows
            if seen_from < window.start <= seen_to and window.source != QUEUED_SOURCE
        ]
        tuner.record(now_s, situation.requested_now, values, lead_time.total_seconds(), due, starts)

    def forget(self, key: object) -> None:
        for tuner_key in [tuner_key for tuner_key in self._tuners if tuner_key[1] == key]:
            del self._tuners[tuner_key]
        for tuner_key in [tuner_key for tuner_key in self._saved if tuner_key[1] == key]:
            del self._saved[tuner_key]

    async def tune_due(self, now_s: float, run: RunInWorker, timeout_s: float) -> None:
        """Replay and choose again for every tuner that is due; a failed replay keeps the candidate."""
        if self.replay is None:
            return
        for (metric, key), tuner in list(self._tuners.items()):
            if not tuner.due(now_s):
                continue
            tuner.pool_replayed.launches = self.learned_launches(tuner.pool) if self.learned_launches else None
            request = tuner.replay_request()
            try:
                ledgers = await run(key, self.replay, request, timeout_s)
            except Exception as error:  # a failing replay must not stop the refresh
                kept = describe(tuner.chosen)
                log.warning("%s: replaying the target's candidates failed (%s); keeping %s", metric, error, kept)
                tuner.chosen_at = now_s  # tried again at the next period, not every refresh
                continue
            tuner.take(now_s, ledgers, request, self.live_ledger(tuner.pool) if self.live_ledger else None)
            log.info("%s%s: target %s: %s", metric, key, tuner.target.describe(), tuner.reason)
