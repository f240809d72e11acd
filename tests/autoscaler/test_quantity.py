import math
from decimal import Decimal, localcontext

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.quantity import format_quantity, parse_quantity


def test_parse_reads_both_forms():
    assert parse_quantity("1500m") == 1.5
    assert parse_quantity("12") == 12


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (12, "12"),
        (0, "0"),
        (1.5, "1500m"),
        (0.1 * 3, "301m"),
        (0.3, "300m"),
        (2.0001, "2001m"),
        (-0.5, "-500m"),
        (1e6, "1000000"),
    ],
)
def test_format(value, text):
    assert format_quantity(value) == text


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_is_refused(value):
    with pytest.raises(ValueError, match="non-finite"):
        format_quantity(value)


@given(st.floats(min_value=-1e9, max_value=1e9, allow_nan=False))
def test_never_rounds_down_and_stays_within_one_milli(value):
    served = Decimal(format_quantity(value).removesuffix("m")) / (1000 if format_quantity(value).endswith("m") else 1)
    exact = Decimal(repr(value))
    with localcontext() as context:
        context.prec = 400  # tiny floats need more than the default 28 digits to compare exactly
        assert exact <= served < exact + Decimal("0.001")
