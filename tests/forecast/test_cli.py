"""The ``backtest`` command through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from autoscaler.commands.backtest import backtest
from tests.cli_helpers import assert_usage_error
from tests.data_helpers import write_csv

FAST = ["--eval-days", "1d", "--origin-every", "12h", "--horizons", "15m,60m"]


@pytest.fixture(scope="module")
def trace_csv(helios_10d: pd.Series, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Real minutes are not needed: the 5-minute trace is written and re-aggregated at 5m.
    return write_csv(helios_10d.iloc[-3 * 288 :], tmp_path_factory.mktemp("cli") / "helios.csv.gz")


def test_json_report(trace_csv: Path) -> None:
    result = CliRunner().invoke(backtest, ["--input", str(trace_csv), "--format", "json", *FAST])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["origins"] == 2
    assert report["step_seconds"] == 300
    assert set(report["auto"]["pinball"]) == {"15m", "60m"}
    assert sum(report["selected_counts"].values()) == 2


def test_table_and_plot(trace_csv: Path, tmp_path: Path) -> None:
    plot = tmp_path / "plot.png"
    result = CliRunner().invoke(backtest, ["--input", str(trace_csv), "--format", "table", "--plot", str(plot), *FAST])
    assert result.exit_code == 0, result.output
    assert "naive_empirical" in result.stdout
    assert "auto" in result.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("content", "arguments", "expected"),
    [
        ("timestamp,value\n2024-01-01T00:00:00Z,1\nnot-a-time,2\n", [], "line 3, column 'timestamp'"),
        ("timestamp,value\n2024-01-01T00:00:00Z,x\n", [], "line 2, column 'value'"),
        ("ts,value\n2024-01-01T00:00:00Z,1\n", [], "line 1, column 'timestamp'"),
        ("timestamp,value\n0,1\n300,2\n600,3\n", [], "too short for a backtest"),
        ("timestamp,value\n2024-01-01T00:00:00Z,1\n", ["--step", "5x"], "invalid duration '5x'"),
        ("timestamp,value\n2024-01-01T00:00:00Z,1\n", ["--horizons", "7m"], "not a positive multiple"),
    ],
    ids=["bad-timestamp", "bad-value", "missing-column", "too-short", "bad-step", "bad-horizon"],
)
def test_bad_input_is_a_usage_error(tmp_path: Path, content: str, arguments: list[str], expected: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content)
    result = CliRunner().invoke(backtest, ["--input", str(path), *arguments])
    assert_usage_error(result, expected)


def test_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(backtest, ["--input", str(tmp_path / "absent.csv")])
    assert_usage_error(result, "not found")
