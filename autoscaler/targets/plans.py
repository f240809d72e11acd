"""What the refresher reads: the signals, the metrics made from them, and the cluster's facts.

``pipeline`` assembles these from the settings (or the demo); ``refresher`` runs them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from adapters.types import NODEPOOL_LABEL, ScheduledWindow, Signal
from autoscaler import policy
from autoscaler.scorecard.figures import ServiceTarget
from autoscaler.serving.provider import MetricInfo
from autoscaler.targets.launches import LearnedLaunchesFunction
from autoscaler.targets.service_levels import LiveLedgerFunction, ReplayFunction
from autoscaler.targets.tuning import TuningSettings


class SignalSource(Protocol):
    name: str

    async def pull(self, now: datetime) -> list[Signal]: ...


@dataclass(frozen=True)
class MetricPlan:
    """How one served metric is made from one signal, and the limits it is served within."""

    metric: str
    signal: str
    kind: policy.PlanKind
    quantile: float = 0.9
    min_value: float | None = None
    max_value: float | None = None
    max_decrease_per_minute: float | None = None
    placeholder_namespace: str | None = None
    utilization_signal: str | None = None
    replicas_signal: str | None = None
    target_utilization: float = 60.0
    # headroom: a service level to meet instead of a fixed quantile (autoscaler/targets/target_levels.py).
    target: ServiceTarget | None = None
    tuning: TuningSettings = field(default_factory=TuningSettings)
    target_gpus_per_node: int = 8  # the node size the target's replay provisions in

    @property
    def rule(self) -> policy.Rule:
        return policy.Rule(
            kind=self.kind,
            quantile=self.quantile,
            min_value=self.min_value,
            max_value=self.max_value,
            max_decrease_per_minute=self.max_decrease_per_minute,
            target_utilization=self.target_utilization,
        )


@dataclass
class RefreshStats:
    """What the last refreshes did, for /readyz, /metrics and the logs."""

    refreshes: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    last_success: dict[str, datetime] = field(default_factory=dict)
    last_error: dict[str, str] = field(default_factory=dict)
    last_duration_s: float = 0.0
    # What runs now per source or signal ("query" or "forecast") and since when, for /readyz?verbose.
    running: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    _under_way: dict[str, int] = field(default_factory=dict, repr=False)

    @contextmanager
    def working(self, name: str, what: str, since: datetime) -> Iterator[None]:
        """Record ``what`` as running for ``name`` while the block runs; a signal's series are fitted
        concurrently, so it shows from the first start until the last of them ends."""
        self.running.setdefault(name, (what, since))
        self._under_way[name] = self._under_way.get(name, 0) + 1
        try:
            yield
        finally:
            self._under_way[name] -= 1
            if not self._under_way[name]:
                del self._under_way[name], self.running[name]


@dataclass(frozen=True)
class RefreshSettings:
    interval: timedelta
    # Used for every series unless the inputs give a lead_time function.
    lead_time: timedelta
    fit_timeout: timedelta = timedelta(seconds=60)
    # Model selection (a backtest of every candidate) runs this often per series; in between the
    # fitted models forecast from the newest data, and are refitted every ``refit_every`` if set.
    reselect_every: timedelta = timedelta(hours=6)
    refit_every: timedelta | None = None
    # How far ahead scheduled windows are looked up (at least the longest lead time).
    window_horizon: timedelta = timedelta(hours=1)


# (start, horizon) -> windows open at start or starting within the horizon.
WindowsFunction = Callable[[datetime, timedelta], Sequence[ScheduledWindow]]
LeadTimeFunction = Callable[[Mapping[str, str]], policy.LeadTime]
# (plan, series labels, GPUs requested now) -> the caps that apply (ResourceQuota, NodePool limits).
CapsFunction = Callable[[MetricPlan, Mapping[str, str], float], Sequence[policy.Cap]]
# (NodePool) -> GPUs of pods waiting for a node that Karpenter would place in it; "" for those that fit
# no pool, None for what the pool-less series holds of all of them (``KubernetesInputs.pending_gpus``).
PendingGpusFunction = Callable[[str | None], float]
# (NodePool) -> how the pods counted in it were placed when several pools fit them ("" if none did).
PendingPlacementFunction = Callable[[str], str]
# (now) -> GPU demand waiting in queues now with no pod yet (Kueue Workloads), as windows open from now
# (``adapters.types.QUEUED_SOURCE``): served as windows are, never taken out of the history.
QueuedFunction = Callable[[datetime], Sequence[ScheduledWindow]]


def nothing_queued(now: datetime) -> Sequence[ScheduledWindow]:
    return ()


def nothing_recorded(now: datetime) -> None:
    return None


@dataclass(frozen=True)
class RefreshInputs:
    """What the refresher reads: the signals, what to serve from them, and the cluster's facts."""

    metrics: Sequence[MetricInfo]
    plans: Sequence[MetricPlan]
    sources: Sequence[SignalSource]
    refresh: RefreshSettings
    windows: WindowsFunction | None = None
    lead_time: LeadTimeFunction | None = None
    caps: CapsFunction | None = None
    pending_gpus: PendingGpusFunction | None = None
    pending_placement: PendingPlacementFunction | None = None
    queued: QueuedFunction = nothing_queued
    # Records, at each refresh, what waits in Kueue's queues per pool: a signal of its own, never served.
    record_queued: Callable[[datetime], None] = nothing_recorded
    # Replays a target's levels (the simulator's controller model); without it, targets serve their quantile.
    replay: ReplayFunction | None = None
    # A pool's live minute ledger (the scorecard's), which calibrates a target on what happened.
    live_ledger: LiveLedgerFunction | None = None
    # What a pool's NodeClaims taught (lead times, failed launches): the pool a target's replay runs.
    learned_launches: LearnedLaunchesFunction | None = None


def windows_for(labels: Mapping[str, str], windows: Sequence[ScheduledWindow]) -> list[ScheduledWindow]:
    """The windows a series must provision for: those of its node pool.

    A window names its pool when the CronJob's pods select one (``karpenter.sh/nodepool``); a window
    that names none belongs to series without a pool (or the unnamed pool, where Pending pods land).
    """
    pool = labels.get(NODEPOOL_LABEL, "")
    return [window for window in windows if window.labels.get(NODEPOOL_LABEL, "") == pool]
