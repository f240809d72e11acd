"""What waits in Kueue's queues beside each served series (docs/kueue.md): its pool's record of the GPUs
of Workloads waiting with no pod yet, on the inspection API and the page. A signal of its own: the
series' history and value do not hold it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta
from html import escape
from typing import Any

import numpy as np
import pandas as pd
from aiohttp import web

from adapters.types import NODEPOOL_LABEL
from autoscaler.refresh.queued_record import QueuedWorkloadRecord
from autoscaler.web.ops.queued_metrics import QueuedWorkloadMetrics
from autoscaler.web.ops.views import SeriesView, history_tail
from autoscaler.web.shared.keys import QUEUED_WORKLOADS
from autoscaler.web.shared.self_metrics import SelfMetrics

ABOUT = (
    "GPUs of the Kueue Workloads waiting with no pod yet in this pool at each refresh: pending, whatever "
    "their quota, or admitted before their pods exist. The demand Kueue's quota holds back, which the "
    "GPUs-requested history never sees; shown apart, never added to it nor served."
)


def attach(record: QueuedWorkloadRecord | None, ops_app: web.Application, self_metrics: SelfMetrics) -> None:
    """Show the record (None: Kueue not watched) on the ops port's API and page, and on /metrics."""
    if record is not None:
        ops_app[QUEUED_WORKLOADS] = record
        self_metrics.registry.register(QueuedWorkloadMetrics(record.newest))


def queued_history(record: QueuedWorkloadRecord | None, view: SeriesView, window: timedelta) -> pd.Series | None:
    """The last ``window`` of the record of the view's pool (the pool-less series': Workloads that fit no
    pool); None without Kueue or before the first refresh."""
    if record is None:
        return None
    found = record.history(view.labels.get(NODEPOOL_LABEL, ""))
    return history_tail(found, window) if found is not None else None


def queued_histories(app: web.Application, views: Sequence[SeriesView], window: timedelta) -> list[pd.Series | None]:
    """Each view's ``queued_history`` in the record ``attach`` put on ``app`` (None each without Kueue)."""
    record = app.get(QUEUED_WORKLOADS)
    return [queued_history(record, view, window) for view in views]


def queued_json(series: pd.Series | None) -> dict[str, Any] | None:
    if series is None:
        return None
    stamps = pd.DatetimeIndex(series.index).tz_convert("UTC").strftime("%Y-%m-%dT%H:%M:%SZ")
    values = np.asarray(series.to_numpy(), dtype=np.float64)
    return {"timestamps": list(stamps), "values": [float(v) if math.isfinite(v) else None for v in values]}


def queued_panel(series: pd.Series | None) -> str:
    """A box with the GPUs waiting now and the most in the span shown, and what they are."""
    if series is None or not len(series):
        return ""
    now, most = float(series.iloc[-1]), float(series.max())
    return (
        '<div class="queued"><h3>Waiting in Kueue\'s queues</h3><div class="facts">'
        f'<div class="fact"><span class="name">GPUs waiting now</span><span class="number">{now:g}</span></div>'
        f'<div class="fact"><span class="name">Most in the span shown</span><span class="number">{most:g}'
        f"</span></div></div><p>{escape(ABOUT)}</p></div>"
    )
