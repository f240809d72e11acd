"""Every command follows one error convention (autoscaler/commands/errors.py): a usage error exits 2
with click's ``Error: ...``, a runtime failure exits 1 with ``error: ...``. One of each per command."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from autoscaler.commands.cli import main
from tests.cli_helpers import assert_runtime_failure, assert_usage_error

# Writing there fails with ENOSPC: a disk that fills up while a command writes its plot.
FULL_DISK = Path("/dev/full")
needs_full_disk = pytest.mark.skipif(not FULL_DISK.exists(), reason="no /dev/full on this system")


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def demand_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three days of a daily cycle at 5 minutes: enough for a short backtest and a simulation."""
    index = pd.date_range("2024-03-01", periods=3 * 288, freq="5min", tz="UTC")
    hours = index.hour.to_numpy() + index.minute.to_numpy() / 60
    values = 40 + 20 * np.sin(2 * np.pi * hours / 24) + np.random.default_rng(3).normal(0, 2, len(index))
    path = tmp_path_factory.mktemp("errors") / "demand.csv"
    frame = pd.DataFrame({"timestamp": index.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": values.round(2)})
    frame.to_csv(path, index=False)
    return path


def test_serve_invalid_config_is_a_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text("server:\n  secure_port: many\n")
    assert_usage_error(invoke("serve", "--config", str(config)), "server.secure_port")


@pytest.mark.slow
def test_serve_port_in_use_is_a_runtime_failure(tmp_path: Path) -> None:
    # A real process: serving configures logging and an event loop for the whole interpreter.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        serve = ["serve", "--demo", "--http-port", str(port), "--secure-port", "0", "--grpc-port", "0"]
        serve += ["--state-dir", str(tmp_path)]
        completed = subprocess.run(
            [sys.executable, "-m", "autoscaler", *serve],
            capture_output=True,
            text=True,
            timeout=120,
            env={k: v for k, v in os.environ.items() if not k.startswith("GPU_AUTOSCALER_")},
            check=False,
        )
    assert_runtime_failure(completed, "cannot serve: ")
    assert "Address already in use" in completed.stderr


def test_check_config_invalid_config_is_a_usage_error(tmp_path: Path) -> None:
    # check-config has no runtime failure: reading and validating the file is all it does, and
    # a file that cannot be read is the command line's fault (a usage error too).
    config = tmp_path / "settings.yaml"
    config.write_text("server:\n  secure_port: many\n")
    assert_usage_error(invoke("check-config", str(config)), "server.secure_port")
    assert_usage_error(invoke("check-config", str(tmp_path / "absent.yaml")), "cannot read settings file")


def test_forecast_bad_duration_is_a_usage_error() -> None:
    result = invoke("forecast", "--prometheus-url", "http://127.0.0.1:1", "--query", "up", "--step", "soon")
    assert_usage_error(result, "Invalid value for '--step': invalid duration 'soon'")


def test_forecast_unreachable_prometheus_is_a_runtime_failure() -> None:
    result = invoke("forecast", "--prometheus-url", "http://127.0.0.1:1", "--query", "up", "--timeout", "1s")
    assert_runtime_failure(result, "PrometheusUnavailable")
    assert result.stdout == "" and result.stderr.count("\n") == 1


def test_backtest_bad_duration_is_a_usage_error(demand_csv: Path) -> None:
    assert_usage_error(invoke("backtest", "--input", str(demand_csv), "--step", "5x"), "invalid duration '5x'")


def test_simulate_bad_duration_is_a_usage_error(demand_csv: Path) -> None:
    assert_usage_error(invoke("simulate", "--input", str(demand_csv), "--step", "fast"), "--step: invalid duration")


@needs_full_disk
@pytest.mark.parametrize(
    "arguments",
    [
        ("backtest", "--eval-days", "12h", "--origin-every", "12h", "--horizons", "15m"),
        ("simulate", "--step", "5m", "--warmup", "0s", "--policies", "reactive"),
    ],
    ids=["backtest", "simulate"],
)
def test_plot_on_a_full_disk_is_a_runtime_failure(demand_csv: Path, arguments: tuple[str, ...]) -> None:
    command, *options = arguments
    result = invoke(command, "--input", str(demand_csv), *options, "--plot", str(FULL_DISK))
    assert_runtime_failure(result, f"cannot write {FULL_DISK}: No space left on device")
    assert result.stdout.startswith("{")  # the report was written before the plot failed
