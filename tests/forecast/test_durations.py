"""The one duration parser: every rule its docstring states, and the positive variant."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from forecast.durations import parse_duration, parse_positive_duration, steps_in


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", timedelta(milliseconds=500)),
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("1.5h", timedelta(minutes=90)),
        ("1h30m", timedelta(minutes=90)),
        ("7d", timedelta(days=7)),
        ("2w", timedelta(weeks=2)),
        ("1H30M", timedelta(minutes=90)),  # units are case-insensitive
        (" 5m ", timedelta(minutes=5)),  # surrounding whitespace is ignored
        ("90", timedelta(seconds=90)),  # a bare number is seconds
        ("0.5", timedelta(milliseconds=500)),
        ("1e3", timedelta(seconds=1000)),
        ("0", timedelta(0)),  # zero is a duration, however spelled
        ("0s", timedelta(0)),
        ("0.0s", timedelta(0)),
        ("0m0s", timedelta(0)),
    ],
)
def test_text(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("number", "expected"), [(90, timedelta(seconds=90)), (2.5, timedelta(seconds=2.5)), (0, timedelta(0))]
)
def test_numbers_are_seconds(number: float, expected: timedelta) -> None:
    assert parse_duration(number) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "expected a number and a unit"),
        ("m", "expected a number and a unit"),
        ("5x", "expected a number and a unit"),
        ("6 hours", "expected a number and a unit"),
        ("-5m", "expected a number and a unit"),
        ("-5", "must not be negative"),
        (-1, "must not be negative"),
        ("inf", "expected a number and a unit"),  # not a plain decimal, as "1_000" or other scripts' digits
        ("nan", "expected a number and a unit"),
        ("1_000", "expected a number and a unit"),
        ("\u0661\u0662", "expected a number and a unit"),
        ("\u0661\u0662m", "expected a number and a unit"),
        ("0x10", "expected a number and a unit"),
        (float("inf"), "must be finite"),
        (float("nan"), "must be finite"),
        ("1e-320", "subnormal"),
        (1e-320, "subnormal"),
        ("1e300", "longer than 106751 days"),
        ("1e300s", "expected a number and a unit"),  # exponents only in bare numbers
        ("106752d", "longer than 106751 days"),
        (True, "expected a duration"),
    ],
)
def test_refused(value: str | float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_duration(value)


def test_the_longest_duration_fits_pandas() -> None:
    assert pd.Timedelta(parse_duration("106751d")) == pd.Timedelta(days=106751)


@pytest.mark.parametrize("zero", ["0", "0s", "0m0s", "0.0001ms"])
def test_positive_refuses_zero(zero: str) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        parse_positive_duration(zero)
    assert parse_positive_duration("5m") == timedelta(minutes=5)


@given(st.text(max_size=12))
def test_any_text_parses_or_raises_value_error(text: str) -> None:
    try:
        duration = parse_duration(text)
    except ValueError:
        return
    assert timedelta(0) <= duration <= pd.Timedelta.max


def test_steps_in() -> None:
    assert steps_in(parse_duration("60m"), parse_duration("5m")) == 12
    assert steps_in(parse_duration("60m"), pd.Timedelta(minutes=5)) == 12
    with pytest.raises(ValueError, match="multiple"):
        steps_in(parse_duration("7m"), parse_duration("5m"))
