"""One rule for "under CI" (tests/ci.py), and a missing tool's reason in pytest's skip summary."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import ci

ROOT = Path(__file__).resolve().parent.parent
# A test that runs kubectl (tests/manifests): without kubectl it skips, or fails under CI.
NEEDS_KUBECTL = "tests/manifests/test_manifests.py::test_renders_unique_objects"


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, False), ("", False), ("false", False), ("0", False), ("true", True), ("TRUE", True), ("1", True)],
)
def test_under_ci_reads_the_one_variable(monkeypatch: pytest.MonkeyPatch, value: str | None, expected: bool) -> None:
    if value is None:
        monkeypatch.delenv(ci.VARIABLE, raising=False)
    else:
        monkeypatch.setenv(ci.VARIABLE, value)
    assert ci.under_ci() is expected


def test_no_other_test_module_reads_the_ci_variable() -> None:
    reading = re.compile(r"""environ(\.get)?\s*[\[(]\s*["']CI["']|getenv\(\s*["']CI["']""")
    readers = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("*.py")
        if path.name != "ci.py" and reading.search(path.read_text(encoding="utf-8"))
    ]
    assert readers == []


def _run_without_tools(ci_value: str | None) -> subprocess.CompletedProcess[str]:
    # Only the interpreter's own directory on PATH: kubectl (in /usr/bin or the like) is missing.
    environment = {key: value for key, value in os.environ.items() if key != ci.VARIABLE}
    environment["PATH"] = str(Path(sys.executable).parent)
    if ci_value is not None:
        environment[ci.VARIABLE] = ci_value
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", NEEDS_KUBECTL + "[base]"],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_outside_ci_a_missing_tool_says_so_in_the_skip_summary() -> None:
    result = _run_without_tools(None)
    assert result.returncode == 0, result.stdout[-2000:]
    summary = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(summary) == 1, result.stdout[-2000:]
    assert "kubectl is not installed; to run these tests install it: https://kubernetes.io/" in summary[0]


def test_under_ci_a_missing_tool_fails() -> None:
    result = _run_without_tools("true")
    assert result.returncode == 1, result.stdout[-2000:]
    assert "1 failed" in result.stdout
    assert "every tool is required, so this fails, not skips" in result.stdout
