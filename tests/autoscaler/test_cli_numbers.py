"""The command line's number flags are read as strictly as every other number from outside
(``autoscaler/commands/numbers.py`` over ``autoscaler/decimals.py``): ``1_000``, ``inf``, ``nan``,
subnormals and other lenient forms are a usage error naming the flag, before the command runs."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from autoscaler.commands.cli import PortOrOff, main
from autoscaler.commands.numbers import StrictFloat, StrictFloatRange, StrictInt, StrictIntRange
from tests.cli_helpers import assert_usage_error

NOT_A_DECIMAL = "expected a plain decimal number, finite and not subnormal (not 1_000, inf, nan or 1e-320), got {!r}"
NOT_AN_INTEGER = "expected a plain decimal integer (not 1_000, 1e3 or 8.0), got {!r}"
LENIENT_DECIMALS = ("1_000", "inf", "-infinity", "nan", "1e-320", "0x1p3", " 0.5", "\u0661")
LENIENT_INTEGERS = ("1_000", "1e3", "8.0", " 8", "\u0668", "inf")


def commands() -> dict[str, click.Command]:
    context = click.Context(main)
    found = {name: main.get_command(context, name) for name in main.list_commands(context)}
    return {name: command for name, command in found.items() if command is not None}


def numeric_options() -> list[tuple[str, str, click.ParamType]]:
    """(command, flag, type) of every option whose value click reads as a number."""
    numeric = (click.types.FloatParamType, click.types.IntParamType, PortOrOff)
    return [
        (name, option.opts[0], option.type)
        for name, command in sorted(commands().items())
        for option in command.params
        if isinstance(option, click.Option) and isinstance(option.type, numeric)
    ]


def test_every_numeric_option_is_read_strictly():
    options = numeric_options()
    assert len(options) >= 20
    strict = (StrictFloat, StrictFloatRange, StrictInt, StrictIntRange, PortOrOff)
    assert [(name, flag) for name, flag, kind in options if not isinstance(kind, strict)] == []


@pytest.mark.parametrize(("name", "flag", "kind"), numeric_options(), ids=lambda value: str(value))
def test_lenient_numbers_are_a_usage_error_naming_the_flag(name: str, flag: str, kind: click.ParamType):
    integral = isinstance(kind, click.types.IntParamType | PortOrOff)
    for value in LENIENT_INTEGERS if integral else LENIENT_DECIMALS:
        outcome = CliRunner().invoke(main, [name, f"{flag}={value}"])
        if isinstance(kind, PortOrOff):
            message = f"Invalid value for '{flag}': {value!r} is neither a port number nor 'off'"
        else:
            message = f"Invalid value for '{flag}': {(NOT_AN_INTEGER if integral else NOT_A_DECIMAL).format(value)}"
        assert_usage_error(outcome, message)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["report", "--gpu-hour-price=-1"], "Invalid value for '--gpu-hour-price': -1.0 is not in the range x>=0."),
        (["report", "--workers=65"], "Invalid value for '--workers': 65 is not in the range 1<=x<=64."),
        (["forecast", "--quantile=0.5"], "Invalid value for '--quantile': 0.5 is not in the range 0.5<x<1.0."),
    ],
)
def test_ranges_still_hold(arguments: list[str], message: str):
    assert_usage_error(CliRunner().invoke(main, arguments), message)


def test_plain_numbers_are_read():
    kinds = [StrictFloat(), StrictFloatRange(0, 1)]
    assert [kind.convert(text, None, None) for kind in kinds for text in ("0.5", "+.5", "5e-1")] == [0.5] * 6
    integers = [StrictInt(), StrictIntRange(1, 64)]
    assert [kind.convert(text, None, None) for kind in integers for text in ("8", "+8")] == [8] * 4
