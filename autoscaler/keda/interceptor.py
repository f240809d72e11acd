"""What every gRPC call passes through, as every HTTP request passes ``web.middleware``: request
metrics (``gpu_autoscaler_grpc_*`` on the service's registry) and an internal error answered
``INTERNAL`` with a message that leaks nothing, the exception logged."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, cast

import grpc

from autoscaler.web.self_metrics import SelfMetrics

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
Unary = Callable[[Any, Context], Awaitable[Any]]
Streaming = Callable[[Any, Context], AsyncIterator[Any]]
INTERNAL_MESSAGE = "Internal error occurred: the request could not be served"


def _code(context: Context, error: BaseException | None) -> str:
    """The status the call ends with: what an abort set, OK, or CANCELLED when the caller left."""
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code.name
    if error is not None and not isinstance(error, grpc.aio.AbortError):
        return grpc.StatusCode.CANCELLED.name
    return grpc.StatusCode.OK.name


async def _internal_error(context: Context, method: str) -> NoReturn:
    log.exception("internal error serving gRPC %s", method)
    await context.abort(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


class RequestMetrics(grpc.aio.ServerInterceptor):
    """Counts every call by method and final status, times unary calls, gauges open streams."""

    def __init__(self, metrics: SelfMetrics) -> None:
        self._metrics = metrics

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
        if handler is not None and handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, cast(Unary, handler.unary_unary)),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler is not None and handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(method, cast(Streaming, handler.unary_stream)),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler

    def _unary(self, method: str, behaviour: Unary) -> Unary:
        async def call(request: Any, context: Context) -> Any:
            started = time.perf_counter()
            failure: BaseException | None = None
            try:
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
                self._metrics.grpc_requests.labels(method, _code(context, failure)).inc()
                self._metrics.grpc_latency.labels(method).observe(time.perf_counter() - started)

        return call

    def _streaming(self, method: str, behaviour: Streaming) -> Streaming:
        async def call(request: Any, context: Context) -> AsyncIterator[Any]:
            failure: BaseException | None = None
            self._metrics.grpc_streams.labels(method).inc()
            try:
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
                self._metrics.grpc_requests.labels(method, _code(context, failure)).inc()

        return call
