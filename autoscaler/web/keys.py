"""Typed application state, one key per thing the routes share; ``app.create_app`` fills them.

The external metrics API reads the narrow :class:`MetricsProvider`; inspection, the page and
self-metrics read the whole snapshot through :class:`SnapshotSource`. Both keys hold the same
provider object in the service.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from aiohttp import web

from autoscaler.provider import MetricsProvider, SnapshotSource
from autoscaler.web.auth import AccessControl, User
from autoscaler.web.readiness import Readiness
from autoscaler.web.self_metrics import SelfMetrics

Clock = Callable[[], datetime]

METRICS_PROVIDER = web.AppKey("metrics_provider", MetricsProvider)
SNAPSHOTS = web.AppKey("snapshots", SnapshotSource)
ACCESS = web.AppKey("access", AccessControl)
READINESS = web.AppKey("readiness", Readiness)
SELF_METRICS = web.AppKey("self_metrics", SelfMetrics)
# Staleness in the inspection API and the page is measured against this clock; tests replace it.
CLOCK: web.AppKey[Clock] = web.AppKey("clock")
USER = web.RequestKey("user", User)
