"""Formatting served values as Kubernetes quantity strings ("12", "1500m"), and reading numbers from
outside strictly: plain decimals only, finite and normal (Python's ``float`` would take "1_000",
"infinity" and subnormals such as 1e-320, none of which a manifest or a saved value means; the
readers themselves are in :mod:`autoscaler.decimals`, which the command line shares).

:data:`Number` and :data:`Count` are the settings' number fields: a YAML number or plain decimal
text, never a boolean, ``1_000``, ``infinity``, NaN or a subnormal; pydantic's error names the field.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, Decimal
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from autoscaler.decimals import DECIMAL
from autoscaler.decimals import is_normal_number as is_normal_number
from autoscaler.decimals import parse_decimal as parse_decimal


def _plain_number(value: object) -> object:
    """A number as YAML or JSON writes one, or plain decimal text; pydantic converts what passes."""
    if isinstance(value, bool) or (isinstance(value, str) and not DECIMAL.fullmatch(value)):
        raise ValueError("expected a plain decimal number (not 1_000, infinity, a boolean or text)")
    return value


def _normal(value: float) -> float:
    if not is_normal_number(value):
        raise ValueError("must be finite and not subnormal (no infinity, NaN or 0 < |x| < 2.2e-308)")
    return value


Number = Annotated[float, BeforeValidator(_plain_number), AfterValidator(_normal)]
Count = Annotated[int, BeforeValidator(_plain_number)]


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
