"""Log lines about what strangers do (refused handshakes, malformed requests, damaged entries of a
state file), at a bounded rate.

A scanner or a misconfigured client can repeat the same mistake thousands of times a second; the
counters in ``/metrics`` count every one, the log says what happened and how often.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class ThrottledLog:
    """At most ``burst`` lines per ``interval_s``; the next line says how many were left out before it."""

    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        burst: int = 1,
    ) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._clock = clock
        self._burst = burst
        self._interval_ends = float("-inf")
        self._lines = 0  # logged since the interval began
        self.left_out = 0  # since the last line

    def warning(self, message: str, *args: object) -> None:
        now = self._clock()
        if now >= self._interval_ends:
            self._interval_ends, self._lines = now + self._interval_s, 0
        if self._lines >= self._burst:
            self.left_out += 1
            return
        if self.left_out:
            message += " (%d more like it since the last line)"
            args = (*args, self.left_out)
        self._logger.warning(message, *args)
        self._lines, self.left_out = self._lines + 1, 0


class ThrottledLogByReason:
    """One :class:`ThrottledLog` per reason, so a flood of one refusal does not hide another.

    Reasons come from outside (TLS alerts, say): past ``max_reasons`` they share one throttle.
    """

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0, max_reasons: int = 32) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._max_reasons = max_reasons
        self._by_reason: dict[str, ThrottledLog] = {}
        self._others = ThrottledLog(logger, interval_s)

    def warning(self, reason: str, message: str, *args: object) -> None:
        throttle = self._by_reason.get(reason)
        if throttle is None:
            if len(self._by_reason) >= self._max_reasons:
                throttle = self._others
            else:
                throttle = self._by_reason[reason] = ThrottledLog(self._logger, self._interval_s)
        throttle.warning(message, *args)
