"""Pull -> forecast (in a process pool) -> build a new snapshot -> swap it in.

One bad refresh never kills the process and never blanks a value: a signal whose pull or fit fails
keeps its last good served values (their timestamps age, and staleness shows it), and the whole
previous snapshot stays in place if building the new one fails.

Fitting is the expensive part, so it happens on a cadence: a full model selection every
``reselect_every``, optionally a refit of the chosen models every ``refit_every``, and at every other
refresh the fitted models forecast from the newest data (milliseconds instead of a second). The
fitted models stay in the worker process that fitted them: each series always goes to the same
single-process pool (its shard), because shipping a fitted gbm back and forth would cost about half
a megabyte per series and refresh. A worker that lost its models (replaced after a crash) fits
again on the next refresh.

Work runs one item per worker at a time, so ``fit_timeout`` bounds a fit's own run time, not its
wait in a queue behind a thousand others; the worker enforces it. A pool that breaks (a worker
killed, e.g. by the OOM killer) or stops answering is replaced, and the next refresh uses the new one.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import BrokenExecutor, Executor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

import pandas as pd

from adapters.types import AdapterError, ScheduledWindow, Signal
from autoscaler import policy
from autoscaler.provider import MetricInfo, ServedSeries, Snapshot, SnapshotProvider
from autoscaler.workers import FitTimeout, deadline, terminate

if TYPE_CHECKING:
    from forecast.engine import EngineResult, Selection

log = logging.getLogger(__name__)

PlanKind = Literal["demand", "headroom", "rate", "replicas"]


class SignalSource(Protocol):
    name: str

    async def pull(self, now: datetime) -> list[Signal]: ...


@dataclass(frozen=True)
class MetricPlan:
    """How one served metric is made from one signal, and the limits it is served within."""

    metric: str
    signal: str
    kind: PlanKind
    quantile: float = 0.9
    min_value: float | None = None
    max_value: float | None = None
    max_decrease_per_minute: float | None = None
    placeholder_namespace: str | None = None
    utilization_signal: str | None = None
    replicas_signal: str | None = None
    target_utilization: float = 60.0


@dataclass(frozen=True)
class RefreshSettings:
    interval: timedelta
    # Used for every series unless the refresher is given a lead_time function.
    lead_time: timedelta
    fit_timeout: timedelta = timedelta(seconds=60)
    # Model selection (a backtest of every candidate) runs this often per series; in between the
    # fitted models forecast from the newest data, and are refitted every ``refit_every`` if set.
    reselect_every: timedelta = timedelta(hours=6)
    refit_every: timedelta | None = None
    # How far ahead scheduled windows are looked up (at least the longest lead time).
    window_horizon: timedelta = timedelta(hours=1)


@dataclass
class RefreshStats:
    """What the last refreshes did, for /readyz, /metrics and the logs."""

    refreshes: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    last_success: dict[str, datetime] = field(default_factory=dict)
    last_error: dict[str, str] = field(default_factory=dict)
    last_duration_s: float = 0.0


# (start, horizon) -> windows open at start or starting within the horizon.
WindowsFunction = Callable[[datetime, timedelta], Sequence[ScheduledWindow]]
LeadTimeFunction = Callable[[Mapping[str, str]], policy.LeadTime]
# (plan, series labels, GPUs requested now) -> the caps that apply (ResourceQuota, NodePool limits).
CapsFunction = Callable[[MetricPlan, Mapping[str, str], float], Sequence[policy.Cap]]
NODEPOOL_LABEL = "nodepool"
# How long past fit_timeout the service waits for a worker that did not stop itself before it
# declares the pool stuck and replaces it.
STUCK_WORKER_GRACE_S = 30.0
# The kinds of served value that count scheduled GPU windows.
WINDOW_KINDS = frozenset({"demand", "headroom"})

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


def _series_key(signal: Signal) -> SeriesKey:
    return (signal.name, tuple(sorted(signal.labels.items())))


@dataclass(frozen=True)
class CapacityInputs:
    """What a replicas plan learns one replica's capacity from (same labels as the rate series)."""

    utilization: pd.Series
    requests_per_replica: pd.Series
    target_utilization: float


WorkKind = Literal["select", "refit", "update"]


@dataclass(frozen=True)
class WorkerResult:
    engine: EngineResult
    capacity: policy.ReplicaCapacity | None = None
    # What the worker did: a full selection, a refit of the chosen models, or a forecast from the
    # newest data with the models it holds (a worker without them selects instead).
    work: WorkKind = "select"


