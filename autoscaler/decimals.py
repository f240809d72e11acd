"""Reading a number from outside strictly: plain decimal text only, finite and normal. Python's
``float`` and ``int`` would take "1_000", "infinity", "nan", surrounding spaces, other scripts' digits
and subnormals such as 1e-320, none of which a manifest, a flag or a saved value means.

Standard library only: the command line's number flags use it, and ``--help`` imports nothing heavy.
"""

from __future__ import annotations

import math
import re
import sys

DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
INTEGER = re.compile(r"[+-]?[0-9]+")


def is_normal_number(value: float) -> bool:
    """Finite, and zero or a normal float: a subnormal (below 2.2e-308) is a typo or an attack."""
    return math.isfinite(value) and (value == 0 or abs(value) >= sys.float_info.min)


def parse_decimal(text: str) -> float | None:
    """``text`` (plain decimal, as Go's strconv.ParseFloat reads KEDA's metadata) as a normal number, else ``None``."""
    if not DECIMAL.fullmatch(text):
        return None
    value = float(text)
    return value if is_normal_number(value) else None


def parse_integer(text: str) -> int | None:
    """``text`` as a plain decimal integer (ASCII digits, an optional sign), else ``None``."""
    return int(text) if INTEGER.fullmatch(text) else None
