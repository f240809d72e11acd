"""The command line stays readable: no function in autoscaler/commands is longer than 60 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import autoscaler.commands

LONGEST = 60


def test_no_command_function_over_60_lines():
    package = Path(autoscaler.commands.__file__).parent
    too_long = []
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONGEST:
                    too_long.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    assert not too_long, "split these into named helpers: " + ", ".join(too_long)
