"""The secure port's accept loop: every TLS handshake's outcome is seen, with its peer.

With ``create_server(ssl=...)`` the event loop runs handshakes out of sight: a client certificate
refused during the handshake (unknown CA, expired: Python's ``ssl`` decides there, see the README's
Authentication section) is dropped with at most a debug line and no peer address, so a wrong
aggregator certificate would look like silence. Here each accepted socket is handed to
``loop.connect_accepted_socket``, which returns once the handshake is done or raises its error, so
a refusal is counted and logged with the peer and the reason.

A connection whose client stops reading is aborted once it has answers waiting and has taken none
of their bytes for ``idle_timeout`` (:class:`WriteStallGuard`): aiohttp's idle timeout does not run
while a handler waits to write, so a client that sends requests and never reads their answers held
its socket and task for as long as it liked (an hour is as cheap as a second for it).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import socket
import ssl
import struct
import sys
import termios
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from aiohttp import web
from yarl import URL

from autoscaler.throttled_log import ThrottledLog, ThrottledLogByReason

log = logging.getLogger(__name__)
_refusals = ThrottledLog(log)  # a client certificate refused
_protocol_refusals = ThrottledLogByReason(log)  # no TLS version or cipher in common, not TLS at all
_stalls = ThrottledLog(log)  # clients that stopped reading
# The kernel's send queue of a socket (Linux; elsewhere only the TLS layer's buffer is counted).
_OUTQ: int | None = getattr(termios, "TIOCOUTQ", None)
# Linux's struct tcp_info: tcpi_bytes_acked is the u64 at offset 120 (since 4.1); elsewhere unknown.
_TCP_INFO: int | None = getattr(socket, "TCP_INFO", None) if sys.platform == "linux" else None
_BYTES_ACKED_END = 128
# Out of descriptors or memory: asyncio's own accept loop also waits a second before trying again.
_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class WriteStallGuard:
    """Aborts connections with answers waiting whose peer has taken none of their bytes for ``timeout_s``.

    Progress is what the peer took: the bytes its TCP acknowledged (Linux ``tcpi_bytes_acked``, the
    bytes handed to the socket minus those still queued in it), a cumulative count that grows with
    every answer read, however slowly, and however alike the answers are in size. A connection with
    nothing waiting is idle, which aiohttp's keep-alive timeout handles. Where the kernel does not
    report acknowledged bytes, a write buffer that shrank counts as progress. The abort resets the
    connection (SO_LINGER 0), so the kernel does not keep the unread answers queued in FIN-WAIT-1 either.
    A connection closed with answers still waiting is watched until they are taken or it is aborted.
    """

    def __init__(
        self,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
        on_aborted: Callable[[], None] = lambda: None,
    ) -> None:
        self.timeout_s = timeout_s
        self._clock = clock
        self._on_aborted = on_aborted  # the service's counter of them (its log line is throttled)
        self._watched: dict[asyncio.Transport, _Progress] = {}
        self.aborted = 0

    def watch(self, transport: asyncio.Transport) -> None:
        self._watched[transport] = _Progress(0, _acknowledged(transport), self._clock())

    def sweep(self) -> None:
        now = self._clock()
        for transport, last in list(self._watched.items()):
            try:
                unsent, acknowledged = _unsent(transport), _acknowledged(transport)
            except Exception:  # a transport in a state nobody expected: not watched any more
                del self._watched[transport]
                log.exception("write-stall guard: a connection's write buffer could not be read; not watched")
                continue
            if transport.is_closing() and unsent == 0:
                del self._watched[transport]
                continue
            # A closing transport with answers unread stays watched: its close waits for the peer to
            # take them (aiohttp closes an idle keep-alive connection so, whose peer may read nothing).
            if unsent == 0 or last.advanced(unsent, acknowledged):
                self._watched[transport] = _Progress(unsent, acknowledged, now)
            elif now - last.since < self.timeout_s:
                self._watched[transport] = _Progress(unsent, acknowledged, last.since)
            else:
                del self._watched[transport]
                self._abort(transport, unsent)

    def _abort(self, transport: asyncio.Transport, size: int) -> None:
        self.aborted += 1
        self._on_aborted()
        peer = _address(transport.get_extra_info("peername"))
        _stalls.warning("connection from %s aborted: %d bytes of answers unread for %.0f s", peer, size, self.timeout_s)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.timeout_s / 2))
            try:
                self.sweep()
            except Exception:  # one odd transport must not end the guard for every connection
                log.exception("write-stall guard: a sweep failed; the next one goes on")


class _Progress(NamedTuple):
    """A watched connection at a sweep: bytes waiting, bytes its peer acknowledged (``None``: not
    known here), and when its peer last took any (or had nothing waiting)."""

    unsent: int
    acknowledged: int | None
    since: float

    def advanced(self, unsent: int, acknowledged: int | None) -> bool:
        if acknowledged is not None and self.acknowledged is not None:
            return acknowledged > self.acknowledged
        return unsent < self.unsent


def _acknowledged(transport: asyncio.Transport) -> int | None:
    """Bytes of the connection the peer's TCP acknowledged so far (Linux ``TCP_INFO``), or ``None``."""
    sock = transport.get_extra_info("socket")
    if sock is None or _TCP_INFO is None:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _BYTES_ACKED_END)
    except (OSError, ValueError):
        return None
    if len(info) < _BYTES_ACKED_END:  # a kernel older than 4.1
        return None
    acknowledged: int = struct.unpack_from("=Q", info, _BYTES_ACKED_END - 8)[0]
    return acknowledged


