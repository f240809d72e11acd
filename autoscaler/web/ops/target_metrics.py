"""Each headroom's service-level target on ``/metrics``: attained, the target, and the error budget left.

Read at scrape time from ``scorecard.target_status`` (the snapshot's target choices judged on the pools'
live scorecards), for targets on the share of minutes short: the gauges are ratios, and the burn-rate
alerts (manifests/monitoring/prometheusrule.yaml) divide the scorecard's counters by the target gauge.
The error budget is exported for every target that has one (docs/scorecard.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from autoscaler.scorecard.target_status import TargetStatus

Statuses = Callable[[], Mapping[tuple[str, str], TargetStatus]]
_LABELS = ["nodepool", "metric"]
RATIO_KIND = "minutes_short_fraction"


class TargetMetrics(Collector):
    def __init__(self, statuses: Statuses) -> None:
        self._statuses = statuses

    def collect(self) -> Iterable[Metric]:
        attained = GaugeMetricFamily(
            "gpu_autoscaler_target_attained_ratio",
            "Share of the pool's scored minutes with any GPU short, over the window (tune: the target's tune window)",
            labels=[*_LABELS, "window"],
        )
        target = GaugeMetricFamily(
            "gpu_autoscaler_target_ratio", "The target: at most this share of minutes with a GPU short", labels=_LABELS
        )
        budget = GaugeMetricFamily(
            "gpu_autoscaler_error_budget_remaining_ratio",
            "Share of what the target allows over its tune window still unspent (1 - attained / target; <0: overspent)",
            labels=_LABELS,
        )
        for (pool, metric), status in sorted(self._statuses().items()):
            if status.budget_remaining is not None:
                budget.add_metric([pool, metric], status.budget_remaining)
            if status.target.kind != RATIO_KIND:
                continue
            target.add_metric([pool, metric], status.target.value)
            for window, value in status.live.items():
                if value is not None:
                    attained.add_metric([pool, metric, window], value)
        yield from (attained, target, budget)
