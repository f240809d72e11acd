"""What every gRPC call passes through, as every HTTP request passes ``web.middleware``: request
metrics (``gpu_autoscaler_grpc_*`` on the service's registry) and an internal error answered
``INTERNAL`` with a message that leaks nothing, the exception logged.

Before the service sees a call, refusals that are counted like any other call and logged at most
once per interval (``ThrottledLog``):

- a request message over :data:`MAX_REQUEST_BYTES` is refused by gRPC's core from its length prefix,
  before it is read whole (``RESOURCE_EXHAUSTED``, ``Received message larger than max``, as every
  gRPC server answers a message over its limit). So that such a call reaches this module at all, a
  unary method is served as a request stream of one message: a call whose message never arrives,
  and that has ended when the refusal is sent, is counted ``RESOURCE_EXHAUSTED`` (a caller that hung
  up before its message arrived is counted the same: the server cannot tell them apart);
- a call that ends its requests without a message is ``INVALID_ARGUMENT``;
- a request message that is not valid protobuf is ``INVALID_ARGUMENT`` (gRPC itself would answer
  ``UNKNOWN`` with the exception's text, uncounted, with a traceback per call);
- with mutual TLS, a client certificate that names no user (no CN) is ``UNAUTHENTICATED``, as
  kube-apiserver answers 401 to an empty user name.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, cast

import grpc
from google.protobuf.message import DecodeError

from autoscaler.throttled_log import ThrottledLog
from autoscaler.web.shared.self_metrics import SelfMetrics

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
Unary = Callable[[Any, Context], Awaitable[Any]]
Streaming = Callable[[Any, Context], AsyncIterator[Any]]
# KEDA's messages are a few hundred bytes; this leaves room for every metadata limit (metadata.MAX_BYTES).
# gRPC refuses a larger message (RESOURCE_EXHAUSTED) from its length prefix, before reading it whole: a
# 2.5 MB one read and refused in Python made the HTTPS API's median 14 times slower on 2 cores.
MAX_REQUEST_BYTES = 64 * 1024
INTERNAL_MESSAGE = "Internal error occurred: the request could not be served"
UNAUTHENTICATED_MESSAGE = "Unauthorized: the client certificate names no user (its CN is empty)"
Deserializer = Callable[[bytes], Any]
Requests = AsyncIterator[Any]
# A call whose message gRPC refused is cancelled as soon as the refusal is sent; a caller that ends its
# requests without a message is answered after this long.
NOT_RECEIVED_GRACE_S = 1.0


class MalformedRequest:
    """What the checked deserializer hands on instead of a message it refused; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def checked(deserialize: Deserializer) -> Deserializer:
    """``deserialize``, but a message that is not valid protobuf becomes a :class:`MalformedRequest`."""

    def deserialize_checked(data: bytes) -> Any:
        try:
            return deserialize(data)
        except DecodeError:
            return MalformedRequest("the request message is not valid protobuf")

    return deserialize_checked


def _names_a_user(context: Context) -> bool:
    names = context.auth_context().get("x509_common_name") or []
    return any(name.strip() for name in names)


def _code(context: Context, error: BaseException | None, *, received: bool) -> str:
    """The status the call ends with: what an abort set, OK, CANCELLED when the caller left, or
    RESOURCE_EXHAUSTED when it ended before its request arrived (gRPC refused the message)."""
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code.name
    if error is not None and not isinstance(error, grpc.aio.AbortError):
        return (grpc.StatusCode.CANCELLED if received else grpc.StatusCode.RESOURCE_EXHAUSTED).name
    return grpc.StatusCode.OK.name