def _unsent(transport: asyncio.Transport) -> int:
    """Bytes of answers not yet taken by the peer: the TLS layer's buffer plus the kernel's send queue
    (Linux ``SIOCOUTQ``), so a connection whose answers all sit in the kernel is not taken for idle."""
    queued = 0
    sock = transport.get_extra_info("socket")
    if sock is not None and _OUTQ is not None:
        with contextlib.suppress(OSError, ValueError):
            queued = struct.unpack("I", fcntl.ioctl(sock.fileno(), _OUTQ, struct.pack("I", 0)))[0]
    return transport.get_write_buffer_size() + queued


def _address(peer: Any) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        host, port = peer[0], peer[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(peer)


class TLSAcceptSite(web.BaseSite):
    """Serve ``runner`` over TLS on a bound socket, one visible handshake per accepted connection.

    ``context`` may be a function returning the context to use, asked for each handshake, so that a
    replaced context (new client CAs) takes effect for the next connection.
    """

    def __init__(
        self,
        runner: web.BaseRunner,
        sock: socket.socket,
        *,
        context: ssl.SSLContext | Callable[[], ssl.SSLContext],
        handshake_timeout_s: float,
        on_refused: Callable[[], None],
        on_stalled: Callable[[], None] = lambda: None,
        backlog: int = 128,
    ) -> None:
        super().__init__(runner, backlog=backlog)
        self._sock = sock
        self._context = context
        self._handshake_timeout_s = handshake_timeout_s
        self._on_refused = on_refused
        self._tasks: set[asyncio.Task[None]] = set()
        self.stalls = WriteStallGuard(handshake_timeout_s, on_aborted=on_stalled)
        host, port = sock.getsockname()[:2]
        self._name = str(URL.build(scheme="https", host=host, port=port))

    @property
    def name(self) -> str:
        return self._name

    async def start(self) -> None:
        await super().start()
        self._sock.listen(self._backlog)
        self._spawn(self._accept(), "tls-accept")
        self._spawn(self.stalls.run(), "tls-write-stalls")

    async def stop(self) -> None:
        """Stop accepting and drop handshakes in progress; established connections drain with the runner."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await super().stop()

    def _spawn(self, work: Any, name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                connection, peer = await loop.sock_accept(self._sock)
            except ConnectionAbortedError:
                continue  # the client gave up between SYN and accept
            except OSError as error:
                if error.errno not in _RESOURCE_ERRORS:
                    raise
                log.error("secure port cannot accept connections (%s); trying again in 1 s", error)
                await asyncio.sleep(1.0)
                continue
            self._spawn(self._handshake(connection, peer), "tls-handshake")

    async def _handshake(self, connection: socket.socket, peer: Any) -> None:
        server = self._runner.server
        if server is None:  # the runner is being cleaned up
            connection.close()
            return
        loop = asyncio.get_running_loop()
        context = self._context if isinstance(self._context, ssl.SSLContext) else self._context()
        try:
            transport, _ = await loop.connect_accepted_socket(
                server, connection, ssl=context, ssl_handshake_timeout=self._handshake_timeout_s
            )
            self.stalls.watch(transport)
        except ssl.SSLCertVerificationError as error:
            self._on_refused()
            _refusals.warning(
                "client certificate from %s refused in the TLS handshake: %s", _address(peer), error.verify_message
            )
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionError) as error:
            # The client went away (a TCP check, a reset): nothing was refused.
            log.debug("TLS handshake with %s ended by the client: %s", _address(peer), error)
        except ssl.SSLError as error:  # a TLS version or cipher not offered, plain HTTP, garbage
            self._on_refused()
            reason = str(error.reason or error.strerror or error)
            _protocol_refusals.warning(reason, "TLS handshake with %s refused: %s", _address(peer), reason)
        except OSError as error:  # TimeoutError too
            log.debug("TLS handshake with %s failed: %s", _address(peer), error)
        # On any failure (cancellation too) the event loop has closed the connection's transport.
