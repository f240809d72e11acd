"""What a newcomer reads in ``--help``, asserted on the real command's output (a subprocess, at the
widths a terminal has): whole command descriptions, policy defaults never split inside a name, the
policy names explained where they are chosen, a ``simulate`` example that runs, and where each
default lead time comes from."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from autoscaler.commands import report, simulate
from autoscaler.commands.cli import LAZY_COMMANDS
from autoscaler.config.settings import ForecastSettings
from autoscaler.defaults import DEMO_LEAD_TIME, minutes_text
from autoscaler.refresh import pipeline
from autoscaler.simulation.policies import POLICY_NAMES, TUNABLE

ROOT = Path(__file__).resolve().parents[2]
WIDTHS = (60, 80, 120)  # COLUMNS; click caps the help at 100 (cli.main's max_content_width)


def help_text(*arguments: str, columns: int = 80) -> str:
    environment = {**os.environ, "COLUMNS": str(columns)}
    result = subprocess.run(
        [sys.executable, "-m", "autoscaler", *arguments, "--help"],
        capture_output=True, text=True, timeout=60, env=environment, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def option_block(text: str, option: str) -> str:
    """An option's help as one line: its wrapped lines joined by single spaces."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(option + " "))
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if line.lstrip().startswith("-"):
            break
        block.append(line)
    return " ".join(" ".join(block).split())


@pytest.mark.parametrize("columns", WIDTHS)
def test_the_command_list_shows_each_description_whole(columns: int) -> None:
    text = help_text(columns=columns)
    commands = text.split("\nCommands:\n", 1)[1]
    assert "..." not in commands
    flat = " ".join(commands.split())
    for name, (_module, _attribute, description) in LAZY_COMMANDS.items():
        assert f"{name} {' '.join(description.split())}" in flat
    assert "serve Serve the external metrics API (HTTPS), probes/metrics (HTTP) and KEDA's external scaler" in flat


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize(
    ("command", "default"), [("simulate", simulate.DEFAULT_POLICIES), ("report", report.DEFAULT_POLICIES)]
)
def test_the_policies_default_is_never_split_inside_a_name(command: str, default: str, columns: int) -> None:
    block = option_block(help_text(command, columns=columns), "--policies")
    shown = re.search(r"\[default: ([^\]]*)\]", block)
    assert shown, block
    # A name wrapped mid-word would come back as two tokens ("r eactive").
    assert shown.group(1).split(", ") == default.split(",")


@pytest.mark.parametrize("command", ["simulate", "report"])
def test_policy_names_are_explained_where_they_are_chosen(command: str) -> None:
    text = help_text(command)
    explained = text.split("Policies (--policies, comma-separated):", 1)[1].split("\nOptions:", 1)[0]
    first_words = {line.split()[0] for line in explained.splitlines() if line.startswith("    ") and line.split()}
    named = {word.split(":")[0].split("@")[0] for word in first_words}
    assert set(POLICY_NAMES) <= named
    assert {"auto:Q", "auto-slo:T", "static_buffer@T"} <= first_words
    assert all(f"{name}@T" in explained for name in TUNABLE)
    assert "1% = at most 1 % of minutes with any GPU short" in explained


def examples(text: str) -> list[list[str]]:
    """The epilog's example commands, continuation lines joined, as argument lists."""
    epilog = text.split("Examples", 1)[1]
    joined = re.sub(r"\\\n\s*", " ", epilog)
    return [shlex.split(line.strip()) for line in joined.splitlines() if line.strip().startswith("gpu-autoscaler ")]


def test_the_simulate_epilog_has_examples_and_the_first_one_runs() -> None:
    found = examples(help_text("simulate"))
    assert len(found) >= 3
    assert all(example[:2] == ["gpu-autoscaler", "simulate"] for example in found)
    first = found[0]
    result = subprocess.run(
        [sys.executable, "-m", "autoscaler", *first[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    policies = first[first.index("--policies") + 1].split(",")
    rows = [line.split("│")[1].strip() for line in result.stdout.splitlines() if line.startswith("│")]
    assert rows == policies


def test_report_and_simulate_plan_for_the_services_default_lead_time() -> None:
    """One default, the service's forecast.default_lead_time; the demo's own, longer one is named."""
    service = minutes_text(ForecastSettings().default_lead_time)
    for command in (report.report_command, simulate.simulate_command):
        (lead_time,) = [param for param in command.params if param.name == "lead_time"]
        assert lead_time.default == service
    assert pipeline.demo_pipeline().refresh.lead_time == DEMO_LEAD_TIME
    for command in ("report", "simulate"):
        block = option_block(help_text(command), "--lead-time")
        assert "forecast.default_lead_time" in block
        assert f"the demo uses {minutes_text(DEMO_LEAD_TIME)}" in block
        assert f"[default: {service}]" in block
