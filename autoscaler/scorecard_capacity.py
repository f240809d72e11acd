"""GPUs each pool holds and uses now, from kube-state-metrics in Prometheus, for the live scorecard.

Held: allocatable GPUs of the pool's nodes (``presets.gpus_allocatable``). Used: GPUs requested by
pods on them outside the placeholder namespaces (``presets.gpus_requested``, the value at the
minute, not its peak). Both by ``nodepool``, as the signals count GPUs. A NaN or infinite answer is
a gap (``promql.to_signals``); a pool whose newest minute is a gap is left out of this sample, and
the caller logs which.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import numpy as np

from adapters import presets
from adapters.prometheus import PrometheusSource
from adapters.types import NODEPOOL_LABEL, Signal

STEP = timedelta(minutes=1)


class PoolCapacity:
    def __init__(self, prometheus: PrometheusSource, placeholder_namespaces: Sequence[str] = ()) -> None:
        self.prometheus = prometheus
        self.held = presets.gpus_allocatable(step=STEP, name="scorecard_gpus_held", liveness=None)
        self.used = presets.gpus_requested(
            step=STEP,
            name="scorecard_gpus_used",
            exclude_namespaces=tuple(placeholder_namespaces),
            per_step="last",
            liveness=None,
        )

    async def read(self, now: datetime) -> tuple[dict[str, float], dict[str, float]]:
        """Held and used GPUs per pool at the newest minute up to ``now``; raises ``AdapterError``."""
        held = await self.prometheus.backfill(self.held, now - STEP, now)
        used = await self.prometheus.backfill(self.used, now - STEP, now)
        return _newest(held), _newest(used)


def _newest(signals: Sequence[Signal]) -> dict[str, float]:
    """Each pool's newest point; NaN where it is a gap (the caller says so)."""
    found: dict[str, float] = {}
    for signal in signals:
        values = signal.series.to_numpy(dtype=np.float64)
        found[signal.labels.get(NODEPOOL_LABEL, "")] = float(values[-1]) if len(values) else float("nan")
    return found
