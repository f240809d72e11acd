"""Log lines about what strangers do (refused handshakes, malformed requests), at a bounded rate.

A scanner or a misconfigured client can repeat the same mistake thousands of times a second; the
counters in ``/metrics`` count every one, the log says what happened and how often.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class ThrottledLog:
    """At most one line per ``interval_s``; the next line says how many were left out before it."""

    def __init__(
        self, logger: logging.Logger, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._clock = clock
        self._next_at = float("-inf")
        self._left_out = 0

    def warning(self, message: str, *args: object) -> None:
        now = self._clock()
        if now < self._next_at:
            self._left_out += 1
            return
        if self._left_out:
            message += " (%d more like it since the last line)"
            args = (*args, self._left_out)
        self._logger.warning(message, *args)
        self._next_at, self._left_out = now + self._interval_s, 0
