"""Formatting served values as Kubernetes quantity strings ("12", "1500m")."""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, Decimal


def format_quantity(value: float) -> str:
    """Format ``value`` as a Kubernetes quantity in milli-units, rounded up.

    The HPA reads the value with ``MilliValue()``, which rounds up to milli-units; rounding up here
    too means the HPA sees exactly what we served, and a forecast is never shaved below its value.
    """
    if not math.isfinite(value):
        raise ValueError(f"cannot serve a non-finite value ({value!r}) as a quantity")
    # Decimal from repr avoids binary float noise (0.1 * 3 would otherwise ceil to 301m).
    milli = int((Decimal(repr(value)) * 1000).to_integral_value(rounding=ROUND_CEILING))
    if milli % 1000 == 0:
        return str(milli // 1000)
    return f"{milli}m"


def parse_quantity(text: str) -> float:
    """Parse the two forms :func:`format_quantity` writes (and plain decimals), for tests and clients."""
    text = text.strip()
    if text.endswith("m"):
        return int(text[:-1]) / 1000
    return float(text)
