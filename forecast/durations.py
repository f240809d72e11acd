"""Durations as people write them, with one meaning everywhere: settings, the inspection API's
``history``, every command's flags, and policy, schedule and trace fields.

:func:`parse_duration` reads:

- text made of ``<number><unit>`` parts, units ``ms``, ``s``, ``m``, ``h``, ``d``, ``w``, numbers
  with optional decimals, case-insensitive: ``500ms``, ``30s``, ``5m``, ``1.5h``, ``1h30m``, ``7d``;
- a bare number of seconds, as plain decimal text (``90``, ``0.5``, ``1e3``; not ``1_000``,
  ``infinity`` or other scripts' digits, which Python's ``float`` would read) or as an ``int`` or
  ``float`` (a YAML number), as Prometheus's API reads durations;
- surrounding whitespace is ignored.

Zero is a duration (``0``, ``0s``); negative, non-finite, subnormal (below 2.2e-308) and
out-of-range values (beyond pandas' ``Timedelta``, about 292 years) and anything else are refused
with ``ValueError``.
:func:`parse_positive_duration` also refuses zero, for steps, horizons and windows.
"""

from __future__ import annotations

import math
import re
import sys
from datetime import timedelta

import pandas as pd

_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|[smhdw])")
_SECONDS = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e[+-]?[0-9]+)?")
_EXPECTED = "expected a number and a unit (ms, s, m, h, d, w), e.g. 5m, or a number of seconds"
# Durations end up in pandas (resampling steps, history windows), whose Timedelta ends at about 292 years.
_LONGEST = pd.Timedelta.max.floor("s")
_LONGEST_SECONDS = _LONGEST.total_seconds()


def parse_duration(value: str | float) -> timedelta:
    """A duration of zero or more from text with units or a number of seconds (module docstring)."""
    if isinstance(value, bool):  # an int to Python, but never meant as a number of seconds
        raise ValueError(f"expected a duration such as '5m' or '1h30m', got {value!r}")
    seconds = value if not isinstance(value, str) else _seconds_of_text(value)
    if not math.isfinite(seconds):
        raise ValueError(f"invalid duration {value!r}: must be finite")
    if 0 < abs(seconds) < sys.float_info.min:
        raise ValueError(f"invalid duration {value!r}: subnormal")
    if seconds < 0:
        raise ValueError(f"invalid duration {value!r}: must not be negative")
    if seconds > _LONGEST_SECONDS:
        raise ValueError(f"invalid duration {value!r}: longer than {_LONGEST.days} days")
    return timedelta(seconds=seconds)


def parse_positive_duration(value: str | float) -> timedelta:
    """:func:`parse_duration`, refusing zero too."""
    duration = parse_duration(value)
    if duration <= timedelta(0):
        raise ValueError(f"invalid duration {value!r}: must be positive")
    return duration


def _seconds_of_text(text: str) -> float:
    cleaned = text.strip().lower()
    if _SECONDS.fullmatch(cleaned):
        return float(cleaned)
    parts = _PART.findall(cleaned)
    if not cleaned or "".join(f"{number}{unit}" for number, unit in parts) != cleaned:
        raise ValueError(f"invalid duration {text!r}: {_EXPECTED}")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def steps_in(duration: timedelta, step: timedelta) -> int:
    """How many whole ``step``s make ``duration``; it must be a positive multiple of the step."""
    steps, remainder = divmod(duration, step)
    if steps < 1 or remainder != timedelta(0):
        raise ValueError(f"duration {duration} is not a positive multiple of the step {step}")
    return int(steps)
