"""aiohttp's HTTP server made to answer like kube-apiserver: errors as ``metav1.Status``, no ``Server``.

What aiohttp's parser refuses (a request line or header over the limits, too many headers, a method
it does not know, bytes that are not HTTP) never reaches the app or its middleware: aiohttp answers
it from ``RequestHandler.handle_error`` with ``400 text/plain`` quoting the offending bytes. The
handler here answers with the status the fault deserves (414, 431, 501, else 400) and a Status
document that quotes nothing, and the limits are settings. Both of aiohttp's parsers (the C one it
uses when built, the Python one otherwise) raise the same exception classes for these faults; the
tests send each fault to the real process.

A refusal closes the connection in stages (RFC 9112 section 9.6): the answer, then a half-close, then
the rest of what the client sends is read and dropped until it closes or ``LINGER_SECONDS`` pass.
Closed at once with the rest of a 1 MB request line unread, the kernel answers with a reset that can
destroy the refusal before the client reads it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import hdrs, web
from aiohttp.http_exceptions import BadHttpMessage, BadHttpMethod, HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from autoscaler.throttled_log import ThrottledLog
from autoscaler.web.shared import responses

log = logging.getLogger(__name__)
_malformed = ThrottledLog(log)
# The message both parsers raise when a request has more header fields than max_headers.
TOO_MANY_HEADERS = "Too many headers received"
# How long a refused connection's remaining bytes are drained (nginx's lingering_timeout is 5 s).
LINGER_SECONDS = 5.0


@dataclass(frozen=True)
class ParserLimits:
    request_line_bytes: int
    header_field_bytes: int
    headers: int

    def handler_kwargs(self) -> dict[str, int]:
        """aiohttp's names for the limits.

        Its LineTooLong tells which limit was passed only by the limit's value, so equal settings
        are kept one byte apart to tell a long request line (414) from a long header (431).
        """
        request_line = self.request_line_bytes + (self.request_line_bytes == self.header_field_bytes)
        return {"max_line_size": request_line, "max_field_size": self.header_field_bytes, "max_headers": self.headers}


class _BareResponse(web.Response):
    """A response without aiohttp's ``Server: Python/... aiohttp/...`` header.

    For answers made outside any app (parser errors); app responses lose it in ``on_response_prepare``,
    which runs too late for aiohttp's own error answers.
    """

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        self.headers.popall(hdrs.SERVER, None)


async def _drop_server_header(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.popall(hdrs.SERVER, None)


class _Unread:
    """A connection whose client certificate has not been asked for yet."""


_UNREAD = _Unread()


def peer_certificate_of(transport: asyncio.BaseTransport | None) -> bytes | None:
    """The client certificate (DER) of a TLS connection, ``None`` without one (or without TLS)."""
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return None
    der: bytes | None = ssl_object.getpeercert(binary_form=True)
    return der


class StatusRequestHandler(RequestHandler):
    """One HTTP connection; what the parser refuses is answered with a ``metav1.Status``."""

    __slots__ = ("_peer_certificate", "limits")

    def __init__(self, manager: web.Server, *, limits: ParserLimits, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.limits = limits
        self._peer_certificate: bytes | _Unread | None = _UNREAD

    def peer_certificate(self) -> bytes | None:
        """The client certificate (DER) of this connection's TLS session, ``None`` without one; read at
        the first request only. TLS 1.3 has no renegotiation; one in TLS 1.2 could only show another
        certificate the CA signed and the same client holds, so the first one it proved is kept (a CA
        no longer trusted is still refused: the authenticator judges the certificate at each request)."""
        if isinstance(self._peer_certificate, _Unread):
            self._peer_certificate = peer_certificate_of(self.transport)
        return self._peer_certificate

    def refusal(self, status_code: int, error: BaseException | None) -> tuple[int, str]:
        """The HTTP status and message for an error raised while reading a request."""
        if isinstance(error, LineTooLong):
            if len(error.args) > 1 and error.args[1] == self.max_field_size:
                return 431, f"a request header field is longer than {self.limits.header_field_bytes} bytes"
            return 414, f"the request URI is longer than {self.limits.request_line_bytes} bytes"
        if isinstance(error, BadHttpMessage) and error.message == TOO_MANY_HEADERS:
            return 431, f"the request has more than {self.limits.headers} header fields"
        if isinstance(error, BadHttpMethod):
            return 501, "the request method is not implemented by this server"
        if isinstance(error, HttpProcessingError):
            return 400, "the request is not valid HTTP/1.1"
        if status_code == 504:
            return 504, "the request timed out"
        return 500, "Internal error occurred: the request could not be served"

    def handle_error(
        self, request: BaseRequest, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:  # as aiohttp's own: nothing more can be said on this connection
            raise ConnectionError("Response is sent already, cannot send another response with the error message")
        code, text = self.refusal(status, exc)
        if isinstance(exc, HttpProcessingError):
            # The class only: the bytes may hold a token.
            _malformed.warning(
                "malformed request from %s refused with %d (%s)", request.remote, code, type(exc).__name__
            )
        else:
            log.error("error serving a request from %s", request.remote, exc_info=exc)
        response = _BareResponse(text=json.dumps(responses.status(code, text)), content_type="application/json")
        response.set_status(code)
        if code == 501:
            response.headers[hdrs.ALLOW] = hdrs.METH_GET
        response.force_close()
        return response

    async def finish_response(
        self, request: BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        finished = await super().finish_response(request, resp, start_time)
        if isinstance(resp, _BareResponse):
            self._linger()
        return finished

    def _linger(self) -> None:
        """Half-close after a refusal and drop what the client still sends, for a bounded time."""
        transport = self.transport
        if transport is None or transport.is_closing() or not transport.can_write_eof():
            return  # gone already, or TLS: asyncio's TLS close reads until the client's close_notify (30 s at most)
        # aiohttp's flag, set without its force_close() (which closes the transport at once): its
        # data_received drops every byte, and its request loop ends without closing the transport.
        self._force_close = True
        transport.write_eof()
        if not transport.is_reading():
            transport.resume_reading()
        # The client's close ends the connection first (asyncio closes on EOF); this bounds the rest.
        self._loop.call_later(LINGER_SECONDS, transport.close)


class StatusServer(web.Server):
    """``web.Server`` whose connections are :class:`StatusRequestHandler`."""

    def __init__(self, made: web.Server, *, limits: ParserLimits, **handler_kwargs: Any) -> None:
        super().__init__(
            made.request_handler,
            request_factory=made.request_factory,
            handler_cancellation=made.handler_cancellation,
            **handler_kwargs,
        )
        self._limits = limits
        self._handler_kwargs = handler_kwargs
        self._handler_loop = asyncio.get_running_loop()

    def __call__(self) -> RequestHandler:
        return StatusRequestHandler(self, loop=self._handler_loop, limits=self._limits, **self._handler_kwargs)


class StatusAppRunner(web.AppRunner):
    """``web.AppRunner`` for :class:`StatusServer`, with the parser limits, and no ``Server`` header."""

    def __init__(self, app: web.Application, *, limits: ParserLimits, **handler_kwargs: Any) -> None:
        handler_kwargs = {**handler_kwargs, **limits.handler_kwargs()}
        shutdown_timeout = handler_kwargs.pop("shutdown_timeout", 60.0)
        super().__init__(app, handle_signals=False, shutdown_timeout=shutdown_timeout, **handler_kwargs)
        app.on_response_prepare.append(_drop_server_header)
        self._limits = limits
        self._handler_kwargs = handler_kwargs

    async def _make_server(self) -> web.Server:
        # aiohttp's runner starts and freezes the app and makes its server; the connections of the
        # server used instead are StatusRequestHandlers with the same handler and request factory.
        return self.status_server(await super()._make_server())

    def status_server(self, made: web.Server) -> StatusServer:
        """The server whose connections answer parser faults with a Status, for aiohttp's ``made``."""
        return StatusServer(made, limits=self._limits, **self._handler_kwargs)
