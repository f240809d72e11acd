"""Whether the suite runs under CI, decided in one place, and what a test does when a tool it needs is
missing: under CI that is a failure (CI installs every tool: ``make system-deps``); elsewhere the test
is skipped and the reason, which says how to get the tool, shows in pytest's skip summary (``-rs`` in
pyproject.toml's addopts).

CI is ``CI=true`` (any case), as GitHub Actions, GitLab CI and most others set it; ``CI=1`` and
``CI=yes`` count too. Unset, empty, ``false`` or ``0`` is not CI.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

VARIABLE = "CI"
TRUE_VALUES = frozenset({"true", "1", "yes"})


def under_ci() -> bool:
    """``CI`` names a CI run (``true``, ``1`` or ``yes``, any case)."""
    return os.environ.get(VARIABLE, "").strip().lower() in TRUE_VALUES


def missing_tool(reason: str) -> NoReturn:
    """Fail under CI, else skip with ``reason`` (what is missing and how to get it)."""
    if under_ci():
        pytest.fail(f"{reason} (CI={os.environ.get(VARIABLE)}: every tool is required, so this fails, not skips)")
    pytest.skip(reason)
