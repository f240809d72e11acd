"""The command line's error convention (autoscaler/commands/errors.py), asserted one way in every test.

A usage error exits 2 with nothing on stdout and click's usage block ending in ``Error: <message>``
on stderr; a runtime failure exits 1 and its last stderr line is ``error: <message>``.
"""

from __future__ import annotations

import subprocess

from click.testing import Result

CliOutcome = Result | subprocess.CompletedProcess[str]


def _exit_code(outcome: CliOutcome) -> int:
    return outcome.exit_code if isinstance(outcome, Result) else outcome.returncode


def assert_usage_error(outcome: CliOutcome, message: str) -> None:
    """Exit 2, no output, and ``message`` in the ``Error:`` part after click's usage lines."""
    assert _exit_code(outcome) == 2, (outcome.stdout, outcome.stderr)
    assert outcome.stdout == ""
    assert outcome.stderr.startswith("Usage: "), outcome.stderr
    _usage, separator, error = outcome.stderr.partition("\nError: ")
    assert separator, outcome.stderr
    assert message in error, outcome.stderr


def assert_runtime_failure(outcome: CliOutcome, message: str) -> None:
    """Exit 1 and a last stderr line ``error: ...`` holding ``message`` (a server may log before it)."""
    assert _exit_code(outcome) == 1, (outcome.stdout, outcome.stderr)
    last = outcome.stderr.rstrip("\n").rsplit("\n", 1)[-1]
    assert last.startswith("error: "), outcome.stderr
    assert message in last, outcome.stderr
