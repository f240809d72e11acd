"""Formatting served values as Kubernetes quantity strings ("12", "1500m"), and reading numbers from
outside strictly: plain decimals only, finite and normal (Python's ``float`` would take "1_000",
"infinity" and subnormals such as 1e-320, none of which a manifest or a saved value means; the
readers themselves are in :mod:`autoscaler.decimals`, which the command line shares).

:data:`Number` and :data:`Count` are the settings' number fields, strict as the command line's flags:
a YAML number (an integer for a :data:`Count`), never text (``"0.9"`` quoted), a boolean, ``1_000``,
``infinity``, NaN or a subnormal, and never a float for a :data:`Count` (``300.0``, ``1e3``); pydantic's
error names the field.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, Decimal
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from autoscaler.decimals import is_normal_number as is_normal_number
from autoscaler.decimals import parse_decimal as parse_decimal


def _number_not_text(value: object) -> object:
    """A number as YAML or JSON writes one (an int or a float), never text or a boolean. Settings are
    strict, as the command line is: a quoted ``"0.9"`` is text, which YAML writes for text."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("expected a number, not text or a boolean (write 0.9, not '0.9', 1_000 or infinity)")
    return value


def _whole_number(value: object) -> object:
    """An integer as YAML or JSON writes one: not text, not a float (``300.0``, ``1e3``) and not a boolean,
    as the command line refuses them for ``--workers``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("expected a whole number, not text, a boolean or a float (write 300, not '300', 300.0 or 1e3)")
    return value


def _normal(value: float) -> float:
    if not is_normal_number(value):
        raise ValueError("must be finite and not subnormal (no infinity, NaN or 0 < |x| < 2.2e-308)")
    return value


Number = Annotated[float, BeforeValidator(_number_not_text), AfterValidator(_normal)]
Count = Annotated[int, BeforeValidator(_whole_number)]


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
