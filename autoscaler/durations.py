"""Durations written the way operators write them: ``30s``, ``5m``, ``1h30m``, ``14d``."""

from __future__ import annotations

import re
from datetime import timedelta

_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def parse_duration(text: str | float | int | timedelta) -> timedelta:
    """Parse ``5m``/``1h30m``/``14d`` or a number of seconds; raise ValueError naming the input."""
    if isinstance(text, timedelta):
        return text
    if isinstance(text, int | float) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"duration must not be negative, got {text}")
        return timedelta(seconds=text)
    if not isinstance(text, str):
        raise ValueError(f"expected a duration such as '5m' or '1h30m', got {text!r}")
    stripped = text.strip()
    try:
        return parse_duration(float(stripped))
    except ValueError:
        pass
    position = 0
    total = 0.0
    for match in _PART_RE.finditer(stripped):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if not stripped or position != len(stripped):
        raise ValueError(f"expected a duration such as '30s', '5m', '1h30m' or '14d', got {text!r}")
    return timedelta(seconds=total)


def format_duration(value: timedelta) -> str:
    """The shortest exact text for ``value`` in the units above (``90s`` -> ``1m30s``)."""
    seconds = value.total_seconds()
    if seconds == 0:
        return "0s"
    parts: list[str] = []
    for unit in ("d", "h", "m", "s"):
        size = _UNIT_SECONDS[unit]
        count = int(seconds // size)
        if count:
            parts.append(f"{count}{unit}")
            seconds -= count * size
    if seconds > 1e-9:
        parts.append(f"{round(seconds * 1000)}ms")
    return "".join(parts)
