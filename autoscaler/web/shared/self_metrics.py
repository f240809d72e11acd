"""The service's own Prometheus metrics, on its own registry (never the process-wide default).

Request counters and latencies are updated by the API middleware. Everything about forecasts and
refreshes is read at scrape time by custom collectors, from the current snapshot and the refresher's
stats, so a scrape always shows exactly what is being served and nothing has to be kept in sync.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from adapters.kubernetes.pool_matching import UnplacedDemand
from adapters.types import Clock
from autoscaler.actuation.buffer_sizing import BufferState
from autoscaler.policy import lead_slice
from autoscaler.replication.publication import Publisher
from autoscaler.serving.provider import ServedSeries, Snapshot
from autoscaler.targets.plans import RefreshStats

_INVALID_LABEL_CHARACTERS = re.compile(r"[^a-zA-Z0-9_]")


def series_labels(metric: str, labels: Mapping[str, str]) -> dict[str, str]:
    """``metric`` plus each series label as ``label_<key>``; keys such as ``a.b/c`` become ``label_a_b_c``."""
    return {"metric": metric, **{f"label_{_INVALID_LABEL_CHARACTERS.sub('_', k)}": v for k, v in labels.items()}}


def lead_time_peaks(series: ServedSeries) -> tuple[float, float, float] | None:
    """(quantile level, max upper quantile, max mean) over the lead time the policy looked at.

    The same span the policy takes its peak over; ``None`` when the series carries no forecast.
    """
    provenance = series.provenance
    if provenance is None or not len(provenance.forecast.timestamps):
        return None
    forecast, level = provenance.forecast, provenance.quantile
    if level not in forecast.quantiles:
        return None
    inside = lead_slice(forecast, provenance.decided_at, provenance.lead_time.value)
    upper, mean = forecast.quantiles[level][inside], forecast.mean[inside]
    if not (np.isfinite(upper).any() and np.isfinite(mean).any()):
        return None
    return level, float(np.nanmax(upper)), float(np.nanmax(mean))


class SnapshotCollector(Collector):
    """Served values, forecasts, staleness, models and backtest scores, read from the current snapshot.

    Each series keeps its own labels, so KEDA's Prometheus scaler or Grafana can read exactly what an
    HPA would (the coexistence path when another provider owns the external metrics API).
    """

    def __init__(self, current: Callable[[], Snapshot], clock: Clock | None = None) -> None:
        self._current = current
        self._clock = clock or (lambda: datetime.now(UTC))

    def collect(self) -> Iterable[Metric]:
        snapshot = self._current()
        now = self._clock()
        served = GaugeMetricFamily("gpu_autoscaler_served_value", "Value served on the external metrics API")
        upper = GaugeMetricFamily(
            "gpu_autoscaler_forecast_upper", "Highest forecast at the policy quantile over the lead time"
        )
        mean = GaugeMetricFamily("gpu_autoscaler_forecast_mean", "Highest forecast mean over the lead time")
        age = GaugeMetricFamily(
            "gpu_autoscaler_series_age_seconds", "Seconds since the newest data point behind a served value"
        )
        lead_time = GaugeMetricFamily(
            "gpu_autoscaler_lead_time_seconds", "Lead time the served value looks ahead (node launch to ready)"
        )
        fit = GaugeMetricFamily(
            "gpu_autoscaler_fit_duration_seconds", "Wall time of the last model fit and selection of a series"
        )
        model = GaugeMetricFamily("gpu_autoscaler_model_info", "The model selected by backtest (always 1)")
        pinball = GaugeMetricFamily(
            "gpu_autoscaler_backtest_pinball", "Backtest pinball loss at the policy quantile, per candidate model"
        )
        under = GaugeMetricFamily(
            "gpu_autoscaler_under_provision_rate",
            "Share of backtest points where the selected model's upper forecast was below demand",
        )
        created = GaugeMetricFamily(
            "gpu_autoscaler_snapshot_timestamp_seconds", "When the served snapshot was built (Unix seconds)"
        )
        created.add_metric([], snapshot.created_at.timestamp())
        for name, series_list in snapshot.series.items():
            for series in series_list:
                labels = series_labels(name, series.labels)
                served.add_sample(served.name, labels, series.value)
                age.add_sample(age.name, labels, max(0.0, (now - series.timestamp).total_seconds()))
                self._add_forecast(series, labels, upper, mean, lead_time, fit)
                self._add_models(series, labels, model, pinball, under)
        yield from (served, upper, mean, age, lead_time, fit, model, pinball, under, created)

    @staticmethod
    def _add_forecast(
        series: ServedSeries,
        labels: dict[str, str],
        upper: GaugeMetricFamily,
        mean: GaugeMetricFamily,
        lead_time: GaugeMetricFamily,
        fit: GaugeMetricFamily,
    ) -> None:
        peaks = lead_time_peaks(series)
        if peaks is not None:
            level, upper_peak, mean_peak = peaks
            upper.add_sample(upper.name, {**labels, "quantile": f"{level:g}"}, upper_peak)
            mean.add_sample(mean.name, labels, mean_peak)
        provenance = series.provenance
        if provenance is None:  # restored after a restart: a value and its age, nothing more
            return
        lead_time.add_sample(lead_time.name, labels, provenance.lead_time_seconds)
        fit.add_sample(fit.name, labels, provenance.fit_seconds)

    @staticmethod
    def _add_models(
        series: ServedSeries,
        labels: dict[str, str],
        model: GaugeMetricFamily,
        pinball: GaugeMetricFamily,
        under: GaugeMetricFamily,
    ) -> None:
        provenance = series.provenance
        if provenance is None:
            return
        model.add_sample(model.name, {**labels, "model": provenance.model}, 1.0)
        for candidate, score in sorted(provenance.scores.items()):
            loss = score.get("pinball")
            if loss is not None:
                pinball.add_sample(pinball.name, {**labels, "model": candidate}, loss)
            rate = score.get("under_provision_rate")
            if candidate == provenance.model and rate is not None and math.isfinite(rate):
                under.add_sample(under.name, labels, rate)


class RefreshCollector(Collector):
    """Per-signal pull health and refresh timing, read from the refresher's stats at scrape time.

    ``stats`` returns ``None`` while no refresher runs (before start-up, or with no signals).
    """

    def __init__(self, stats: Callable[[], RefreshStats | None]) -> None:
        self._stats = stats

    def collect(self) -> Iterable[Metric]:
        stats = self._stats()
        last_success = GaugeMetricFamily(
            "gpu_autoscaler_last_success_timestamp_seconds",
            "When a signal was last pulled and fitted successfully (Unix seconds)",
            labels=["signal"],
        )
        failures = CounterMetricFamily(
            "gpu_autoscaler_refresh_failures", "Failed pulls or fits per signal", labels=["signal"]
        )
        refreshes = CounterMetricFamily("gpu_autoscaler_refreshes", "Refreshes run (pull, fit, swap)")
        duration = GaugeMetricFamily(
            "gpu_autoscaler_refresh_duration_seconds", "Wall time of the last refresh (all pulls and fits)"
        )
        if stats is not None:
            for signal in sorted(stats.last_success.keys() | stats.failures.keys()):
                # A signal that never failed still gets a 0, so rate() and increase() work from the start.
                failures.add_metric([signal], stats.failures.get(signal, 0))
                if signal in stats.last_success:
                    last_success.add_metric([signal], stats.last_success[signal].timestamp())
            refreshes.add_metric([], stats.refreshes)
            if stats.refreshes:
                duration.add_metric([], stats.last_duration_s)
        yield from (last_success, failures, refreshes, duration)


class PublicationCollector(Collector):
    """GPUForecast writes by outcome and conflicts met, read from the publisher at scrape time.

    ``publisher`` returns ``None`` where this replica does not publish (nothing is exported then).
    """

    OUTCOMES = ("written", "unchanged", "failed")

    def __init__(self, publisher: Callable[[], Publisher | None]) -> None:
        self._publisher = publisher

    def collect(self) -> Iterable[Metric]:
        publisher = self._publisher()
        if publisher is None:
            return
        stats = publisher.stats
        writes = CounterMetricFamily(
            "gpu_autoscaler_gpuforecast_writes",
            "GPUForecast objects per publication outcome: written, left alone (content unchanged), failed",
            labels=["outcome"],
        )
        for outcome, count in zip(self.OUTCOMES, (stats.writes, stats.unchanged, stats.failures), strict=True):
            writes.add_metric([outcome], count)
        conflicts = CounterMetricFamily(
            "gpu_autoscaler_gpuforecast_conflicts",
            "GPUForecast updates refused with 409 Conflict (then read and retried)",
        )
        conflicts.add_metric([], publisher.writer.counts.conflicts)
        yield from (writes, conflicts)


class UnplacedCollector(Collector):
    """GPUs of demand that fits no NodePool, by kind, read from the Kubernetes inputs at scrape time."""

    KINDS = ("pending_pod", "cronjob")  # always exported, 0 when none: alerts need the series to exist

    def __init__(self, unplaced: Callable[[], Sequence[UnplacedDemand]]) -> None:
        self._unplaced = unplaced

    def collect(self) -> Iterable[Metric]:
        gpus = dict.fromkeys(self.KINDS, 0.0)
        for item in self._unplaced():
            gpus[item.kind] = gpus.get(item.kind, 0.0) + item.gpus
        family = GaugeMetricFamily(
            "gpu_autoscaler_unplaced_gpus",
            "GPUs of Pending pods, CronJob runs and queued Kueue Workloads that fit no Karpenter NodePool "
            "(no pool's headroom counts them)",
            labels=["kind"],
        )
        for kind, value in sorted(gpus.items()):
            family.add_metric([kind], value)
        yield family


class BufferCollector(Collector):
    """Each pool's CapacityBuffer replicas: desired (what the served value asks for; a dry run's would-be
    write), reported (the autoscaler's ``status.replicas``) and expected (its sizing rule on the spec
    as read), and whether quotas limit it (``LimitedByQuotas``), read at scrape time."""

    def __init__(self, states: Callable[[], Sequence[BufferState]]) -> None:
        self._states = states

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "gpu_autoscaler_buffer_replicas", "CapacityBuffer replicas per pool", labels=["pool", "state"]
        )
        limited = GaugeMetricFamily(
            "gpu_autoscaler_buffer_limited_by_quotas",
            "1 while the autoscaler reports LimitedByQuotas=True for the pool's CapacityBuffer, 0 when False",
            labels=["pool"],
        )
        for state in self._states():
            expected = state.sizing.replicas if state.sizing else None
            for kind, value in (
                ("desired", state.desired.replicas),
                ("reported", state.reported),
                ("expected", expected),
            ):
                if value is not None:
                    family.add_metric([state.pool.pool, kind], value)
            condition = state.limited_by_quotas
            if condition is not None:
                limited.add_metric([state.pool.pool], 1.0 if condition.status == "True" else 0.0)
        yield family
        yield limited


# Request latency buckets of both APIs (HTTPS and gRPC), so their histograms compare bucket by bucket.
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class SelfMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._request_children: dict[tuple[str, int], tuple[Counter, Histogram]] = {}
        self.requests = Counter(
            "gpu_autoscaler_api_requests",
            "API requests by route and status code",
            ["route", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "gpu_autoscaler_api_request_duration_seconds",
            "API request latency by route",
            ["route"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        # KEDA's external scaler (autoscaler.keda): its own families, as its methods and status codes
        # are gRPC's (a stream lasts as long as its caller, so only unary calls have a latency).
        self.grpc_requests = Counter(
            "gpu_autoscaler_grpc_requests",
            "gRPC calls to the KEDA external scaler by method and status code (streams counted when they end)",
            ["method", "code"],
            registry=self.registry,
        )
        self.grpc_latency = Histogram(
            "gpu_autoscaler_grpc_request_duration_seconds",
            "Latency of unary gRPC calls to the KEDA external scaler by method",
            ["method"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.grpc_streams = Gauge(
            "gpu_autoscaler_grpc_streams_open",
            "Open gRPC streams of the KEDA external scaler",
            ["method"],
            registry=self.registry,
        )
        self.grpc_trigger_cache_bytes = Gauge(
            "gpu_autoscaler_grpc_trigger_cache_bytes",
            "Weight of the KEDA scaler's parsed-trigger cache (characters of its keys plus an overhead per entry)",
            registry=self.registry,
        )
        self.grpc_handshake_failures = Counter(
            "gpu_autoscaler_grpc_handshake_failures",
            "TLS handshakes the gRPC port refused (read from gRPC core's log; the reason is in the service's log)",
            registry=self.registry,
        )
        self.connections_aborted = Counter(
            "gpu_autoscaler_connections_aborted",
            "Secure-port connections aborted because their client left answers unread for idle_timeout",
            registry=self.registry,
        )
        self.auth_failures = Counter(
            "gpu_autoscaler_auth_failures",
            "Requests refused by authentication (401) or authorisation (403)",
            ["code"],
            registry=self.registry,
        )

    def count_request(self, route: str, status: int, seconds: float) -> None:
        """One API request, counted by route and status and timed by route. The labelled children are
        kept (``labels`` takes a lock and checks its values each time): a few dozen routes by statuses."""
        key = (route, status)
        children = self._request_children.get(key)
        if children is None:  # two threads may both make it: labels() gives both the same children
            children = self._request_children[key] = (
                self.requests.labels(route, str(status)),
                self.latency.labels(route),
            )
        children[0].inc()
        children[1].observe(seconds)

    def watch_snapshots(self, current: Callable[[], Snapshot], clock: Clock | None = None) -> None:
        self.registry.register(SnapshotCollector(current, clock))

    def watch_refreshes(self, stats: Callable[[], RefreshStats | None]) -> None:
        self.registry.register(RefreshCollector(stats))

    def watch_publication(self, publisher: Callable[[], Publisher | None]) -> None:
        self.registry.register(PublicationCollector(publisher))

    def watch_unplaced(self, unplaced: Callable[[], Sequence[UnplacedDemand]]) -> None:
        self.registry.register(UnplacedCollector(unplaced))

    def watch_buffers(self, states: Callable[[], Sequence[BufferState]]) -> None:
        self.registry.register(BufferCollector(states))
