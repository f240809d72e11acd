"""Durations in settings and on the command line: ``500ms``, ``30s``, ``5m``, ``1h30m``, ``14d``, or seconds."""

from __future__ import annotations

import re
from datetime import timedelta

from forecast.durations import parse_duration as parse_positive_duration


def parse_duration(value: str | float | int | timedelta) -> timedelta:
    """A duration from text with units or a number of seconds; zero is allowed, negatives are not."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"duration must not be negative, got {value}")
        return timedelta(seconds=value)
    if not isinstance(value, str):
        raise ValueError(f"expected a duration such as '5m' or '1h30m', got {value!r}")
    text = value.strip()
    try:
        return parse_duration(float(text))
    except ValueError:
        pass
    if re.fullmatch(r"0+(ms|[smhdw])", text):  # an explicit zero such as "0s"
        return timedelta(0)
    return parse_positive_duration(text).to_pytimedelta()