async def _internal_error(context: Context, method: str) -> NoReturn:
    log.exception("internal error serving gRPC %s", method)
    await context.abort(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


class RequestMetrics(grpc.aio.ServerInterceptor):
    """Counts every call by method and final status, times unary calls, gauges open streams; refuses
    malformed requests and, with ``require_user`` (mutual TLS), certificates that name no user."""

    def __init__(self, metrics: SelfMetrics, *, require_user: bool = False) -> None:
        self._metrics = metrics
        self._require_user = require_user
        self._malformed_log = ThrottledLog(log)
        self._unauthenticated_log = ThrottledLog(log)
        self._not_received_log = ThrottledLog(log)

    async def _receive(self, method: str, context: Context) -> Any:
        """The call's one request message; a :class:`MalformedRequest` if the caller sent none.

        A call whose message gRPC refused (over the limit) is cancelled here: logged, and counted by
        the caller as ``RESOURCE_EXHAUSTED``, what gRPC answered.
        """
        peer = context.peer()  # empty once the call is cancelled
        try:
            message = await context.read()
            if message is grpc.aio.EOF:  # refused by gRPC (the cancellation follows at once), or none sent
                await asyncio.sleep(NOT_RECEIVED_GRACE_S)
                return MalformedRequest("the call ended without a request message")
        except asyncio.CancelledError:
            self._not_received_log.warning(
                "gRPC %s from %s refused: its request message did not arrive "
                "(gRPC refuses one over %d bytes with RESOURCE_EXHAUSTED, or the caller left)",
                method,
                peer,
                MAX_REQUEST_BYTES,
            )
            raise
        return message

    async def _admit(self, method: str, request: Any, context: Context) -> None:
        """Abort the call (counted by the caller) if it is malformed or names no user."""
        if self._require_user and not _names_a_user(context):
            self._unauthenticated_log.warning(
                "gRPC %s from %s refused: no user in its client certificate (empty CN)", method, context.peer()
            )
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)
        if isinstance(request, MalformedRequest):
            self._malformed_log.warning("malformed gRPC %s from %s refused: %s", method, context.peer(), request.reason)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {request.reason}")

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        # The handler types describe the synchronous server; grpc.aio's behaviours are coroutines
        # (unary) and async generators (streams), as ExternalScaler's methods are.
        # Method names come from the service definition (unknown ones never reach here): bounded labels.
        method = handler_call_details.method.rpartition("/")[2]
        # A unary method is served as a request stream of one message (module docstring).
        if handler is not None and handler.unary_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(method, cast(Unary, handler.unary_unary)),
                request_deserializer=checked(handler.request_deserializer or bytes),
                response_serializer=handler.response_serializer,
            )
        if handler is not None and handler.unary_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._streaming(method, cast(Streaming, handler.unary_stream)),
                request_deserializer=checked(handler.request_deserializer or bytes),
                response_serializer=handler.response_serializer,
            )
        return handler

    def _unary(self, method: str, behaviour: Unary) -> Callable[[Requests, Context], Awaitable[Any]]:
        async def call(_requests: Requests, context: Context) -> Any:
            started = time.perf_counter()
            failure: BaseException | None = None
            received = False
            try:
                request = await self._receive(method, context)
                received = True
                await self._admit(method, request, context)
                return await behaviour(request, context)
            except grpc.aio.AbortError as error:  # a refusal the servicer chose
                failure = error
                raise
            except Exception as error:
                failure = error
                await _internal_error(context, method)
            except BaseException as error:  # cancelled: the caller went away, or the server stops
                failure = error
                raise
            finally:
                self._metrics.grpc_requests.labels(method, _code(context, failure, received=received)).inc()
                self._metrics.grpc_latency.labels(method).observe(time.perf_counter() - started)

        return call

    def _streaming(self, method: str, behaviour: Streaming) -> Callable[[Requests, Context], AsyncIterator[Any]]:
        async def call(_requests: Requests, context: Context) -> AsyncIterator[Any]:
            failure: BaseException | None = None
            received = False
            self._metrics.grpc_streams.labels(method).inc()
            try:
                request = await self._receive(method, context)
                received = True
                await self._admit(method, request, context)
                async for response in behaviour(request, context):
                    yield response
            except grpc.aio.AbortError as error:
                failure = error
                raise
            except Exception as error:
                failure = error
                await _internal_error(context, method)
            except BaseException as error:
                failure = error
                raise
            finally:
                self._metrics.grpc_streams.labels(method).dec()
                self._metrics.grpc_requests.labels(method, _code(context, failure, received=received)).inc()

        return call
