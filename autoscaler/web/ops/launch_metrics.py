"""The launch record on ``/metrics`` (docs/launch-outcomes.md): counters of failed, Ready and slow
NodeClaim launches per pool since this process started, and which pools keep failing now."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from adapters.kubernetes.launch_record import LaunchRecord


class LaunchMetrics(Collector):
    def __init__(self, record: Callable[[], LaunchRecord]) -> None:
        self._record = record

    def collect(self) -> Iterable[Metric]:
        record = self._record()
        failures = CounterMetricFamily(
            "gpu_autoscaler_nodeclaim_launch_failures",
            "NodeClaims that failed to become Ready, by the reason read from their conditions",
            labels=["pool", "reason"],
        )
        ready = CounterMetricFamily(
            "gpu_autoscaler_nodeclaim_launches_ready", "NodeClaims that became Ready", labels=["pool"]
        )
        slow = CounterMetricFamily(
            "gpu_autoscaler_nodeclaim_launches_slow",
            "NodeClaims that became Ready later than the slow_after setting",
            labels=["pool"],
        )
        failing = GaugeMetricFamily(
            "gpu_autoscaler_nodepool_launches_failing",
            "1 while the pool's launches keep failing and demand is planned in the next pool",
            labels=["pool"],
        )
        now = record.clock()
        for pool, launches in sorted(record.pools.items()):
            for reason, count in sorted(launches.failures_by_reason().items()):
                failures.add_metric([pool, reason], count)
            ready.add_metric([pool], sum(launches.ready.values()))
            slow.add_metric([pool], sum(launches.slow.values()))
            failing.add_metric([pool], 1.0 if record.failing(pool, now) is not None else 0.0)
        yield from (failures, ready, slow, failing)
