"""Shards and standby models on ``/metrics`` (docs/high-availability.md): which shards this replica
owns, and how many of the other shards' models it holds fitted for a takeover."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from autoscaler.replication.shards import Sharding


class ShardMetrics(Collector):
    def __init__(self, sharding: Callable[[], Sharding | None]) -> None:
        self._sharding = sharding

    def collect(self) -> Iterable[Metric]:
        sharding = self._sharding()
        if sharding is None:
            return
        ownership = sharding.ownership
        yield GaugeMetricFamily(
            "gpu_autoscaler_shards_owned", "Shards whose Lease this replica holds", value=len(ownership.owned())
        )
        yield GaugeMetricFamily(
            "gpu_autoscaler_shard_replicas_live", "Live replicas counted at the last Lease round", value=ownership.live
        )
        standby = sharding.standby
        if standby is None:
            return
        yield GaugeMetricFamily(
            "gpu_autoscaler_standby_models",
            "Series of shards other replicas own whose published model this replica holds fitted",
            value=standby.held(),
        )
        yield GaugeMetricFamily(
            "gpu_autoscaler_standby_models_due",
            "Standby fits due at the last pass (-1 before the first): a takeover of those series refits",
            value=-1 if standby.due_count is None else standby.due_count,
        )
        yield GaugeMetricFamily(
            "gpu_autoscaler_standby_ready",
            "1 once every standby has been held: a replica still warming takes no shard from a live one",
            value=1 if standby.ready() else 0,
        )
        fits = CounterMetricFamily("gpu_autoscaler_standby_fits", "Standby fits by outcome", labels=["outcome"])
        fits.add_metric(["done"], standby.fits)
        fits.add_metric(["failed"], standby.failures)
        yield fits
