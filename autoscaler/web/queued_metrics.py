"""What waits in Kueue's queues on ``/metrics`` (docs/kueue.md): per pool, the GPUs of the Workloads
waiting with no pod yet at the last refresh, read from the record at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class QueuedWorkloadMetrics(Collector):
    def __init__(self, newest: Callable[[], Mapping[str, float]]) -> None:
        self._newest = newest

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "gpu_autoscaler_kueue_waiting_gpus",
            "GPUs of Kueue Workloads waiting with no pod yet, pending (whatever their quota) or admitted "
            "before their pods exist, at the last refresh; a signal of its own, not in gpus_requested",
            labels=["nodepool"],
        )
        for pool, gpus in sorted(self._newest().items()):
            family.add_metric([pool], gpus)
        yield family
