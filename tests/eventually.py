"""Waiting in tests for something that happens elsewhere (a watch event, a reload, a child process).

``eventually`` polls a check until it holds or a deadline passes, and then fails saying what was
awaited and what the check last returned or raised, so that a wait that times out reads as a test
failure with its evidence. A fixed sleep in its place either wastes time or, on a busy 2-core
runner, is too short.

A check *holds* when it returns a truthy value, which is then returned. An exception of a type in
``retrying_on`` (by default ``AssertionError``, so a check may assert with a message of its own and
end with ``return True``) means "not yet"; any other exception ends the wait at once.

The async form measures its deadline on the event loop's clock, so under ``looptime`` a wait of
minutes takes no real time; ``eventually_sync`` is for threads and tests without an event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 10.0
# Checks per timeout when no interval is given: fine-grained for short waits, cheap for long ones.
CHECKS_PER_TIMEOUT = 500
NOTHING_RETURNED = object()


@dataclass
class _Progress:
    """What a wait has seen so far, and the failure it ends in."""

    message: str
    timeout: float
    deadline: float
    checks: int = 0
    last_value: object = NOTHING_RETURNED
    last_error: Exception | None = None

    def held(self, value: object) -> bool:
        self.checks += 1
        if not value:
            self.last_value, self.last_error = value, None
        return bool(value)

    def not_yet(self, error: Exception) -> None:
        self.checks += 1
        self.last_error = error

    def give_up_after_deadline(self, now: float) -> None:
        if now < self.deadline:
            return
        if self.last_error is not None:
            seen = f"last exception: {type(self.last_error).__name__}: {self.last_error}"
        else:
            seen = f"last value: {self.last_value!r}"
        raise AssertionError(
            f"timed out after {self.timeout:g} s ({self.checks} checks) waiting for {self.message}; {seen}"
        ) from self.last_error


def _pause(timeout: float, interval: float | None) -> float:
    return interval if interval is not None else timeout / CHECKS_PER_TIMEOUT


async def eventually(
    check: Callable[[], T | Awaitable[T]],
    *,
    message: str,
    # Not asyncio.timeout around the call: the deadline belongs in the failure's message.
    timeout: float = DEFAULT_TIMEOUT_S,  # noqa: ASYNC109
    interval: float | None = None,
    retrying_on: tuple[type[Exception], ...] = (AssertionError,),
) -> T:
    """Call ``check()`` (awaiting it if it is async) until it holds, and return its truthy value.

    ``message`` names what is awaited ("the rotated certificate to be served"); ``interval``
    defaults to ``timeout / 500``. Raises ``AssertionError`` once ``timeout`` seconds of loop time
    have passed without the check holding.
    """
    loop = asyncio.get_running_loop()
    progress = _Progress(message, timeout, loop.time() + timeout)
    while True:
        try:
            outcome = check()
            value = await outcome if inspect.isawaitable(outcome) else outcome
        except retrying_on as error:
            progress.not_yet(error)
        else:
            if progress.held(value):
                return value  # type: ignore[return-value]  # a T once awaited
        progress.give_up_after_deadline(loop.time())
        await asyncio.sleep(_pause(timeout, interval))


def eventually_sync(
    check: Callable[[], T],
    *,
    message: str,
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float | None = None,
    retrying_on: tuple[type[Exception], ...] = (AssertionError,),
) -> T:
    """:func:`eventually` for code without an event loop: it blocks, on the monotonic clock."""
    progress = _Progress(message, timeout, time.monotonic() + timeout)
    while True:
        try:
            value = check()
        except retrying_on as error:
            progress.not_yet(error)
        else:
            if progress.held(value):
                return value
        progress.give_up_after_deadline(time.monotonic())
        time.sleep(_pause(timeout, interval))
