"""Kueue Workloads' queue waits from Kueue's own histograms in Prometheus, where the service reads no
Workload (``inputs.kueue`` off, or no Kubernetes API): docs/kueue.md, "How long Workloads wait".

Kueue exports, per ClusterQueue (label ``cluster_queue``; also ``priority_class`` and ``replica_role``
in recent releases, summed over here), the histograms ``kueue_quota_reserved_wait_time_seconds``
(creation, or requeueing, to ``QuotaReserved``), ``kueue_admission_checks_wait_time_seconds``
(``QuotaReserved`` to ``Admitted``) and ``kueue_admission_wait_time_seconds`` (creation to
``Admitted``). Each is read over ``WINDOW`` (a week: the targets' default tune window) ending at the
collection: the Workloads counted (``increase`` of ``_count``) and the p50 and p95
(``histogram_quantile`` of the buckets' ``increase``, which interpolates within a bucket: Kueue's
buckets are 1, 2.5, 5, 10, ... 10240 s). No maximum: a histogram keeps none.

Reported per ClusterQueue: which pools a queue's Workloads land in needs its flavors, from the
watches that are not running when this is read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from adapters.prometheus.client import PrometheusSource
from adapters.prometheus.promql import RawSeries

WINDOW = timedelta(days=7)
STEP = timedelta(minutes=1)
# A week's figures move slowly, and each read scans a week of every bucket: read again this often.
REREAD = timedelta(minutes=10)
# The scorecard's name of each wait -> Kueue's histogram of it.
HISTOGRAMS: Mapping[str, str] = {
    "quota": "kueue_quota_reserved_wait_time_seconds",
    "admission_check": "kueue_admission_checks_wait_time_seconds",
    "admission": "kueue_admission_wait_time_seconds",
}
QUANTILES = {"p50": 0.5, "p95": 0.95}
# cluster queue -> wait -> {"count", "p50", "p95"} (None: no Workload waited in the window)
QueueWaits = dict[str, dict[str, dict[str, float | None]]]


def quantile_promql(histogram: str, quantile: float, window: timedelta = WINDOW) -> str:
    """The ``quantile`` of the waits each ClusterQueue's Workloads ended in the ``window`` before the
    evaluation time."""
    increase = f"increase({histogram}_bucket[{int(window.total_seconds())}s])"
    return f"histogram_quantile({quantile:g}, sum by (cluster_queue, le) ({increase}))"


def count_promql(histogram: str, window: timedelta = WINDOW) -> str:
    return f"sum by (cluster_queue) (increase({histogram}_count[{int(window.total_seconds())}s]))"


class KueueWaitHistograms:
    """Reads Kueue's wait histograms; ``read`` raises ``AdapterError`` as the client does."""

    def __init__(self, prometheus: PrometheusSource, window: timedelta = WINDOW) -> None:
        self.prometheus = prometheus
        self.window = window
        self._last: tuple[datetime, QueueWaits] | None = None  # the last read and when

    async def read(self, now: datetime) -> QueueWaits:
        """Each ClusterQueue's waits over the window ending at ``now`` (the last read's, if it is less
        than ``REREAD`` old); a queue none of whose histograms has a series is absent (Kueue not
        scraped: nothing)."""
        if self._last is not None and timedelta(0) <= now - self._last[0] < REREAD:
            return self._last[1]
        found: QueueWaits = {}
        for kind, histogram in HISTOGRAMS.items():
            queries = {"count": count_promql(histogram, self.window)}
            queries |= {name: quantile_promql(histogram, q, self.window) for name, q in QUANTILES.items()}
            for name, promql in queries.items():
                for series in await self.prometheus.query_range(promql, now, now, STEP):
                    queue = series.labels.get("cluster_queue", "")
                    found.setdefault(queue, {}).setdefault(kind, _unknown())[name] = _newest(series)
        for queue_waits in found.values():
            for kind in HISTOGRAMS:
                queue_waits.setdefault(kind, _unknown())
        self._last = (now, found)
        return found


def _unknown() -> dict[str, float | None]:
    return {"count": None, **dict.fromkeys(QUANTILES)}


def _newest(series: RawSeries) -> float | None:
    """The answer's value to the microsecond (PromQL's interpolation leaves 36.99999999999999 for 37);
    None for NaN (no Workload in the window: histogram_quantile of zeros) or no count of seconds."""
    values = series.values[np.isfinite(series.values)] if len(series.values) else np.array([])
    if not len(values) or values[-1] < 0 or not math.isfinite(values[-1]):
        return None
    return round(float(values[-1]), 6)


def waits_json(waits: QueueWaits, window: timedelta = WINDOW) -> list[dict[str, Any]]:
    """As ``GET /api/v1/scorecard`` shows them (``cluster_queues``)."""
    return [
        {"cluster_queue": queue, "window_seconds": window.total_seconds(), "waits": waits[queue]}
        for queue in sorted(waits)
    ]
