"""Numbers in the settings are strict, as on the command line: a YAML number, never text (a quoted
``"0.9"``), a boolean or a lenient spelling, and never a float for an integer field (``300.0``, ``1e3``,
which ``--workers`` refuses too). Environment values are text: read as YAML scalars, ``300`` is an
integer and ``300.0`` is not. Each refusal names the field."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from autoscaler.commands.cli import main
from autoscaler.config.settings_loader import SettingsError, load_settings
from tests.cli_helpers import assert_usage_error


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(text)
    return path


METRIC = "prometheus: {url: 'http://p:9090'}\nsignals:\n  - {name: s, preset: gpus_requested}\nmetrics:\n  m: "
NUMBER = "Value error, expected a number, not text or a boolean (write 0.9, not '0.9', 1_000 or infinity)"
WHOLE = "Value error, expected a whole number, not text, a boolean or a float (write 300, not '300', 300.0 or 1e3)"
NOT_NORMAL = "Value error, must be finite and not subnormal (no infinity, NaN or 0 < |x| < 2.2e-308)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # The probe's cases: quoted numbers, and floats for integers.
        ("server:\n  max_headers: '300'\n", f"server.max_headers: {WHOLE} (got '300')"),
        ('server:\n  max_headers: "300"\n', f"server.max_headers: {WHOLE} (got '300')"),
        (METRIC + "{signal: s, kind: demand, quantile: '0.9'}\n", f"metrics.m.quantile: {NUMBER} (got '0.9')"),
        ("server:\n  max_headers: 300.0\n", f"server.max_headers: {WHOLE} (got 300.0)"),
        ("server:\n  max_headers: 1e3\n", f"server.max_headers: {WHOLE} (got 1000.0)"),
        ("forecast:\n  workers: 1e3\n", f"forecast.workers: {WHOLE} (got 1000.0)"),
        ("forecast:\n  workers: 2.0\n", f"forecast.workers: {WHOLE} (got 2.0)"),
        (
            "inputs:\n  launches:\n    failing_after: 3.0\n",
            f"inputs.launches.failing_after: {WHOLE} (got 3.0)",
        ),
        ("inputs:\n  launches:\n    failing_after: '3'\n", f"inputs.launches.failing_after: {WHOLE} (got '3')"),
        ("demo:\n  speed: '60'\n", f"demo.speed: {NUMBER} (got '60')"),
        ("inputs:\n  resource_claims:\n    device_classes: {gpu.example.com: '2'}\n", "device_classes.gpu.example.com"),
        # Lenient spellings, quoted or not.
        ("server:\n  secure_port: 6_443\n", f"server.secure_port: {WHOLE} (got '6_443')"),
        ("server:\n  secure_port: '6_443'\n", f"server.secure_port: {WHOLE} (got '6_443')"),
        ("server:\n  secure_port: 1:30\n", f"server.secure_port: {WHOLE} (got '1:30')"),
        ("server:\n  secure_port: 0x1f\n", f"server.secure_port: {WHOLE} (got '0x1f')"),
        ("server:\n  secure_port: true\n", f"server.secure_port: {WHOLE} (got True)"),
        (METRIC + "{signal: s, kind: demand, fallback_value: 1.0e-320}\n", f"metrics.m.fallback_value: {NOT_NORMAL}"),
        (METRIC + "{signal: s, kind: demand, fallback_value: '1e-320'}\n", f"metrics.m.fallback_value: {NUMBER}"),
        (METRIC + "{signal: s, kind: demand, max_value: .inf}\n", f"metrics.m.max_value: {NOT_NORMAL} (got inf)"),
        (
            METRIC + "{signal: s, kind: demand, max_value: infinity}\n",
            f"metrics.m.max_value: {NUMBER} (got 'infinity')",
        ),
        (METRIC + "{signal: s, kind: demand, min_value: .nan}\n", f"metrics.m.min_value: {NOT_NORMAL} (got nan)"),
        (METRIC + "{signal: s, kind: demand, min_value: false}\n", f"metrics.m.min_value: {NUMBER} (got False)"),
        (
            METRIC + "{signal: s, kind: demand, quantile: '\u0660.\u0669'}\n",
            f"metrics.m.quantile: {NUMBER} (got '\u0660.\u0669')",
        ),
        # Durations take text by design ("5m"); bare seconds are plain decimals only.
        ("server:\n  shutdown_delay: 1_000\n", "server.shutdown_delay: Value error, invalid duration '1_000'"),
        ("server:\n  shutdown_delay: 1.0e-320\n", "shutdown_delay: Value error, invalid duration 1e-320: subnormal"),
        ("server:\n  shutdown_delay: '\u0661\u0662m'\n", "Value error, invalid duration '\u0661\u0662m'"),
    ],
)
def test_lenient_numbers_are_refused_naming_the_field(tmp_path, text, expected):
    with pytest.raises(SettingsError) as caught:
        load_settings(write(tmp_path, text), environ={})
    assert expected in str(caught.value)


def test_numbers_read_as_yaml_1_2_reads_them(tmp_path):
    text = "server:\n  secure_port: 06443\n  max_headers: 300\n  shutdown_delay: 1e1\nforecast:\n  workers: +2\n"
    settings = load_settings(write(tmp_path, text), environ={})
    server = settings.server
    assert (server.secure_port, server.max_headers, server.shutdown_delay.total_seconds()) == (6443, 300, 10.0)
    assert settings.forecast.workers == 2


def test_an_integer_is_a_number(tmp_path):
    text = METRIC + "{signal: s, kind: rate, quantile: 0.95, target_utilization: 60, max_value: 100}\n"
    metric = load_settings(write(tmp_path, text), environ={}).metrics["m"]
    assert (metric.quantile, metric.target_utilization, metric.max_value) == (0.95, 60.0, 100.0)
    assert type(metric.target_utilization) is float


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("SECURE_PORT", "7_443", f"server.secure_port: {WHOLE} (got '7_443')"),
        ("MAX_HEADERS", "1e400", f"server.max_headers: {WHOLE} (got inf)"),
        ("MAX_HEADERS", "infinity", f"server.max_headers: {WHOLE} (got 'infinity')"),
        ("MAX_HEADERS", "300.0", f"server.max_headers: {WHOLE} (got 300.0)"),
        ("MAX_HEADERS", "1e3", f"server.max_headers: {WHOLE} (got 1000.0)"),
        ("MAX_HEADERS", "'300'", f"server.max_headers: {WHOLE} (got '300')"),
        ("MAX_HEADERS", "true", f"server.max_headers: {WHOLE} (got True)"),
    ],
)
def test_lenient_numbers_in_the_environment_are_refused_naming_the_field(field, value, expected):
    with pytest.raises(SettingsError) as caught:
        load_settings(None, environ={f"GPU_AUTOSCALER_SERVER__{field}": value})
    assert expected in str(caught.value)


def test_the_environment_is_text_read_as_the_command_line_reads_numbers(tmp_path):
    environ = {
        "GPU_AUTOSCALER_SERVER__MAX_HEADERS": "300",
        "GPU_AUTOSCALER_FORECAST__WORKERS": "2",
        "GPU_AUTOSCALER_METRICS__M__QUANTILE": "0.95",
    }
    path = write(tmp_path, METRIC + "{signal: s, kind: demand}\n")
    settings = load_settings(path, environ=environ)
    assert (settings.server.max_headers, settings.forecast.workers, settings.metrics["m"].quantile) == (300, 2, 0.95)


def test_check_config_refuses_quoted_numbers_and_floats_for_integers(tmp_path):
    """The probe's files, through the command itself: exit 2 naming the field; the same file unquoted is valid."""
    runner = CliRunner()
    for text, field in [
        ("server:\n  max_headers: '300'\n", "server.max_headers"),
        (METRIC + "{signal: s, kind: demand, quantile: '0.9'}\n", "metrics.m.quantile"),
        ("server:\n  max_headers: 1e3\n", "server.max_headers"),
        ("server:\n  max_headers: 300.0\n", "server.max_headers"),
    ]:
        path = write(tmp_path, text)
        assert_usage_error(runner.invoke(main, ["check-config", str(path)]), f"{field}: Value error, expected a")
    good = write(tmp_path, "server:\n  max_headers: 300\n" + METRIC + "{signal: s, kind: demand, quantile: 0.9}\n")
    result = runner.invoke(main, ["check-config", str(good)])
    assert (result.exit_code, result.stdout) == (0, f"{good}: valid\n")


def test_check_config_process_names_a_quoted_number(tmp_path):
    path = write(tmp_path, "server:\n  max_headers: '300'\n")
    completed = subprocess.run(
        [sys.executable, "-m", "autoscaler", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={key: value for key, value in os.environ.items() if not key.startswith("GPU_AUTOSCALER_")},
    )
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.endswith(f"Error: invalid settings in {path}:\n  server.max_headers: {WHOLE} (got '300')\n")
