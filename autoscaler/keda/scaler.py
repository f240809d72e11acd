"""KEDA's ``ExternalScaler`` service, answered from the provider's current snapshot (no I/O).

One trigger serves one value: the **sum** of the series its ``labelSelector`` matches in the
ScaledObject's namespace. That is what an HPA computes from the external metrics API's list
(DESIGN.md §3: a Value target compares sum(items) with the target, an AverageValue target takes
ceil(sum/target) replicas), and KEDA's HPA has an AverageValue target of ``targetValue``: so a
ScaledObject scales exactly as an HPA reading the same metric and selector over HTTPS would.
Staleness and fallbacks are the provider's, applied per series before the sum, as over HTTPS.

Refusals, with the external metrics API's messages: bad metadata or namespace ``INVALID_ARGUMENT``
(naming the key), a metric not served or no matching series ``NOT_FOUND``, a stale metric whose
fallback is ``error`` ``UNAVAILABLE``; with an authorizer (``server.grpc_authorization``), a caller
(its client certificate: CN the user, O the groups) not allowed to get the metric in the trigger's
namespace ``PERMISSION_DENIED``, asked once per call or stream. A message quotes at most 1 KiB of any
input (``autoscaler.echoes``), and is cut to :data:`MAX_DETAILS` bytes whole: it travels in a response
header (``grpc-message``, percent-encoded: up to three times as long), which clients refuse past 8 KiB.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple, NoReturn

import grpc
from cachetools import LRUCache
from cryptography import x509

from autoscaler.echoes import echo
from autoscaler.keda import externalscaler_pb2 as pb
from autoscaler.keda.externalscaler_pb2_grpc import ExternalScalerServicer
from autoscaler.keda.metadata import (
    MetadataError,
    Trigger,
    TriggerFields,
    metric_name_fault,
    parse_fields,
    trigger_fields,
)
from autoscaler.serving.provider import MetricNotFound, MetricUnavailable, SnapshotProvider, not_served
from autoscaler.web.api.external_metrics import namespace_fault
from autoscaler.web.security.auth import AccessDenied, Authorizer, User
from autoscaler.web.security.certificates import common_name, organizations

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
# Streams re-read at least this often besides every snapshot swap: a value turns stale with time alone.
RECHECK_INTERVAL_S = 5.0
MAX_DETAILS = 2048
# The trigger cache's bound, in characters of the fields it is keyed by (plus an overhead per entry
# for the parsed trigger): thousands of real triggers, at most a few MiB whatever callers send.
TRIGGER_CACHE_BYTES = 1024 * 1024
TRIGGER_OVERHEAD_BYTES = 512


class Refusal(Exception):
    """An answer that is a gRPC error status; the message is what the caller reads."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


async def _refuse(context: Context, refusal: Refusal) -> NoReturn:
    await context.abort(refusal.code, echo(refusal.details, MAX_DETAILS))
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


class _CachedTrigger(NamedTuple):
    """A parsed trigger and its weight (LRUCache weighs values, and the key is what grows)."""

    trigger: Trigger
    size: int


def _ceil(value: float) -> int:
    """The deprecated int64 fields: rounded up, as the HPA rounds quantities up to milli-units."""
    return math.ceil(value)


