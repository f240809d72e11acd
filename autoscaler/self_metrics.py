"""The service's own Prometheus metrics, on its own registry (never the process-wide default)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from autoscaler.provider import Snapshot


class SnapshotCollector(Collector):
    """Exports the served values at scrape time, read from the current snapshot.

    Each series keeps its own labels, so KEDA's Prometheus scaler or Grafana can read exactly what an
    HPA would (the coexistence path when another provider owns the external metrics API).
    """

    def __init__(self, current: Callable[[], Snapshot]) -> None:
        self._current = current

    def collect(self) -> Iterable[Metric]:
        snapshot = self._current()
        served = Metric("gpu_autoscaler_served_value", "Value served on the external metrics API", "gauge")
        age = Metric(
            "gpu_autoscaler_series_age_seconds", "Seconds since the inputs of a served value were pulled", "gauge"
        )
        now = snapshot.created_at
        for name, series_list in snapshot.series.items():
            for series in series_list:
                labels = {"metric": name, **{f"label_{k}": v for k, v in series.labels.items()}}
                served.add_sample("gpu_autoscaler_served_value", labels, series.value)
                age.add_sample(
                    "gpu_autoscaler_series_age_seconds", labels, max(0.0, (now - series.timestamp).total_seconds())
                )
        yield served
        yield age


class SelfMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
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
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=self.registry,
        )
        self.auth_failures = Counter(
            "gpu_autoscaler_auth_failures",
            "Requests refused by authentication (401) or authorisation (403)",
            ["code"],
            registry=self.registry,
        )

    def watch_snapshots(self, current: Callable[[], Snapshot]) -> None:
        self.registry.register(SnapshotCollector(current))