@dataclass(frozen=True)
class WorkRequest:
    """Everything a worker needs for one series at one refresh (pickled to the worker)."""

    scope: str  # the refresher's identity: workers keep fitted models per refresher and series
    key: SeriesKey
    series: pd.Series
    lead_steps: int
    quantiles: tuple[float, ...]
    work: WorkKind
    model: str | None = None  # the selected model, for a refit
    known_windows: tuple[tuple[datetime, datetime, float], ...] = ()
    capacity_inputs: CapacityInputs | None = None
    timeout_s: float | None = None
    # Fitted models a worker has not been asked about for this long are dropped (series gone).
    keep_idle_s: float = 86_400.0


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
        sources: Sequence[SignalSource],
        plans: Sequence[MetricPlan],
        metrics: Sequence[MetricInfo],
        settings: RefreshSettings,
        pools: Sequence[Executor],
        new_pool: Callable[[], Executor] | None = None,
        windows: WindowsFunction | None = None,
        lead_time: LeadTimeFunction | None = None,
        caps: CapsFunction | None = None,
        clock: Callable[[], datetime] | None = None,
        on_success: Callable[[Snapshot], None] | None = None,
    ) -> None:
        self.provider = provider
        self.sources = list(sources)
        self.plans = list(plans)
        self.metrics = {info.name: info for info in metrics}
        self.settings = settings
        if not pools:
            raise ValueError("the refresher needs at least one worker pool")
        self.pools = list(pools)
        self.new_pool = new_pool
        self._slots = [asyncio.Semaphore(1) for _ in self.pools]
        self._scope = uuid.uuid4().hex
        self.windows = windows or (lambda start, horizon: ())
        self.lead_time = lead_time or (lambda labels: policy.LeadTime(settings.lead_time, "configured"))
        self.caps = caps or (lambda plan, labels, requested: ())
        self.clock = clock or (lambda: datetime.now(UTC))
        self.on_success = on_success
        self.stats = RefreshStats()
        # The values last served per series; kept as they were when a later pull or fit fails.
        self._served: dict[SeriesKey, tuple[ServedSeries, ...]] = {}
        # The model each series last selected by full backtest, and when; when it was last fitted.
        self._selected: dict[SeriesKey, tuple[str, datetime]] = {}
        self._fitted_at: dict[SeriesKey, datetime] = {}
        # What each (metric, series) served last, for paced step-downs.
        self._previous: dict[tuple[str, SeriesKey], tuple[float, datetime]] = {}

    def restore(self, snapshot: Snapshot) -> None:
        """Serve values saved before a restart until a fresh forecast (or its failure) replaces them."""
        signal_of = {plan.metric: plan.signal for plan in self.plans}
        grouped: dict[SeriesKey, list[ServedSeries]] = {}
        for series_list in snapshot.series.values():
            for series in series_list:
                if series.metric in signal_of:
                    key = (signal_of[series.metric], tuple(sorted(series.labels.items())))
                    grouped.setdefault(key, []).append(series)
        for key, restored in grouped.items():
            self._served.setdefault(key, tuple(restored))
        self.provider.swap(self._build(snapshot.created_at))

    async def _pull(self, source: SignalSource, now: datetime) -> list[Signal]:
        try:
            signals = await source.pull(now)
        except AdapterError as error:
            self._failed(source.name, f"pull failed: {type(error).__name__}: {error}")
            return []
        if not signals:
            self._failed(source.name, "pull returned no series")
        return signals

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

    async def _fit(
        self,
        signal: Signal,
        now: datetime,
        past_windows: Sequence[ScheduledWindow],
        capacity_inputs: CapacityInputs | None,
    ) -> _Fitted | None:
        lead_steps = max(1, int(pd.Timedelta(self.lead_time(signal.labels).value) / signal.step))
        quantiles = tuple(sorted({plan.quantile for plan in self.plans if plan.signal == signal.name} or {0.9}))
        key = _series_key(signal)
        work, model = self._work_for(key, now)
        # Past runs of known jobs come out of a GPU history (the schedule adds them back, once); a
        # request-rate history holds no GPUs to take out.
        uses_windows = any(p.kind in WINDOW_KINDS for p in self.plans if p.signal == signal.name)
        relevant_past = windows_for(signal.labels, past_windows) if uses_windows else []
        known = tuple((w.start, w.end, w.gpus) for w in relevant_past)
        loop = asyncio.get_running_loop()
        timeout_s = self.settings.fit_timeout.total_seconds()
        request = WorkRequest(
            scope=self._scope,
            key=key,
            series=signal.series,
            lead_steps=lead_steps,
            quantiles=quantiles,
            work=work,
            model=model,
            known_windows=known,
            capacity_inputs=capacity_inputs,
            timeout_s=timeout_s,
            keep_idle_s=4 * self.settings.reselect_every.total_seconds(),
        )
        shard = zlib.crc32(repr(key).encode()) % len(self.pools)
        async with self._slots[shard]:
            pool = self.pools[shard]
            try:
                call = loop.run_in_executor(pool, _work_in_worker, request)
                result = await asyncio.wait_for(call, timeout_s + STUCK_WORKER_GRACE_S)
            except (BrokenExecutor, TimeoutError) as error:
                self._replace_pool(shard, pool, f"{type(error).__name__}: {error}")
                self._failed(signal.name, f"forecast failed: {type(error).__name__}: {error}")
                return None
            except (Exception, FitTimeout) as error:  # a failing fit must not take the service down
                self._failed(signal.name, f"forecast failed: {type(error).__name__}: {error}")
                return None
        if result.work == "select":
            self._selected[key] = (result.engine.model, now)
        if result.work != "update":
            self._fitted_at[key] = now
        self.stats.last_success[signal.name] = now
        self.stats.last_error.pop(signal.name, None)
        return _Fitted(key, signal, result)

    def _work_for(self, key: SeriesKey, now: datetime) -> tuple[WorkKind, str | None]:
        """Select on the reselection cadence, refit on the refit cadence, else forecast from new data."""
        selected = self._selected.get(key)
        if selected is None or now - selected[1] >= self.settings.reselect_every:
            return "select", None
        refit_every = self.settings.refit_every
        fitted_at = self._fitted_at.get(key, selected[1])
        if refit_every is not None and now - fitted_at >= refit_every:
            return "refit", selected[0]
        return "update", selected[0]

    def _replace_pool(self, shard: int, broken: Executor, reason: str) -> None:
        """Swap in a fresh pool once per broken one (every call in flight on it fails the same way)."""
        if self.pools[shard] is not broken or self.new_pool is None:
            return
        log.warning("forecast worker %d replaced after %s", shard, reason)
        terminate(broken)
        self.pools[shard] = self.new_pool()

    async def refresh_once(self) -> Snapshot:
        started = time.perf_counter()
        now = self.clock()
        pulled_groups = await asyncio.gather(*(self._pull(source, now) for source in self.sources))
        signals = [signal for group in pulled_groups for signal in group]
        pulled = {_series_key(signal): signal for signal in signals}
        history_span = max((s.series.index[-1] - s.series.index[0] for s in signals if len(s.series)), default=None)
        past_windows = list(self.windows(now - history_span, history_span)) if history_span is not None else []
        # Only signals that a plan serves are forecast; the others (utilisation, replicas) feed them.
        served_signals = {plan.signal for plan in self.plans}
        fitted = await asyncio.gather(
            *(
                self._fit(signal, now, past_windows, self._capacity_inputs(signal, pulled))
                for signal in signals
                if signal.name in served_signals
            )
        )
        windows = list(self.windows(now, self.settings.window_horizon))
        for outcome in fitted:
            if outcome is not None:
                self._served[outcome.key] = tuple(
                    served
                    for plan in self.plans
                    if plan.signal == outcome.signal.name and plan.metric in self.metrics
                    for served in [self._serve(plan, outcome, now, windows)]
                    if served is not None
                )
        snapshot = self._build(now)
        self.provider.swap(snapshot)
        self.stats.refreshes += 1
        self.stats.last_duration_s = time.perf_counter() - started
        if self.on_success is not None:
            self.on_success(snapshot)
        return snapshot

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

    def _decide(
        self, plan: MetricPlan, fitted: _Fitted, now: datetime, windows: Sequence[ScheduledWindow]
    ) -> tuple[policy.Decision | None, policy.LeadTime, list[ScheduledWindow]]:
        signal, engine = fitted.signal, fitted.result.engine
        lead_time = self.lead_time(signal.labels)
        relevant = windows_for(signal.labels, windows) if plan.kind in WINDOW_KINDS else []
        demand = policy.forecast_demand(
            engine.forecast, quantile=plan.quantile, now=now, lead_time=lead_time.value, windows=relevant
        )
        if plan.kind == "replicas":
            return policy.replicas_for(demand, fitted.result.capacity, plan.target_utilization), lead_time, relevant
        if plan.kind != "headroom":
            return demand, lead_time, relevant
        requested_now = policy.last_observed(signal.series)
        decision = policy.headroom(demand, requested_now)
        return policy.apply_caps(decision, self.caps(plan, signal.labels, requested_now)), lead_time, relevant

    def _serve(
        self, plan: MetricPlan, fitted: _Fitted, now: datetime, windows: Sequence[ScheduledWindow]
    ) -> ServedSeries | None:
        decision, lead_time, relevant = self._decide(plan, fitted, now, windows)
        if decision is None:
            log.warning("%s%s: no replica capacity can be learned yet", plan.metric, dict(fitted.signal.labels))
            return None
        decision = policy.clamp(decision, plan.min_value, plan.max_value)
        previous_key = (plan.metric, fitted.key)
        decision = policy.limit_step_down(decision, self._previous.get(previous_key), now, plan.max_decrease_per_minute)
        self._previous[previous_key] = (decision.value, now)
        engine = fitted.result.engine
        details: dict[str, Any] = {
            "model": engine.model,
            "work": fitted.result.work,
            "notes": list(engine.notes),
            "fit_seconds": engine.fit_seconds,
            "forecast": engine.forecast,
            "history": fitted.signal.series,
            "scores": engine.scores,
            "lead_time_seconds": int(lead_time.value.total_seconds()),
            "lead_time_source": lead_time.source,
            "windows": relevant,
            "quantile": plan.quantile,
        }
        return ServedSeries(
            metric=plan.metric,
            labels=dict(fitted.signal.labels),
            value=decision.value,
            timestamp=now,
            explanation=f"{decision.explanation}; lead time {lead_time.source}",
            details=details,
        )

    async def run(self, ready: Callable[[], None] | None = None) -> None:
        """Refresh forever; a failing refresh is logged and retried at the next interval."""
        while True:
            try:
                snapshot = await self.refresh_once()
                if ready is not None and any(snapshot.series.values()):
                    ready()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("refresh failed; keeping the previous snapshot")
            await asyncio.sleep(self.settings.interval.total_seconds())


