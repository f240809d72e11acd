"""The README's two set-up commands are the ones the Makefile, .ci/run and a clean clone provide."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def readme_setup_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Set-up: two commands.*?```sh\n(.*?)```", text, re.S)
    assert block, "README lacks the set-up block"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_readme_names_exactly_run_and_test():
    assert readme_setup_commands() == ["make run", "make test"]


def test_ci_runs_the_readme_test_command():
    lines = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()]
    assert "make test" in lines
    assert (ROOT / ".ci/run").stat().st_mode & 0o111


@pytest.mark.skipif(shutil.which("git") is None, reason="git is needed to clone")
def test_clean_clone_has_what_both_commands_need(tmp_path):
    inside = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-inside-work-tree"], capture_output=True)
    if inside.returncode != 0:
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    for command in readme_setup_commands():
        # A dry run proves every target and prerequisite exists in the committed tree.
        dry = subprocess.run([*command.split(), "-n"], cwd=clone, capture_output=True, text=True)
        assert dry.returncode == 0, dry.stderr
    tracked = subprocess.run(["git", "ls-files"], cwd=clone, capture_output=True, text=True, check=True).stdout.split()
    for needed in (".ci/run", "Makefile", "pyproject.toml", "scripts/install-system-deps.sh", "Dockerfile"):
        assert needed in tracked
    assert any(path.startswith("autoscaler/demo_data/") for path in tracked)
