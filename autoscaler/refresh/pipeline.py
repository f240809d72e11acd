"""What the service serves and where its inputs come from, assembled from the settings.

``open_pipeline`` owns the long-lived clients (the Prometheus thread pool, the Kubernetes watches)
and closes them when the service stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

from kubernetes_asyncio.client import ApiClient

from adapters.kubernetes.launch_record import LaunchRecord
from adapters.kubernetes.nodeclaims import LeadTimeHistory
from adapters.kubernetes.pool_matching import UnplacedDemand, pool_name
from adapters.kubernetes.watch import WatchGroup
from adapters.prometheus.client import PrometheusSource
from adapters.types import NODEPOOL_LABEL, ScheduledWindow
from autoscaler.config.gpu_unit_settings import pod_gpu_units, pod_pool_label
from autoscaler.config.settings import Settings, WindowSettings
from autoscaler.defaults import DEMO_LEAD_TIME
from autoscaler.policy import Cap
from autoscaler.refresh import claimed_demand, demo
from autoscaler.refresh.claimed_demand import ClaimedDemandSource
from autoscaler.refresh.demo_cluster import DemoCluster, LedgerReplay
from autoscaler.refresh.kube_inputs import KubernetesInputs, declared_windows, watch_settings
from autoscaler.refresh.kueue_inputs import KueueInputs
from autoscaler.refresh.queued_record import QueuedWorkloadRecord
from autoscaler.refresh.sources import KnownPools, PrometheusSignalSource, client_settings, signal_query
from autoscaler.scorecard.capacity import PoolCapacity
from autoscaler.scorecard.kueue_histograms import KueueWaitHistograms
from autoscaler.scorecard.live import LiveScorecard
from autoscaler.scorecard.pods import PodOutcomes
from autoscaler.scorecard.store import FILE_NAME as SCORECARD_FILE
from autoscaler.scorecard.workloads import WorkloadOutcomes, WorkloadPools
from autoscaler.serving.provider import MetricInfo
from autoscaler.targets.launches import LearnedLaunchesFunction
from autoscaler.targets.plans import (
    CapsFunction,
    LeadTimeFunction,
    MetricPlan,
    PendingGpusFunction,
    PendingPlacementFunction,
    QueuedFunction,
    RefreshInputs,
    RefreshSettings,
    SignalSource,
    WindowsFunction,
    nothing_queued,
    nothing_recorded,
)
from autoscaler.targets.tuning import TuningSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pipeline(RefreshInputs):
    """What the refresher reads, plus what the service reports about its inputs."""

    # Extra lines for /readyz?verbose (watch states and the like).
    health: Callable[[], dict[str, str]] | None = None
    # GPU demand that fits no NodePool, for /metrics and the page.
    unplaced: Callable[[], Sequence[UnplacedDemand]] | None = None
    # NodeClaim lead times learned so far: published with the forecasts, restored from them.
    lead_times: LeadTimeHistory | None = None
    # Each pool's NodeClaim launch record (docs/launch-outcomes.md), for /metrics and the page.
    launches: LaunchRecord | None = None
    # What happened in each pool (docs/scorecard.md), collected after each refresh.
    scorecard: LiveScorecard | None = None
    # The demo's replayed pool: it takes each snapshot's headroom before the scorecard samples it.
    demo_cluster: DemoCluster | None = None
    # What waits in Kueue's queues per pool, recorded at each refresh (``record_queued``); None without Kueue.
    queued_workloads: QueuedWorkloadRecord | None = None


# What a preset's values count, for the page and the API; a custom query's unit is not known ("").
PRESET_UNITS = {"gpus_requested": "GPUs", "gpus_allocatable": "GPUs", "gpu_utilization": "%", "request_rate": "1/s"}


def metric_infos(settings: Settings) -> tuple[MetricInfo, ...]:
    presets = {signal.name: signal.preset for signal in settings.signals}
    return tuple(
        MetricInfo(
            name=name,
            description=spec.description or f"{spec.kind} of signal {spec.signal}",
            unit="replicas" if spec.kind == "replicas" else PRESET_UNITS.get(presets.get(spec.signal) or "", ""),
            fallback=spec.fallback,
            fallback_value=spec.fallback_value,
            staleness_ttl=spec.staleness_ttl,
        )
        for name, spec in settings.metrics.items()
    )


def metric_plans(settings: Settings) -> tuple[MetricPlan, ...]:
    return tuple(
        MetricPlan(
            metric=name,
            signal=spec.signal,
            kind=spec.kind,
            quantile=spec.quantile,
            min_value=spec.min_value,
            max_value=spec.max_value,
            max_decrease_per_minute=spec.max_decrease_per_minute,
            placeholder_namespace=spec.placeholder_namespace,
            utilization_signal=spec.utilization_signal,
            replicas_signal=spec.replicas_signal,
            target_utilization=spec.target_utilization,
            target=spec.target.service_target() if spec.target is not None else None,
            tuning=spec.target.tuning() if spec.target is not None else TuningSettings(),
            target_gpus_per_node=spec.target.gpus_per_node if spec.target is not None else 8,
        )
        for name, spec in settings.metrics.items()
    )


def refresh_settings(settings: Settings, lead_time: timedelta) -> RefreshSettings:
    forecast = settings.forecast
    return RefreshSettings(
        interval=forecast.interval,
        lead_time=lead_time,
        fit_timeout=forecast.fit_timeout,
        reselect_every=forecast.reselect_every,
        refit_every=forecast.refit_every,
        window_horizon=max(timedelta(hours=1), 2 * lead_time),
    )


def known_pools(inputs: KubernetesInputs | None) -> KnownPools | None:
    """Node pools known from outside Prometheus, beside those kube_node_labels and the history name:
    the Karpenter NodePools the Kubernetes inputs watch, so a pool with no node yet is known too."""
    if inputs is None:
        return None
    nodepools = inputs.nodepools
    return lambda: [pool_name(nodepool) for nodepool in nodepools() or ()]


# The demo declares a nightly training window so that gpu_headroom visibly rises one lead time
# before 02:00 UTC and falls after 04:00.
DEMO_WINDOWS = (
    WindowSettings(
        name="nightly-training",
        cron="0 2 * * *",
        gpus=64,
        duration=timedelta(hours=2),
        labels={NODEPOOL_LABEL: demo.POOL},
    ),
)


def demo_pipeline(state_dir: Path | None = None, replay: LedgerReplay | None = None) -> Pipeline:
    """The demo's inputs; with ``replay`` (the simulator's controller model), its pool is a replayed
    cluster the live scorecard scores (``demo_cluster``), saved in ``state_dir``."""

    def windows(start: datetime, horizon: timedelta) -> list[ScheduledWindow]:
        return declared_windows(DEMO_WINDOWS, start, horizon)

    signals = demo.DemoSignals()
    cluster = scorecard = None
    if replay is not None:
        cluster = DemoCluster(signals.sources[0], "gpu_headroom", demo.POOL, DEMO_LEAD_TIME, replay)
        scorecard = LiveScorecard(
            headroom_metrics=["gpu_headroom"],
            short_gpus=cluster.short_gpus,
            capacity=cluster,
            state_path=state_dir / SCORECARD_FILE if state_dir is not None else None,
        )
        scorecard.restore()
    return Pipeline(
        metrics=demo.METRICS,
        plans=demo.PLANS,
        sources=(signals,),
        refresh=RefreshSettings(interval=timedelta(seconds=60), lead_time=DEMO_LEAD_TIME),
        windows=windows,
        scorecard=scorecard,
        live_ledger=scorecard.pool_ledger if scorecard is not None else None,
        demo_cluster=cluster,
    )


@contextlib.asynccontextmanager
async def open_pipeline(
    settings: Settings, kube: ApiClient | None, replay: LedgerReplay | None = None
) -> AsyncIterator[Pipeline]:
    """The pipeline the settings describe; ``replay`` (the simulator's controller model, a layer above)
    runs the demo's cluster."""
    if settings.demo.enabled:
        yield demo_pipeline(settings.state_dir, replay)
        return
    async with contextlib.AsyncExitStack() as stack:
        inputs = await _start_kubernetes_inputs(settings, kube, stack)
        sources: list[SignalSource] = []
        prometheus: PrometheusSource | None = None
        if settings.prometheus is not None:
            prometheus = await stack.enter_async_context(PrometheusSource(client_settings(settings.prometheus)))
            sources = signal_sources(settings, prometheus, inputs)
        windows: WindowsFunction | None = None
        lead_time: LeadTimeFunction | None = None
        caps: CapsFunction | None = None
        health: Callable[[], dict[str, str]] | None = None
        pending_gpus: PendingGpusFunction | None = None
        pending_placement: PendingPlacementFunction | None = None
        unplaced: Callable[[], Sequence[UnplacedDemand]] | None = None
        if settings.inputs is not None and inputs is not None and kube is not None:
            windows, lead_time, health = inputs.windows, inputs.lead_time, inputs.health
            if settings.inputs.pending_pods:
                pending_gpus, pending_placement = inputs.pending_gpus, inputs.pending_placement
            unplaced = inputs.unplaced
            plans = metric_plans(settings)
            namespaces = sorted({p.placeholder_namespace for p in plans if p.placeholder_namespace})
            limits_task = asyncio.create_task(
                inputs.poll_limits(kube, namespaces, settings.forecast.interval), name="gpu-limits"
            )
            stack.push_async_callback(_cancel, limits_task)

            def caps(plan: MetricPlan, labels: Mapping[str, str], requested_now: float) -> Sequence[Cap]:
                return inputs.caps(plan.placeholder_namespace, labels, requested_now)
        elif settings.windows:
            declared = settings.windows

            def windows(start: datetime, horizon: timedelta) -> list[ScheduledWindow]:
                return declared_windows(declared, start, horizon)

        scorecard = live_scorecard(settings, inputs if kube is not None else None, prometheus)
        yield Pipeline(
            metrics=metric_infos(settings),
            plans=metric_plans(settings),
            sources=sources,
            refresh=refresh_settings(settings, settings.forecast.default_lead_time),
            windows=windows,
            lead_time=lead_time,
            caps=caps,
            health=health,
            pending_gpus=pending_gpus,
            pending_placement=pending_placement,
            unplaced=unplaced,
            scorecard=scorecard,
            live_ledger=scorecard.pool_ledger if scorecard is not None else None,
            **_nodeclaim_inputs(settings, inputs),
            **_kueue_inputs(settings, inputs),
        )


def signal_sources(
    settings: Settings, prometheus: PrometheusSource, inputs: KubernetesInputs | None
) -> list[SignalSource]:
    """A source per configured signal. A ``gpus_requested`` signal split by pool alone gets the GPUs DRA
    claims use added from the claim watch (``claimed_demand``: kube-state-metrics exports none)."""
    sources: list[SignalSource] = []
    for spec in settings.signals:
        query = signal_query(spec)
        source = PrometheusSignalSource(prometheus, query, settings.forecast.lookback, known_pools(inputs))
        claims = inputs is not None and inputs.claim_lookup() is not None
        if inputs is not None and claims and spec.preset == "gpus_requested" and query.split_by == (NODEPOOL_LABEL,):
            state_path = settings.state_dir / claimed_demand.file_name(query.name)
            lookback = settings.forecast.lookback
            sources.append(ClaimedDemandSource(source, query, inputs.claimed_gpus, lookback, state_path))
        else:
            sources.append(source)
    return sources


def _nodeclaim_inputs(settings: Settings, inputs: KubernetesInputs | None) -> NodeClaimInputs:
    """What the NodeClaim watch teaches the pipeline: the lead times (restored and published whether or
    not it watches), each pool's launch record, and the pool a target's replay runs."""
    if inputs is None:
        return {}
    watching = settings.inputs is not None and settings.inputs.nodeclaims
    return {
        "lead_times": inputs.lead_times,
        "launches": inputs.launches if watching else None,
        "learned_launches": inputs.learned_launches,
    }


def _kueue_inputs(settings: Settings, inputs: KubernetesInputs | None) -> KueueFields:
    """What Kueue's queues give the pipeline (empty unless ``inputs.kueue``): the Workloads counted
    ahead, served as windows, and the record of all those waiting, a signal of its own."""
    if inputs is None or inputs.kueue is None:
        queued = inputs.queued if inputs is not None else nothing_queued  # empty: no Kueue
        return {"queued": queued, "record_queued": nothing_recorded, "queued_workloads": None}
    waiting = QueuedWorkloadRecord(inputs.kueue_waiting, settings.forecast.lookback)
    return {"queued": inputs.queued, "record_queued": waiting.record, "queued_workloads": waiting}


class KueueFields(TypedDict):
    """The pipeline's fields :func:`_kueue_inputs` fills."""

    queued: QueuedFunction
    record_queued: Callable[[datetime], None]
    queued_workloads: QueuedWorkloadRecord | None


class NodeClaimInputs(TypedDict, total=False):
    """The pipeline's fields :func:`_nodeclaim_inputs` fills."""

    lead_times: LeadTimeHistory
    launches: LaunchRecord | None
    learned_launches: LearnedLaunchesFunction


def live_scorecard(
    settings: Settings, inputs: KubernetesInputs | None, prometheus: PrometheusSource | None
) -> LiveScorecard:
    """The live scorecard, fed by the Pending-pod watch (GPUs short, waits, window starts), the Kueue
    Workload watch (queue waits, with the Pending-pod watch) and by
    Prometheus (GPUs held and used, in the units and pools of the ``gpus_requested`` signals);
    restored from the state directory."""
    plans = metric_plans(settings)
    placeholders = {p.placeholder_namespace for p in plans if p.placeholder_namespace}
    if settings.inputs is not None:
        placeholders |= set(settings.inputs.placeholder_namespaces)
    watching = inputs is not None and settings.inputs is not None and settings.inputs.pending_pods
    scorecard = LiveScorecard(
        headroom_metrics=[plan.metric for plan in plans if plan.kind == "headroom"],
        short_gpus=inputs.short_gpus if watching and inputs is not None else None,
        capacity=(
            PoolCapacity(
                prometheus, sorted(placeholders), pod_gpu_units(settings.signals), pod_pool_label(settings.signals)
            )
            if prometheus is not None
            else None
        ),
        state_path=settings.state_dir / SCORECARD_FILE,
        dra_gpus=inputs.dra_gpus if inputs is not None else None,
    )
    if watching and inputs is not None:
        scorecard.pods = PodOutcomes(pod_pool=inputs.pod_gpus_and_pool, job=inputs.job, record=scorecard.record)
        inputs.pod_listeners.append(scorecard.pods.on_change)
    kueue = inputs.kueue if inputs is not None else None
    if inputs is not None and kueue is not None:  # Kueue Workloads' queue waits
        scorecard.workloads = WorkloadOutcomes(
            pools=_workload_pools(inputs, kueue), record=scorecard.record_queue_wait, jobs=inputs.job
        )
        inputs.pod_listeners.append(scorecard.workloads.on_pod_change)
    elif prometheus is not None:  # no Workload watched: Kueue's own wait histograms, where it is scraped
        scorecard.kueue_histograms = KueueWaitHistograms(prometheus)
    scorecard.restore()
    if scorecard.workloads is not None and kueue is not None:  # after what was counted is restored
        kueue.add_workload_listener(scorecard.workloads.on_workload_change)
    return scorecard


def _workload_pools(inputs: KubernetesInputs, kueue: KueueInputs) -> WorkloadPools:
    """An admitted Workload's pools, as the demand count places it; None until the watches it reads listed."""

    def pools(workload: Mapping[str, Any]) -> Sequence[str] | None:
        if inputs.nodepools_listing():
            return None
        return kueue.workload_pools(workload, inputs.nodepools(), inputs.claim_lookup())

    return pools


async def _start_kubernetes_inputs(
    settings: Settings, kube: ApiClient | None, stack: contextlib.AsyncExitStack
) -> KubernetesInputs | None:
    """The watches of ``settings.inputs`` (CronJobs, Jobs, NodeClaims, NodePools, Pending pods), started."""
    if settings.inputs is None or kube is None:
        return None
    # Pending pods and CronJob windows count GPUs in the units of the signals they are added to.
    inputs = KubernetesInputs(
        inputs=settings.inputs,
        forecast=settings.forecast,
        declared=settings.windows,
        units=pod_gpu_units(settings.signals),
    )
    group = await stack.enter_async_context(WatchGroup(watch_settings(settings.kubernetes)))
    inputs.start(group, kube)
    return inputs


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
