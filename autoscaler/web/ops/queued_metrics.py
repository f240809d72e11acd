"""Kueue on ``/metrics`` (docs/kueue.md): per pool, the GPUs of the Workloads waiting with no pod yet
at the last refresh (read from the record at scrape time); and, where no Workload is watched, each
ClusterQueue's waits as Kueue's own histograms give them (``scorecard.kueue_histograms``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from autoscaler.scorecard.kueue_histograms import QUANTILES, WINDOW, QueueWaits


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


class KueueWaitMetrics(Collector):
    def __init__(self, waits: Callable[[], QueueWaits]) -> None:
        self._waits = waits

    def collect(self) -> Iterable[Metric]:
        days = f"{WINDOW.total_seconds() / 86400:g}"
        seconds = GaugeMetricFamily(
            "gpu_autoscaler_kueue_wait_seconds",
            f"Kueue Workloads' waits per ClusterQueue over the last {days} days, from Kueue's histograms "
            "(quota: to QuotaReserved; admission_check: QuotaReserved to Admitted; admission: to Admitted)",
            labels=["cluster_queue", "wait", "quantile"],
        )
        counted = GaugeMetricFamily(
            "gpu_autoscaler_kueue_waits",
            f"Kueue Workloads whose wait ended in the last {days} days, per ClusterQueue, from Kueue's histograms",
            labels=["cluster_queue", "wait"],
        )
        for queue, kinds in sorted(self._waits().items()):
            for kind, figures in sorted(kinds.items()):
                if (count := figures.get("count")) is not None:
                    counted.add_metric([queue, kind], count)
                for name, level in QUANTILES.items():
                    if (value := figures.get(name)) is not None:
                        seconds.add_metric([queue, kind, f"{level:g}"], value)
        yield from (seconds, counted)
