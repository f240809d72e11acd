"""Pull -> forecast (in worker processes) -> decide -> build a new snapshot -> swap it in.

One bad refresh never kills the process and never blanks a value: a signal whose pull or fit fails
keeps its last good served values (their timestamps age, and staleness shows it), and the whole
previous snapshot stays in place if building the new one fails.

Fitting is the expensive part, so it happens on a cadence (:class:`FitSchedule`): a full model
selection every ``reselect_every``, optionally a refit of the chosen models every ``refit_every``,
and at every other refresh the fitted models forecast from the newest data (milliseconds instead of
a second). What a worker does is in ``fitting``; which worker does it, in ``workers.ForecastPools``;
how a forecast becomes a served value, in ``policy.decide``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pandas as pd

from adapters.types import NODEPOOL_LABEL, AdapterError, ScheduledWindow, Signal
from autoscaler import policy
from autoscaler.refresh import fit_groups, fitting
from autoscaler.refresh.fitting import CapacityInputs, SeriesKey, WorkerResult, WorkRequest
from autoscaler.refresh.requested_now import requested
from autoscaler.refresh.restored import restorable
from autoscaler.refresh.schedule import FitSchedule
from autoscaler.refresh.workers import ForecastPools, WorkFailed
from autoscaler.serving.provenance import Provenance, WorkKind
from autoscaler.serving.provider import ServedSeries, Snapshot, SnapshotProvider
from autoscaler.targets.observed import target_choice
from autoscaler.targets.plans import MetricPlan, RefreshInputs, RefreshSettings, RefreshStats, SignalSource, windows_for
from autoscaler.targets.tuners import TargetLevels

log = logging.getLogger(__name__)

NO_SERIES = "pull returned no series"  # a source answered with nothing (no exporter, say): not an outage


def series_key(signal: Signal) -> SeriesKey:
    return (signal.name, tuple(sorted(signal.labels.items())))


@dataclass(frozen=True)
class _Fitted:
    key: SeriesKey
    signal: Signal
    result: WorkerResult


class Refresher:
    def __init__(
        self,
        *,
        provider: SnapshotProvider,
        inputs: RefreshInputs,
        pools: ForecastPools,
        clock: Callable[[], datetime] | None = None,
        on_success: Callable[[Snapshot], None] | None = None,
    ) -> None:
        self.provider = provider
        self.inputs = inputs
        self.plans = list(inputs.plans)
        self.metrics = {info.name: info for info in inputs.metrics}
        self.pools = pools
        # Workers keep fitted models per refresher: two refreshers sharing a process never mix them.
        self.scope = uuid.uuid4().hex
        self.schedule = FitSchedule(inputs.refresh)
        self.clock = clock or (lambda: datetime.now(UTC))
        self.on_success = on_success
        self.stats = RefreshStats()
        # The values last served per series; kept as they were when a later pull or fit fails.
        self._served: dict[SeriesKey, tuple[ServedSeries, ...]] = {}
        # What each (metric, series) served last, for paced step-downs.
        self._previous: dict[tuple[str, SeriesKey], tuple[float, datetime]] = {}
        # Which series this replica fits and serves (shards owned through Leases); None: all of them.
        self.owns: Callable[[SeriesKey], bool] | None = None
        # With shards: a series' shard, and what to do with each shard's values as soon as they are
        # fitted, before the refresh ends (publish them; ``fit_groups``).
        self.group_of: Callable[[SeriesKey], int] | None = None
        self.on_group_done: Callable[[Snapshot, int], None] | None = None
        self._wake = asyncio.Event()
        # Series forgotten since the last refresh: their workers drop the models they hold for them.
        self._dropped: set[SeriesKey] = set()
        # Whether models of series handed to another replica stay in the workers as standbys
        # (``standby.Standby``), and what the last refresh pulled (it fits standbys from it).
        self.keeps_standby = False
        self.pulled: Mapping[SeriesKey, Signal] = {}
        self.past_windows: Sequence[ScheduledWindow] = ()
        self.refreshed = asyncio.Event()
        self._restored: set[SeriesKey] = set()  # serving restored values: replaced first (``fit_groups``)
        self.levels = TargetLevels(inputs.replay, inputs.refresh.interval.total_seconds(), inputs.live_ledger)
        self.levels.learned_launches = inputs.learned_launches

    @property
    def settings(self) -> RefreshSettings:
        return self.schedule.settings

    @settings.setter
    def settings(self, settings: RefreshSettings) -> None:
        self.schedule.settings = settings

    def windows(self, start: datetime, horizon: timedelta) -> Sequence[ScheduledWindow]:
        return self.inputs.windows(start, horizon) if self.inputs.windows is not None else ()

    def lead_time(self, labels: Mapping[str, str]) -> policy.LeadTime:
        if self.inputs.lead_time is not None:
            return self.inputs.lead_time(labels)
        return policy.LeadTime(self.settings.lead_time, "configured")

    def restore(self, snapshot: Snapshot) -> None:
        """Serve values saved before a restart until a fresh forecast (or its failure) replaces them.

        A saved value passes the checks and limits a computed one does: one that must not be served
        (negative, not finite, absurdly large) is dropped with a warning naming it; the others are
        capped and clamped as their plan says.
        """
        plan_of = {plan.metric: plan for plan in self.plans}
        grouped: dict[SeriesKey, list[ServedSeries]] = {}
        for series_list in snapshot.series.values():
            for series in series_list:
                checked = restorable(self.inputs, plan, series) if (plan := plan_of.get(series.metric)) else None
                if plan is not None and checked is not None:
                    grouped.setdefault((plan.signal, tuple(sorted(series.labels.items()))), []).append(checked)
        now = self.clock()
        for key, restored in grouped.items():
            if key not in self._served:
                self._restored.add(key)
            self._served.setdefault(key, tuple(restored))
            model = next((s.published.model for s in restored if s.published and s.published.model), None)
            if model is not None:  # from another process's object: refit its model, do not reselect
                self.schedule.adopt(key, model, now)
        self.provider.swap(self._build(snapshot.created_at))

    def wake(self) -> None:
        """Refresh now rather than at the end of the interval (a shard was just taken over)."""
        self._wake.set()

    @property
    def pacing(self) -> dict[tuple[str, SeriesKey], tuple[float, datetime]]:
        """Step-down pacing state: what each (metric, series) was last decided and when (a copy)."""
        return dict(self._previous)

    def restore_pacing(self, pacing: Mapping[tuple[str, SeriesKey], tuple[float, datetime]]) -> None:
        """Continue pacing from state another process published; what this one decided since wins."""
        for key, previous in pacing.items():
            self._previous.setdefault(key, previous)

    def keep_owned(self) -> None:
        """Forget what this replica no longer owns (values, pacing, schedule): its new owner publishes
        them, and should the shard come back, its state is restored from what was published since."""
        owns = self.owns
        if owns is None:
            return
        for key in [key for key in self._served if not owns(key)]:
            self._forget(key, standby=self.keeps_standby)
        self._previous = {k: v for k, v in self._previous.items() if owns(k[1])}

    def _forget(self, key: SeriesKey, *, standby: bool = False) -> None:
        """Stop serving ``key``; its models stay in the workers only as a ``standby``."""
        if standby:
            self.schedule.to_standby(key)
        else:
            self._dropped.add(key)
            self.schedule.forget(key)
        self._served.pop(key, None)
        self._restored.discard(key)
        self._previous = {k: v for k, v in self._previous.items() if k[1] != key}
        self.levels.forget(key)

    async def refresh_once(self) -> Snapshot:
        started = time.perf_counter()
        now = self.clock()
        pulled_groups = await asyncio.gather(*(self._pull(source, now) for source in self.inputs.sources))
        signals = [signal for group in pulled_groups for signal in group]
        pulled = {series_key(signal): signal for signal in signals}
        self._forget_gone(pulled)
        history_span = max((s.series.index[-1] - s.series.index[0] for s in signals if len(s.series)), default=None)
        past_windows = list(self.windows(now - history_span, history_span)) if history_span is not None else []
        self.pulled, self.past_windows = pulled, past_windows
        # Only signals that a plan serves are forecast; the others (utilisation, replicas) feed them.
        served_signals = {plan.signal for plan in self.plans}
        self.keep_owned()
        dropped, self._dropped = self._dropped, set()
        await fitting.drop_held_models(self.pools, self.scope, dropped)
        owns = self.owns or (lambda key: True)
        requests = [
            (signal, self._work_request(signal, now, past_windows, self._capacity_inputs(signal, pulled)))
            for signal in signals
            if signal.name in served_signals and owns(series_key(signal))
        ]
        windows = [*self.windows(now, self.settings.window_horizon), *self.inputs.queued(now)]
        self.inputs.record_queued(now)  # what waits in Kueue's queues: a signal of its own, never served

        def serve_group(group: int, outcomes: list[_Fitted | None], last: bool) -> None:
            for outcome in outcomes:
                if outcome is not None:
                    self._served[outcome.key] = self._serve_all(outcome, now, windows)
                    self._restored.discard(outcome.key)
            if not last and self.on_group_done is not None:  # the provider gets the whole refresh, at its end
                self.on_group_done(self._build(now), group)

        groups = fit_groups.in_groups(
            requests, lambda pair: (pair[1].key, pair[1].work), self.group_of, self._restored.__contains__
        )
        await fit_groups.run_in_groups(groups, lambda pair: self._fit(*pair, now), serve_group)
        snapshot = self._build(now)
        self.provider.swap(snapshot)
        await self.levels.tune_due(now.timestamp(), self.pools.run, self.settings.fit_timeout.total_seconds())
        self.stats.refreshes += 1
        self.stats.last_duration_s = time.perf_counter() - started
        self.refreshed.set()
        if self.on_success is not None:
            self.on_success(snapshot)
        return snapshot

    async def run(self, ready: Callable[[], None] | None = None) -> None:
        """Refresh forever; a failing refresh is logged and retried at the next interval."""
        while True:
            self.provider.expect_first_forecast(self.clock() + self.settings.fit_timeout)  # while none is served
            try:
                snapshot = await self.refresh_once()
                if ready is not None and any(snapshot.series.values()):
                    ready()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("refresh failed; keeping the previous snapshot")
            self.provider.expect_first_forecast(self.clock() + self.settings.interval + self.settings.fit_timeout)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.interval.total_seconds())
            self._wake.clear()

    async def _pull(self, source: SignalSource, now: datetime) -> list[Signal]:
        try:
            with self.stats.working(source.name, "query", now):
                signals = await source.pull(now)
        except AdapterError as error:
            self._failed(source.name, f"pull failed: {type(error).__name__}: {error}")
            return []
        if not signals:
            self._failed(source.name, NO_SERIES)
        return signals

    def _forget_gone(self, pulled: Mapping[SeriesKey, Signal]) -> None:
        """Stop serving the series a successful pull no longer has (a pool that disappeared): a
        failed pull returns nothing, so its signal's series are kept."""
        names = {name for name, _ in pulled}
        for key in [key for key in self._served if key[0] in names and key not in pulled]:
            log.info("signal %s: series %s is gone from its source; no longer served", key[0], dict(key[1]))
            self._forget(key)

    def _failed(self, name: str, reason: str) -> None:
        self.stats.failures[name] = self.stats.failures.get(name, 0) + 1
        self.stats.last_error[name] = reason
        log.warning("signal %s: %s; serving its last good values", name, reason)

    def _capacity_inputs(self, signal: Signal, pulled: Mapping[SeriesKey, Signal]) -> CapacityInputs | None:
        plan = next((p for p in self.plans if p.kind == "replicas" and p.signal == signal.name), None)
        if plan is None or plan.utilization_signal is None or plan.replicas_signal is None:
            return None
        labels = tuple(sorted(signal.labels.items()))
        utilization = pulled.get((plan.utilization_signal, labels))
        replicas = pulled.get((plan.replicas_signal, labels))
        if utilization is None or replicas is None:
            return None
        per_replica = signal.series / replicas.series.where(replicas.series > 0)
        return CapacityInputs(utilization.series, per_replica, plan.target_utilization)

    def standby_request(self, signal: Signal, model: str, now: datetime) -> WorkRequest:
        """A refit of ``model`` for a series another replica owns, from the last pull (``standby``)."""
        return self._work_request(signal, now, self.past_windows, None, ("refit", model))

    def _work_request(
        self,
        signal: Signal,
        now: datetime,
        past_windows: Sequence[ScheduledWindow],
        capacity: CapacityInputs | None,
        work_and_model: tuple[WorkKind, str | None] | None = None,
    ) -> WorkRequest:
        key = series_key(signal)
        work, model = work_and_model or self.schedule.work_for(key, now)
        plans = [plan for plan in self.plans if plan.signal == signal.name]
        # Past runs of known jobs come out of a GPU history (the schedule adds them back, once); a
        # request-rate history holds no GPUs to take out.
        uses_windows = any(plan.kind in policy.WINDOW_KINDS for plan in plans)
        relevant_past = windows_for(signal.labels, past_windows) if uses_windows else []
        return WorkRequest(
            scope=self.scope,
            key=key,
            series=signal.series,
            lead_steps=max(1, int(pd.Timedelta(self.lead_time(signal.labels).value) / signal.step)),
            quantiles=tuple(sorted({level for plan in plans for level in self.levels.levels(plan)} or {0.9})),
            work=work,
            model=model,
            known_windows=tuple((w.start, w.end, w.gpus) for w in relevant_past),
            capacity_inputs=capacity,
            timeout_s=self.settings.fit_timeout.total_seconds(),
            keep_idle_s=4 * self.settings.reselect_every.total_seconds(),
        )

    async def _fit(self, signal: Signal, request: WorkRequest, now: datetime) -> _Fitted | None:
        try:
            with self.stats.working(signal.name, "forecast", now):  # fitting.work_in_worker: a seam of tests
                result = await self.pools.run(request.key, fitting.work_in_worker, request, request.timeout_s or 0.0)
        except WorkFailed as error:
            self._failed(signal.name, f"forecast failed: {error}")
            return None
        self.schedule.done(request.key, result, now)
        self.stats.last_success[signal.name] = now
        self.stats.last_error.pop(signal.name, None)
        return _Fitted(request.key, signal, result)

    def _serve_all(
        self, fitted: _Fitted, now: datetime, windows: Sequence[ScheduledWindow]
    ) -> tuple[ServedSeries, ...]:
        plans = [p for p in self.plans if p.signal == fitted.signal.name and p.metric in self.metrics]
        served = (self._serve(plan, fitted, now, windows) for plan in plans)
        return tuple(series for series in served if series is not None)

    def _serve(
        self, plan: MetricPlan, fitted: _Fitted, now: datetime, windows: Sequence[ScheduledWindow]
    ) -> ServedSeries | None:
        signal, result = fitted.signal, fitted.result
        lead_time = self.lead_time(signal.labels)
        relevant = windows_for(signal.labels, windows) if plan.kind in policy.WINDOW_KINDS else []
        requested_now, requested_source = requested(self.inputs, signal) if plan.kind == "headroom" else (None, "")
        previous_key = (plan.metric, fitted.key)
        caps = self.inputs.caps
        situation = policy.Situation(
            forecast=result.engine.forecast,
            now=now,
            lead_time=lead_time,
            windows=relevant,
            requested_now=requested_now if requested_now is not None else math.nan,
            requested_now_source=requested_source,
            caps=caps(plan, signal.labels, requested_now) if caps is not None and requested_now is not None else (),
            previous=self._previous.get(previous_key),
            capacity=result.capacity,
        )
        decision = self.levels.decide(
            plan, fitted.key, situation, now.timestamp(), signal.labels.get(NODEPOOL_LABEL, "")
        )
        if decision is None:
            log.warning("%s%s: no replica capacity can be learned yet", plan.metric, dict(signal.labels))
            return None
        reason = policy.unservable(decision.value)
        if reason is not None:  # e.g. a diverged forecast: the last good value stays
            log.warning("%s%s: not served (%s); keeping the last good value", plan.metric, dict(signal.labels), reason)
            return next((s for s in self._served.get(fitted.key, ()) if s.metric == plan.metric), None)
        self._previous[previous_key] = (decision.value, now)
        engine = result.engine
        provenance = Provenance(
            model=engine.model,
            quantile=self.levels.level(plan, fitted.key),
            forecast=engine.forecast,
            history=signal.series,
            scores=engine.scores,
            notes=tuple(engine.notes),
            work=result.work,
            fit_seconds=engine.fit_seconds,
            lead_time=lead_time,
            decided_at=now,
            windows=tuple(relevant),
            peak_at=decision.peak_at,
            requested_now=requested_now,
            adjustments=decision.adjustments,
            target=target_choice(self.levels, plan.metric, fitted.key),
        )
        # As old as the newest point behind it: a source that brings nothing new makes it age.
        return ServedSeries(
            metric=plan.metric,
            labels=dict(signal.labels),
            value=decision.value,
            timestamp=signal.newest_at() or now,
            explanation=decision.explanation,
            provenance=provenance,
        )

    def _build(self, now: datetime) -> Snapshot:
        served: dict[str, list[ServedSeries]] = {name: [] for name in self.metrics}
        for _, series_of_key in sorted(self._served.items()):
            for series in series_of_key:
                served[series.metric].append(series)
        return Snapshot(
            created_at=now,
            metrics=self.metrics,
            series={name: tuple(series) for name, series in served.items()},
            last_error="; ".join(f"{k}: {v}" for k, v in sorted(self.stats.last_error.items())) or None,
        )
