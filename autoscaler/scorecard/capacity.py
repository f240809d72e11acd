"""GPUs each pool holds and uses now, from kube-state-metrics in Prometheus, for the live scorecard.

Held: allocatable GPUs of the pool's nodes (``presets.gpus_allocatable``). Used: GPUs requested by
pods on them outside the placeholder namespaces (``presets.gpus_requested``, the value at the
minute, not its peak). Both in the served demand's GPU units (``adapters.gpu_units``: other vendors'
resources, MIG, time-slicing) and by the pool its ``nodepool_label`` names, as the ``gpus_requested``
signals count them; the caller adds what DRA claims hold and take, which kube-state-metrics does not
export. Busy: dcgm-exporter's
``DCGM_FI_DEV_GPU_UTIL`` averaged over the pool's GPUs (``presets.gpu_utilization``), as a share;
absent where dcgm-exporter does not run. A NaN or infinite answer is
a gap (``promql.to_signals``); a pool whose newest minute is a gap is left out of this sample, and
the caller logs which.

Where no Pending-pod watch runs, capacity waits come from here too: ``kube_pod_status_scheduled_time``
minus ``kube_pod_created`` of pods that request any GPU resource of those units, scheduled in the last
``WAIT_WINDOW`` (the caller counts each pod once, by uid), in the pool of the node they were
scheduled to.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta

import numpy as np

from adapters.gpu_units import GpuUnits
from adapters.prometheus import presets
from adapters.prometheus.client import PrometheusSource
from adapters.prometheus.promql import RawSeries
from adapters.types import NODEPOOL_LABEL, Signal

STEP = timedelta(minutes=1)
WAIT_WINDOW = timedelta(minutes=10)
# (uid, pool, seconds from creation until scheduled)
PodWait = tuple[str, str, float]


def capacity_wait_promql(
    window: timedelta,
    exclude_namespaces: Sequence[str] = (),
    units: GpuUnits | None = None,
    nodepool_label: str = presets.KSM_NODEPOOL_LABEL,
) -> str:
    """Per pod that requests GPUs of ``units`` and was scheduled within ``window`` before the evaluation
    time: seconds it waited, labelled with its ``uid`` and ``nodepool``."""
    excluded = presets.excluding(exclude_namespaces)
    pod = "namespace, pod, uid"
    scheduled = f"max by ({pod}) (kube_pod_status_scheduled_time)"
    waited = f"({scheduled} - on ({pod}) max by ({pod}) (kube_pod_created))"
    on_node = f'{waited} * on ({pod}) group_left (node) (max by ({pod}, node) (kube_pod_info{{node!=""}}) * 0 + 1)'
    requests = presets.gpu_units(
        "kube_pod_container_resource_requests", ("namespace", "pod", "container"), units or GpuUnits(), excluded
    )
    gpus = f"sum by (namespace, pod) ({requests}) > 0"
    recent = f"{scheduled} > time() - {int(window.total_seconds())}"
    pooled = presets.with_nodepool(on_node, nodepool_label)
    return f"max by ({pod}, nodepool) (({pooled}) and on ({pod}) ({recent}) and on (namespace, pod) ({gpus}))"


class PoolCapacity:
    def __init__(
        self,
        prometheus: PrometheusSource,
        placeholder_namespaces: Sequence[str] = (),
        units: GpuUnits | None = None,
        nodepool_label: str = presets.KSM_NODEPOOL_LABEL,
    ) -> None:
        self.prometheus = prometheus
        units = units or GpuUnits()
        self.waits_promql = capacity_wait_promql(WAIT_WINDOW, placeholder_namespaces, units, nodepool_label)
        whole, mig, sliced = units.whole, units.mig, units.time_slicing
        self.held = presets.gpus_allocatable(
            resource=whole, mig=mig, time_slicing=sliced, step=STEP, nodepool_label=nodepool_label,
            name="scorecard_gpus_held", liveness=None,
        )  # fmt: skip
        # DCGM utilization in percent, averaged over the pool's GPUs (absent without dcgm-exporter).
        self.utilization = presets.gpu_utilization(
            by=(NODEPOOL_LABEL,), step=STEP, nodepool_label=nodepool_label, name="scorecard_gpu_utilization",
            liveness=None,
        )  # fmt: skip
        self.used = presets.gpus_requested(
            resource=whole, mig=mig, time_slicing=sliced, step=STEP, nodepool_label=nodepool_label,
            name="scorecard_gpus_used", exclude_namespaces=tuple(placeholder_namespaces), per_step="last",
            liveness=None,
        )  # fmt: skip

    async def read(self, now: datetime) -> tuple[dict[str, float], dict[str, float]]:
        """Held and used GPUs per pool at the newest minute up to ``now``; raises ``AdapterError``."""
        held = await self.prometheus.backfill(self.held, now - STEP, now)
        used = await self.prometheus.backfill(self.used, now - STEP, now)
        return _newest(held), _newest(used)

    async def busy(self, now: datetime) -> dict[str, float]:
        """Each pool's GPUs' mean busy share (0 to 1) at the newest minute; pools without DCGM series
        are absent, a gap is NaN (the caller refuses it); raises ``AdapterError``."""
        utilization = await self.prometheus.backfill(self.utilization, now - STEP, now)
        return {pool: percent / 100.0 for pool, percent in _newest(utilization).items()}

    async def waits(self, now: datetime) -> list[PodWait]:
        """Capacity waits of GPU pods scheduled in the last ``WAIT_WINDOW``; raises ``AdapterError``."""
        found = await self.prometheus.query_range(self.waits_promql, now, now, STEP)
        return [wait for series in found if (wait := _pod_wait(series)) is not None]


def _pod_wait(series: RawSeries) -> PodWait | None:
    """A pod's wait; None for a garbled one (NaN, negative, no uid), which the caller cannot count."""
    values = series.values[np.isfinite(series.values)]
    uid = series.labels.get("uid", "")
    if not len(values) or not uid or values[-1] < 0 or not math.isfinite(values[-1]):
        return None
    return uid, series.labels.get(NODEPOOL_LABEL, ""), float(values[-1])


def _newest(signals: Sequence[Signal]) -> dict[str, float]:
    """Each pool's newest point; NaN where it is a gap (the caller says so)."""
    found: dict[str, float] = {}
    for signal in signals:
        values = signal.series.to_numpy(dtype=np.float64)
        found[signal.labels.get(NODEPOOL_LABEL, "")] = float(values[-1]) if len(values) else float("nan")
    return found
