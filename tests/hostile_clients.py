"""Clients that misbehave on purpose, shared by the hostile-input tests and benchmarks."""

from __future__ import annotations

import socket
import ssl
import time


def pipeline_without_reading(port: int, context: ssl.SSLContext, path: str, limit_s: float) -> tuple[float, str]:
    """Pipeline requests for ``path`` over TLS with a tiny receive buffer and never read an answer:
    (seconds until the server cut us off, the error that said so, or "never")."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=limit_s)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    request = f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    started = time.monotonic()
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        try:
            while time.monotonic() - started < limit_s:
                sock.sendall(request * 50)
        except (OSError, ssl.SSLError) as error:  # TimeoutError too: then the server never cut us off
            return time.monotonic() - started, type(error).__name__
    return time.monotonic() - started, "never"
