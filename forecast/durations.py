"""Parse human durations such as ``5m``, ``1h``, ``7d`` or ``1h30m``."""

from __future__ import annotations

import re

import pandas as pd

_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|[smhdw])")


def parse_duration(text: str) -> pd.Timedelta:
    """A positive duration from ``<number><unit>`` parts (units s, m, h, d, w), e.g. ``1h30m``."""
    cleaned = text.strip().lower()
    parts = _PART.findall(cleaned)
    if not cleaned or "".join(f"{number}{unit}" for number, unit in parts) != cleaned:
        raise ValueError(f"invalid duration {text!r}: expected a number and a unit (ms, s, m, h, d, w), e.g. 5m")
    seconds = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)
    if seconds <= 0:
        raise ValueError(f"invalid duration {text!r}: must be positive")
    return pd.Timedelta(seconds=seconds)


def steps_in(duration: pd.Timedelta, step: pd.Timedelta) -> int:
    """How many whole ``step``s make ``duration``; it must be a positive multiple of the step."""
    steps, remainder = divmod(duration, step)
    if steps < 1 or remainder != pd.Timedelta(0):
        raise ValueError(f"duration {duration} is not a positive multiple of the step {step}")
    return int(steps)
