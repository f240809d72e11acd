"""The polling helper the tests wait with: it returns what held, and a timeout says what it saw."""

from __future__ import annotations

import pytest

from tests.eventually import eventually, eventually_sync


async def test_returns_the_first_truthy_value_of_an_async_check():
    answers = iter([None, 0, "ready"])

    async def check() -> str | int | None:
        return next(answers)

    assert await eventually(check, message="the third answer", interval=0) == "ready"


async def test_a_timeout_names_what_was_awaited_and_the_last_value():
    with pytest.raises(AssertionError, match=r"waiting for the cache to fill; last value: \[\]"):
        await eventually(list, message="the cache to fill", timeout=0.05)


def test_an_assertion_is_not_yet_and_is_reported_with_its_message():
    attempts: list[int] = []

    def check() -> bool:
        attempts.append(1)
        assert len(attempts) > 99, f"only {len(attempts)} attempts"
        return True

    with pytest.raises(AssertionError, match=r"last exception: AssertionError: only \d+ attempts") as failure:
        eventually_sync(check, message="a hundred attempts", timeout=0.05, interval=0.01)
    assert isinstance(failure.value.__cause__, AssertionError)


def test_an_exception_not_retried_on_ends_the_wait_at_once():
    attempts: list[int] = []

    def check() -> bool:
        attempts.append(1)
        raise RuntimeError("the server exited")

    with pytest.raises(RuntimeError, match="exited"):
        eventually_sync(check, message="an answer", timeout=5, retrying_on=(OSError,))
    assert len(attempts) == 1