def windows_for(labels: Mapping[str, str], windows: Sequence[ScheduledWindow]) -> list[ScheduledWindow]:
    """The windows a series must provision for: those of its node pool.

    A window names its pool when the CronJob's pods select one (``karpenter.sh/nodepool``); a window
    that names none belongs to series without a pool (or the unnamed pool, where Pending pods land).
    """
    pool = labels.get(NODEPOOL_LABEL, "")
    return [window for window in windows if window.labels.get(NODEPOOL_LABEL, "") == pool]


@dataclass
class _Held:
    """A fitted selection a worker keeps for later refreshes of the same series."""

    selection: Selection
    scores: dict[str, dict[str, float]]
    notes: tuple[str, ...]
    fitted_at: float  # time.time() of the fit
    used_at: float


# Per worker process (or per thread pool, in tests): (refresher scope, series key) -> fitted models.
_HELD: dict[tuple[str, SeriesKey], _Held] = {}


def _work_in_worker(request: WorkRequest) -> WorkerResult:
    # Top-level so the process pool can pickle it; the numerics are imported in the worker only.
    from forecast.engine import EngineResult, fit_select_predict
    from forecast.known_demand import remove_known_jobs

    with deadline(request.timeout_s):
        started = time.time()
        for stale in [key for key, held in _HELD.items() if started - held.used_at > request.keep_idle_s]:
            del _HELD[stale]
        series = request.series
        removal_notes: tuple[str, ...] = ()
        if request.known_windows:
            series, removal_notes = remove_known_jobs(series, request.known_windows)
        held_key = (request.scope, request.key)
        held = _HELD.get(held_key)
        # The horizon covers the lead time plus one step.
        horizon_steps = request.lead_steps + 1
        result: EngineResult | None = None
        work: WorkKind = "select"
        update_failure: tuple[str, ...] = ()
        if request.work == "update" and held is not None:
            try:
                forecast = held.selection.forecast(series, horizon_steps, request.quantiles)
            except Exception as error:  # e.g. the signal's step changed: the held models no longer fit it
                update_failure = (f"held models could not forecast ({type(error).__name__}: {error}); selected again",)
            else:
                held.used_at = started
                age_minutes = (started - held.fitted_at) / 60
                result = EngineResult(
                    forecast=forecast,
                    model=held.selection.model,
                    scores=held.scores,
                    notes=(
                        *held.notes,
                        *removal_notes,
                        f"models fitted {age_minutes:.0f} min ago forecast from the newest data",
                    ),
                    fit_seconds=time.time() - started,
                    selection=None,
                )
                work = "update"
        if result is None:
            refit = request.work == "refit" and request.model is not None
            work = "refit" if refit else "select"
            result = fit_select_predict(
                series,
                horizon_steps=horizon_steps,
                quantiles=request.quantiles,
                policy_quantile=max(request.quantiles),
                lead_steps=request.lead_steps,
                candidates=(request.model,) if refit and request.model is not None else None,
            )
            if result.selection is not None:
                _HELD[held_key] = _Held(result.selection, result.scores, result.notes, started, started)
            # The fitted models stay here; only the forecast travels back.
            result = replace(result, selection=None, notes=(*result.notes, *removal_notes, *update_failure))
        capacity = None
        if request.capacity_inputs is not None:
            inputs = request.capacity_inputs
            capacity = policy.learn_replica_capacity(
                inputs.utilization, inputs.requests_per_replica, inputs.target_utilization
            )
    return WorkerResult(result, capacity, work)
