"""The live scorecard on ``/metrics``: counters and histograms Prometheus can rate over any window.

Read at scrape time from each pool's running totals (``scorecard.pools``), which only grow and carry
on across restarts, so ``increase(gpu_autoscaler_short_gpu_seconds_total[1h]) / 60`` is the hour's
short GPU-minutes and ``rate`` of the coverage counters is live coverage (docs/scorecard.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from autoscaler.scorecard.pools import PoolScorecard

Cards = Callable[[], Mapping[str, PoolScorecard]]
_POOL = ["nodepool"]
_SHORT_COUNTERS = ("short_gpu_seconds", "minutes_short", "minutes_scored")


class ScorecardMetrics(Collector):
    def __init__(self, cards: Cards, quantiles: Mapping[str, float]) -> None:
        self._cards = cards
        self._quantiles = dict(quantiles)  # headroom metric -> the quantile it serves

    def collect(self) -> Iterable[Metric]:
        cards = self._cards()
        counters = {
            "short_gpu_seconds": "GPU-seconds requested by pods waiting for capacity",
            "minutes_short": "Minutes with any GPU short",
            "minutes_scored": "Minutes the live scorecard sampled with GPUs short known",
            "idle_gpu_seconds": "GPU-seconds held by the pool's nodes and not requested by workloads",
            "held_gpu_seconds": "GPU-seconds of allocatable GPUs of the pool's nodes",
            "used_gpu_seconds": "GPU-seconds requested by non-placeholder pods on the pool's nodes",
        }
        short_now = GaugeMetricFamily(
            "gpu_autoscaler_gpus_short", "GPUs requested by pods waiting for capacity at the last sample", labels=_POOL
        )
        busy_now = GaugeMetricFamily(
            "gpu_autoscaler_gpu_busy_ratio",
            "Mean busy share of the pool's GPUs at the last sample (dcgm-exporter's DCGM_FI_DEV_GPU_UTIL / 100)",
            labels=_POOL,
        )
        for pool, card in sorted(cards.items()):
            if card.last_sample is not None and not math.isnan(card.last_sample[1]):  # NaN: unknown, absent
                short_now.add_metric([pool], card.last_sample[1])
            if card.busy:
                busy_now.add_metric([pool], card.busy[-1][1])
        yield from (short_now, busy_now)
        for name, documentation in counters.items():
            family = CounterMetricFamily(f"gpu_autoscaler_{name}", documentation, labels=_POOL)
            for pool, card in _reported(cards, name):
                family.add_metric([pool], getattr(card.totals, name))
            yield family
        for name, documentation, attribute in (
            ("capacity_wait_seconds", "Seconds from a GPU pod's creation until it was scheduled", "wait_histogram"),
            ("window_start_delay_seconds", "Seconds from a CronJob run's scheduled time until all its pods ran",
             "delay_histogram"),
        ):  # fmt: skip
            histogram = HistogramMetricFamily(f"gpu_autoscaler_{name}", documentation, labels=_POOL)
            for pool, card in sorted(cards.items()):
                counts = getattr(card, attribute)
                buckets = [(_bound(bound), count) for bound, count in counts.cumulative()]
                histogram.add_metric([pool], buckets, counts.total_s)
            yield histogram
        covered = CounterMetricFamily(
            "gpu_autoscaler_coverage_covered",
            "Served headroom values that covered the rise realized over their lead time",
            labels=["nodepool", "metric"],
        )  # fmt: skip
        judged = CounterMetricFamily(
            "gpu_autoscaler_coverage_judged", "Served headroom values judged once their lead time passed",
            labels=["nodepool", "metric"],
        )  # fmt: skip
        target = GaugeMetricFamily(
            "gpu_autoscaler_coverage_quantile", "The quantile a headroom metric serves: the coverage it aims at",
            labels=["nodepool", "metric"],
        )  # fmt: skip
        for pool, card in sorted(cards.items()):
            for metric, (hits, count) in sorted(card.coverage_totals.items()):
                covered.add_metric([pool, metric], hits)
                judged.add_metric([pool, metric], count)
                if metric in self._quantiles:
                    target.add_metric([pool, metric], self._quantiles[metric])
        yield from (covered, judged, target, _queue_waits(cards))


def _reported(cards: Mapping[str, PoolScorecard], counter: str) -> list[tuple[str, PoolScorecard]]:
    """The pools a counter is exported for: a count of GPUs short is absent, not 0, for a pool whose GPUs
    short were never known (no Pending-pod watch)."""
    return [
        (pool, card)
        for pool, card in sorted(cards.items())
        if counter not in _SHORT_COUNTERS or card.totals.minutes_scored
    ]


def _queue_waits(cards: Mapping[str, PoolScorecard]) -> HistogramMetricFamily:
    """Kueue Workloads' waits, one histogram per pool and kind (``scorecard.queue_waits``); absent for a
    pool no Workload's wait was recorded in (most clusters run no Kueue: 45 series per pool saved)."""
    histogram = HistogramMetricFamily(
        "gpu_autoscaler_workload_queue_wait_seconds",
        "Seconds a Kueue Workload waited: for quota (creation to QuotaReserved), for its admission checks "
        "(to Admitted), for capacity (to the last of its pods running)",
        labels=[*_POOL, "wait"],
    )
    for pool, card in sorted(cards.items()):
        if not any(counts.count for counts in card.queue.histograms.values()):
            continue
        for kind, counts in card.queue.histograms.items():
            buckets = [(_bound(bound), count) for bound, count in counts.cumulative()]
            histogram.add_metric([pool, kind], buckets, counts.total_s)
    return histogram


def _bound(seconds: float) -> str:
    """A bucket's ``le`` as client_python's own histograms write it (``300.0``, ``+Inf``)."""
    return "+Inf" if math.isinf(seconds) else repr(float(seconds))
