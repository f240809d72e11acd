"""Typed values the adapters hand to the rest of the service."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pandas as pd

# The Kubernetes node label Karpenter puts on every node it launches, naming its NodePool.
KARPENTER_NODEPOOL_LABEL = "karpenter.sh/nodepool"
# The label that names a node pool on series and windows (joined from KARPENTER_NODEPOOL_LABEL).
NODEPOOL_LABEL = "nodepool"
# A ScheduledWindow's source for demand that waits in a queue now, without pods (a Kueue Workload):
# open from now, served like a window that is due, never in the history.
QUEUED_SOURCE = "workload"
NO_OFFSET = pd.Timedelta(0)
# What tells the time; tests give a fake one.
Clock = Callable[[], datetime]


class AdapterError(Exception):
    """Base of every error an adapter raises; callers never see the HTTP library's types."""


@dataclass(frozen=True)
class Signal:
    """One time series pulled from a backend.

    ``series`` is float64 on a tz-aware UTC DatetimeIndex at a regular ``step``; missing samples are
    NaN (a gap is a gap, never a zero). ``label_offset``: how far a point's label is before the moment
    its value was read (one step for a step's peak, labelled by the step's start).
    """

    name: str
    labels: Mapping[str, str]
    series: pd.Series
    step: pd.Timedelta
    label_offset: pd.Timedelta = NO_OFFSET  # immutable, so one shared default is safe

    def newest_at(self) -> datetime | None:
        """When the newest point that is not a gap was read; None if every point is a gap."""
        observed = np.flatnonzero(self.series.notna().to_numpy())
        if not len(observed):
            return None
        newest: pd.Timestamp = self.series.index[observed[-1]] + self.label_offset
        return newest.to_pydatetime()


@dataclass(frozen=True)
class ScheduledWindow:
    """Known future GPU demand: a training window from a CronJob or from the config file, or GPUs
    waiting in a queue now (``QUEUED_SOURCE``)."""

    source: str  # "cronjob", "config" or QUEUED_SOURCE
    namespace: str
    name: str
    start: datetime  # tz-aware UTC: when the work is due to start (the cron fire time)
    end: datetime  # tz-aware UTC: start + expected duration
    gpus: float
    labels: Mapping[str, str] = field(default_factory=dict)
    duration_source: str = "setting"  # "jobs", "activeDeadlineSeconds" or "setting"
    # How the window's NodePool was chosen when that was a choice (several pools fit, or none did);
    # empty when one pool fits or the window names its pool itself.
    placement: str = ""