class ExternalScaler(ExternalScalerServicer):
    """The servicer; ``close`` ends the open streams (at shutdown) so callers reconnect elsewhere."""

    def __init__(
        self,
        provider: SnapshotProvider,
        *,
        recheck_interval_s: float = RECHECK_INTERVAL_S,
        authorizer: Authorizer | None = None,
    ) -> None:
        self._provider = provider
        self._authorizer = authorizer
        self._callers: LRUCache[bytes, User] = LRUCache(maxsize=1024)
        self._recheck_interval_s = recheck_interval_s
        self._closing = False
        self._wakes: set[Callable[[], None]] = set()
        self._triggers: LRUCache[TriggerFields, _CachedTrigger] = LRUCache(
            maxsize=TRIGGER_CACHE_BYTES, getsizeof=lambda cached: cached.size
        )

    def close(self) -> None:
        """End the open streams; callable from any thread (``serve`` calls it from the main loop)."""
        self._closing = True
        for wake in tuple(self._wakes):  # a copy: streams on the server's thread come and go meanwhile
            wake()

    def trigger(self, ref: pb.ScaledObjectRef) -> Trigger:
        """The trigger a ScaledObjectRef describes, if its namespace, metadata and metric are valid."""
        fault = namespace_fault(ref.namespace)
        if fault is not None:
            raise Refusal(grpc.StatusCode.INVALID_ARGUMENT, f"invalid scaledObjectRef.namespace: {fault}")
        try:
            fields = trigger_fields(ref.scalerMetadata)  # bounded: refuses oversized maps first
            # KEDA sends the same few triggers again and again: parse each once (a selector costs more
            # than the rest of a call). Only triggers of a served metric are kept, so refusals never are.
            cached = self._triggers.get(fields)
            if cached is not None:
                trigger = cached.trigger
            else:
                trigger = parse_fields(fields)
                if trigger.metric.lower() in self._provider.snapshot.metrics:
                    self._triggers[fields] = _CachedTrigger(trigger, TRIGGER_OVERHEAD_BYTES + fields.size)
        except MetadataError as error:
            raise Refusal(grpc.StatusCode.INVALID_ARGUMENT, str(error)) from None
        if trigger.metric.lower() not in self._provider.snapshot.metrics:
            raise Refusal(grpc.StatusCode.NOT_FOUND, not_served(trigger.metric, self._provider.snapshot.metrics))
        return trigger

    async def allowed_trigger(self, ref: pb.ScaledObjectRef, context: Context) -> Trigger:
        """:meth:`trigger`, once the caller may get its metric in its namespace (with an authorizer)."""
        trigger = self.trigger(ref)
        if self._authorizer is not None:
            try:
                await self._authorizer.authorize(
                    self._caller(context), namespace=ref.namespace, metric=trigger.metric.lower()
                )
            except AccessDenied as denied:
                code = grpc.StatusCode.UNAUTHENTICATED if denied.status == 401 else grpc.StatusCode.PERMISSION_DENIED
                raise Refusal(code, str(denied)) from None
        return trigger

    def _caller(self, context: Context) -> User:
        """The user the client certificate names (the interceptor has refused certificates naming none)."""
        pem = b"".join(context.auth_context().get("x509_pem_cert") or [])
        user = self._callers.get(pem)
        if user is None:
            if not pem:
                raise AccessDenied(401, "Unauthorized")
            certificate = x509.load_pem_x509_certificate(pem)
            user = self._callers[pem] = User(username=common_name(certificate), groups=organizations(certificate))
        return user

    @property
    def cached_triggers(self) -> tuple[int, int]:
        """(entries, bytes) in the trigger cache."""
        return len(self._triggers), int(self._triggers.currsize)

    def value(self, ref: pb.ScaledObjectRef, trigger: Trigger) -> float:
        """The sum of the matching series, as served now (staleness fallbacks applied)."""
        try:
            series = self._provider.get_metric(ref.namespace, trigger.metric, trigger.selector)
        except MetricNotFound as error:
            raise Refusal(grpc.StatusCode.NOT_FOUND, str(error)) from None
        except MetricUnavailable as error:
            raise Refusal(grpc.StatusCode.UNAVAILABLE, str(error)) from None
        return math.fsum(one.value for one in series)

    def active(self, ref: pb.ScaledObjectRef, trigger: Trigger) -> bool:
        """KEDA's activation rule: active while the value is above ``activationValue``."""
        return self.value(ref, trigger) > trigger.activation

    @staticmethod
    def spec(trigger: Trigger) -> pb.GetMetricSpecResponse:
        metric = trigger.metric.lower()
        return pb.GetMetricSpecResponse(
            metricSpecs=[
                pb.MetricSpec(metricName=metric, targetSize=_ceil(trigger.target), targetSizeFloat=trigger.target)
            ]
        )

    async def IsActive(self, request: pb.ScaledObjectRef, context: Context) -> pb.IsActiveResponse:
        try:
            return pb.IsActiveResponse(result=self.active(request, await self.allowed_trigger(request, context)))
        except Refusal as refusal:
            await _refuse(context, refusal)

    async def GetMetricSpec(self, request: pb.ScaledObjectRef, context: Context) -> pb.GetMetricSpecResponse:
        try:
            return self.spec(await self.allowed_trigger(request, context))
        except Refusal as refusal:
            await _refuse(context, refusal)

    async def GetMetrics(self, request: pb.GetMetricsRequest, context: Context) -> pb.GetMetricsResponse:
        ref = request.scaledObjectRef
        try:
            fault = metric_name_fault(request.metricName)
            if fault is not None:
                raise Refusal(grpc.StatusCode.INVALID_ARGUMENT, f"invalid metricName: {fault}")
            trigger = await self.allowed_trigger(ref, context)
            metric = trigger.metric.lower()
            if request.metricName and request.metricName.lower() != metric:
                raise Refusal(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"invalid metricName: {echo(request.metricName)!r} is not the metric of this trigger ({metric!r}, "
                    "from its metadata key metric)",
                )
            value = self.value(ref, trigger)
        except Refusal as refusal:
            await _refuse(context, refusal)
        return pb.GetMetricsResponse(
            metricValues=[pb.MetricValue(metricName=metric, metricValue=_ceil(value), metricValueFloat=value)]
        )

    async def StreamIsActive(self, request: pb.ScaledObjectRef, context: Context) -> AsyncIterator[pb.IsActiveResponse]:
        """The activity now, then again each time it changes; ends with an error status when it has none."""
        last: bool | None = None
        try:
            trigger = await self.allowed_trigger(request, context)
            async for _ in self._rereads():
                active = self.active(request, trigger)
                if active != last:
                    last = active
                    yield pb.IsActiveResponse(result=active)
        except Refusal as refusal:
            await _refuse(context, refusal)

    async def StreamMetricSpec(
        self, request: pb.ScaledObjectRef, context: Context
    ) -> AsyncIterator[pb.GetMetricSpecResponse]:
        """The proto's two rules: the spec at once, and always what GetMetricSpec answers.

        The target comes from the trigger's metadata, which cannot change under an open stream, so
        after the first message the stream stays open with nothing new to say until it is closed.
        """
        try:
            yield self.spec(await self.allowed_trigger(request, context))
        except Refusal as refusal:
            await _refuse(context, refusal)
        async for _ in self._rereads():
            pass

    async def _rereads(self) -> AsyncIterator[None]:
        """Once at once, then after each snapshot swap or recheck interval, until :meth:`close`."""
        wake = asyncio.Event()
        loop = asyncio.get_running_loop()

        def wake_up() -> None:
            # The refresher swaps on the main loop, the server runs on a thread of its own: an Event is
            # set only on its loop. A swap that copied its listeners just before the stream ended may
            # still call this after the loop closed (at shutdown): nothing is left to wake then.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(wake.set)

        self._wakes.add(wake_up)
        unsubscribe = self._provider.on_swap(wake_up)
        try:
            while not self._closing:
                yield
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), self._recheck_interval_s)
        finally:
            unsubscribe()
            self._wakes.discard(wake_up)
