"""gRPC core's own log lines, routed through the service's logger.

gRPC's C++ core logs through absl straight to file descriptor 2, one INFO line per failed TLS
handshake: 2,000 refused handshakes made 2,000 lines, in absl's format, beside the service's. Once
:func:`route_core_log` has run (``serve``, when the gRPC port is on), descriptor 2 is a pipe read by
a thread here: an absl line becomes a record of the ``grpc.core`` logger (a failed handshake is
counted and logged at most once per interval per reason), anything else written to descriptor 2
passes through unchanged. Python's own ``sys.stderr`` keeps the original descriptor, so the
service's log never goes through the pipe and never waits on the thread.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Callable

from autoscaler.throttled_log import ThrottledLogByReason

log = logging.getLogger("grpc.core")

# absl's prefix: severity, MMDD, time, thread id, file:line]
_ABSL_LINE = re.compile(r"([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [^\]\s]+:\d+\] (.*)")
_LEVELS = {"I": logging.INFO, "W": logging.WARNING, "E": logging.ERROR, "F": logging.CRITICAL}
# "Handshake failed with error SSL_ERROR_SSL: error:100000c0:SSL routines:OPENSSL_internal:<REASON>: ..."
_HANDSHAKE_FAILED = re.compile(r"Handshake failed with error (\w+)(?:: error:\w+:[^:]*:[^:]*:(\w+))?")


class CoreLog:
    """Turns absl lines into log records; counts failed handshakes through the listeners."""

    def __init__(self) -> None:
        self._handshake_listeners: list[Callable[[], None]] = []
        self._handshake_refusals = ThrottledLogByReason(log)

    def on_handshake_failure(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` for each failed handshake; returns the function that stops it."""
        self._handshake_listeners.append(listener)
        return lambda: self._handshake_listeners.remove(listener)

    def route(self, line: str) -> bool:
        """Log ``line`` if it is absl's; ``False`` if it is not (the caller passes it on)."""
        found = _ABSL_LINE.fullmatch(line.rstrip("\n"))
        if found is None:
            return False
        severity, message = found.groups()
        handshake = _HANDSHAKE_FAILED.search(message)
        if handshake is None:
            log.log(_LEVELS[severity], "%s", message)
            return True
        for listener in list(self._handshake_listeners):
            listener()
        reason = handshake.group(2) or handshake.group(1)
        self._handshake_refusals.warning(reason, "gRPC port: TLS handshake refused: %s", reason)
        return True

    def pump(self, source: int, passthrough: int) -> None:
        """Read lines from ``source`` until it closes; route each or write it to ``passthrough``."""
        with os.fdopen(source, "r", encoding="utf-8", errors="replace", newline="\n") as lines:
            for line in lines:
                try:
                    routed = self.route(line)
                except Exception:  # never let a line stop the pump: descriptor 2 would fill and block
                    routed = False
                if not routed:
                    os.write(passthrough, line.encode("utf-8", "replace"))


core_log = CoreLog()
_routing = threading.Lock()
_routed = False


def route_core_log() -> None:
    """Point descriptor 2 at a pipe read by :data:`core_log`, once per process; ``sys.stderr`` keeps the
    original. Call before logging is configured, so its handler writes to the original descriptor."""
    global _routed
    with _routing:
        if _routed:
            return
        original = os.dup(2)
        sys.stderr.flush()
        sys.stderr = open(original, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115 - lives as long as the process
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
        threading.Thread(target=core_log.pump, args=(read_end, original), name="grpc-core-log", daemon=True).start()
        _routed = True
