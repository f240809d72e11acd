"""`gpu-autoscaler --help` stays fast: it imports none of the heavy libraries (benchmarks/bench_cli_help.py
times it); the commands it lists without importing them say what their own help says."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import click
import pytest

from autoscaler.commands.cli import LAZY_COMMANDS, main

HEAVY = ("statsmodels", "sklearn", "scipy", "pandas", "numpy", "matplotlib", "kubernetes_asyncio", "grpc", "pydantic")

_PROBE = """
import json, sys
from autoscaler.commands.cli import main
try:
    main(sys.argv[1:], prog_name="gpu-autoscaler")
except SystemExit as done:
    assert done.code == 0, done.code
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules} & set(json.loads(HEAVY)))))
"""


LIGHT_HELP = (
    ["--help"], ["serve", "--help"], ["check-config", "--help"], ["preflight", "-h"], ["backtest", "-h"],
    ["report", "-h"], ["simulate", "--help"], ["simulate-cold-start", "--help"],
)  # fmt: skip


@pytest.mark.parametrize("arguments", [*LIGHT_HELP, ["forecast", "-h"]])
def test_help_imports_no_heavy_library(arguments):
    probe = _PROBE.replace("json.loads(HEAVY)", repr(json.dumps(HEAVY)).join(("json.loads(", ")")))
    result = subprocess.run([sys.executable, "-c", probe, *arguments], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Usage: gpu-autoscaler" in result.stdout
    assert json.loads(result.stdout.splitlines()[-1]) == []


@pytest.mark.parametrize("name", sorted(LAZY_COMMANDS))
def test_a_lazy_command_is_listed_with_its_own_help(name):
    module, attribute, text = LAZY_COMMANDS[name]
    command = getattr(importlib.import_module(module), attribute)
    assert command.name == name
    for limit in (45, 1000):
        assert click.Command(name, help=text).get_short_help_str(limit) == command.get_short_help_str(limit)


def test_every_command_runs_through_the_group():
    context = click.Context(main)
    commands = {name: main.get_command(context, name) for name in main.list_commands(context)}
    assert sorted(commands) == [
        "backtest", "check-config", "forecast", "preflight", "report", "serve", "simulate", "simulate-cold-start",
    ]  # fmt: skip
    assert all(isinstance(command, click.Command) for command in commands.values())
