"""The command line's number flags, read as strictly as every other number from outside
(:mod:`autoscaler.decimals`): click's ``float`` and ``int`` would take ``1_000``, ``inf``, ``nan``,
`` 8 `` and subnormals such as ``1e-320``. A refused value is a usage error naming the flag.

Every numeric option takes its type from :func:`decimal` or :func:`integer`; a test walks every
command's options to hold that. Only click and the standard library are imported: ``--help`` stays fast.
"""

from __future__ import annotations

from typing import Any

import click

from autoscaler.decimals import is_normal_number, parse_decimal, parse_integer

_NOT_A_DECIMAL = "expected a plain decimal number, finite and not subnormal (not 1_000, inf, nan or 1e-320), got {!r}"
Param = click.Parameter | None
Context = click.Context | None
_NOT_AN_INTEGER = "expected a plain decimal integer (not 1_000, 1e3 or 8.0), got {!r}"


def _strict_float(kind: click.ParamType[Any], value: Any, param: Param, ctx: Context) -> Any:
    """``value`` as a float if it is plain decimal text; a default (already a number) must be normal."""
    if isinstance(value, str):
        number = parse_decimal(value)
        if number is None:
            kind.fail(_NOT_A_DECIMAL.format(value), param, ctx)
        return number
    if isinstance(value, float) and not is_normal_number(value):
        kind.fail(_NOT_A_DECIMAL.format(value), param, ctx)
    return value


def _strict_int(kind: click.ParamType[Any], value: Any, param: Param, ctx: Context) -> Any:
    if isinstance(value, str):
        number = parse_integer(value)
        if number is None:
            kind.fail(_NOT_AN_INTEGER.format(value), param, ctx)
        return number
    return value


class StrictFloat(click.types.FloatParamType):
    """click's ``float``, strictly."""

    def convert(self, value: Any, param: Param, ctx: Context) -> Any:
        return super().convert(_strict_float(self, value, param, ctx), param, ctx)


class StrictFloatRange(click.FloatRange):
    """click's ``FloatRange``, strictly."""

    def convert(self, value: Any, param: Param, ctx: Context) -> Any:
        return super().convert(_strict_float(self, value, param, ctx), param, ctx)


class StrictInt(click.types.IntParamType):
    """click's ``int``, strictly."""

    def convert(self, value: Any, param: Param, ctx: Context) -> Any:
        return super().convert(_strict_int(self, value, param, ctx), param, ctx)


class StrictIntRange(click.IntRange):
    """click's ``IntRange``, strictly."""

    def convert(self, value: Any, param: Param, ctx: Context) -> Any:
        return super().convert(_strict_int(self, value, param, ctx), param, ctx)


def decimal(
    min: float | None = None, max: float | None = None, *, min_open: bool = False, max_open: bool = False
) -> click.ParamType[float]:
    """A float flag, bounded as ``click.FloatRange`` bounds it when ``min`` or ``max`` is given."""
    if min is None and max is None:
        return StrictFloat()
    return StrictFloatRange(min, max, min_open=min_open, max_open=max_open)


def integer(min: int | None = None, max: int | None = None) -> click.ParamType[int]:
    """An integer flag, bounded as ``click.IntRange`` bounds it when ``min`` or ``max`` is given."""
    if min is None and max is None:
        return StrictInt()
    return StrictIntRange(min, max)


class PositiveDuration(click.ParamType[Any]):
    """A duration flag such as ``120s``, ``2m`` or ``1h30m``, above zero."""

    name = "duration"

    def convert(self, value: Any, param: Param, ctx: Context) -> Any:
        from datetime import timedelta

        from forecast.durations import parse_positive_duration  # imported when a flag is read, not for --help

        if isinstance(value, timedelta):
            return value
        try:
            return parse_positive_duration(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


QUERY_TIMEOUT_HELP = (
    "time for each Prometheus request, its whole answer included; a 30-day range on a modest cluster "
    "takes about a minute"
)
