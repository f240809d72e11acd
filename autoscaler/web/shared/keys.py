"""Typed application state, one key per thing the routes share; ``app.create_app`` fills them.

The external metrics API reads the narrow :class:`MetricsProvider`; inspection, the page and
self-metrics read the whole snapshot through :class:`SnapshotSource`. Both keys hold the same
provider object in the service.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aiohttp import web

from adapters.kubernetes.launch_record import LaunchRecord
from adapters.kubernetes.pool_matching import UnplacedDemand
from adapters.types import Clock
from autoscaler.actuation.writer import BufferActuator
from autoscaler.refresh.queued_record import QueuedWorkloadRecord
from autoscaler.scorecard.live import LiveScorecard
from autoscaler.selectors import SelectorCache
from autoscaler.serving.provider import MetricsProvider, SnapshotProvider, SnapshotSource
from autoscaler.web.security.auth import AccessControl, DelegatedHTTPAuth, User
from autoscaler.web.shared.readiness import Readiness
from autoscaler.web.shared.self_metrics import SelfMetrics

Unplaced = Callable[[], Sequence[UnplacedDemand]]

METRICS_PROVIDER = web.AppKey("metrics_provider", MetricsProvider)
SNAPSHOTS = web.AppKey("snapshots", SnapshotSource)
# The provider itself, on the API app: KEDA's gRPC scaler (started beside it) reads it and follows its swaps.
PROVIDER = web.AppKey("provider", SnapshotProvider)
ACCESS = web.AppKey("access", AccessControl)
# The plain port's server.http_auth delegated; absent: the plain port answers anyone.
HTTP_AUTH = web.AppKey("http_auth", DelegatedHTTPAuth)
READINESS = web.AppKey("readiness", Readiness)
SELF_METRICS = web.AppKey("self_metrics", SelfMetrics)
# Staleness in the inspection API and the page is measured against this clock; tests replace it.
CLOCK: web.AppKey[Clock] = web.AppKey("clock")
# GPU demand that fits no NodePool (the Kubernetes inputs'), noted on the page; absent without them.
UNPLACED: web.AppKey[Unplaced] = web.AppKey("unplaced")
# The CapacityBuffer writer, for the inspection API and the page; absent when none is configured.
BUFFERS = web.AppKey("capacity_buffers", BufferActuator)
# Each pool's live scorecard, for its API and the page; absent in the demo.
SCORECARD = web.AppKey("scorecard", LiveScorecard)
# Each pool's NodeClaim launch record, for its API and the page; absent without the NodeClaim watch.
LAUNCHES = web.AppKey("launches", LaunchRecord)
# What waits in Kueue's queues per pool, recorded at each refresh; absent without Kueue.
QUEUED_WORKLOADS = web.AppKey("queued_workloads", QueuedWorkloadRecord)
# A line every page opens with (the read-only trial says that nothing is served to the cluster).
NOTICE = web.AppKey("notice", str)
# The API app's parsed label selectors (used on its loop only).
SELECTORS = web.AppKey("selectors", SelectorCache)
USER = web.RequestKey("user", User)
