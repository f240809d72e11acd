"""``gpu-autoscaler simulate-cold-start`` end to end: a CSV in, the three wakers' figures out."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from autoscaler.commands.cold_start import cold_start_command


@pytest.fixture
def requests_csv(tmp_path):
    """Two days of requests per minute: 20 per minute from 08:00 to 18:00, none at night."""
    index = pd.date_range("2026-11-01", periods=2 * 1440, freq="1min", tz="UTC")
    hours = index.hour.to_numpy()
    counts = np.where((hours >= 8) & (hours < 18), 20.0, 0.0)
    path = tmp_path / "requests.csv"
    pd.DataFrame({"timestamp": index.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": counts}).to_csv(path, index=False)
    return path


def test_reports_every_waker(requests_csv):
    args = ["--requests", str(requests_csv), "--warmup", "1d", "--reselect-every", "1d", "--lookback", "1d"]
    result = CliRunner().invoke(cold_start_command, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert (report["cold_start_seconds"], report["lead_time_seconds"], report["replica_rate"]) == (180.0, 270.0, 20.0)
    assert list(report["wakers"]) == ["reactive", "forecast", "forecast+observed"]
    reactive, woken = report["wakers"]["reactive"], report["wakers"]["forecast"]
    assert reactive["requests"] == woken["requests"] == 10 * 60 * 20  # the scored day
    # Reactive wakes at 08:01 and is Ready at 08:04: the first 4 minutes' requests find no replica.
    assert reactive["requests_while_none_ready"] == pytest.approx(80.0)
    assert reactive["wakes"] == 1
    # A forecast that learned yesterday's morning wakes it earlier.
    assert woken["requests_while_none_ready"] < reactive["requests_while_none_ready"]
    table = CliRunner().invoke(cold_start_command, [*args, "--format", "table"])
    assert "| reactive | 12,000 | 80.0 | 0.67% | 1 |" in table.output


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("time,value\n2026-11-01T00:00:00Z,1\n", "expected the columns timestamp,value"),
        ("timestamp,value\n2026-11-01T00:00:00Z,1\n2026-11-01T00:02:00Z,1\n", "every minute without gaps"),
        ("timestamp,value\n2026-11-01T00:00:00Z,1\n2026-11-01T00:01:00Z,-1\n", "numbers >= 0"),
    ],
)
def test_bad_requests_are_usage_errors(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    result = CliRunner().invoke(cold_start_command, ["--requests", str(path)])
    assert result.exit_code == 2 and message in result.output


def test_a_warmup_over_the_whole_series_is_a_usage_error(requests_csv):
    result = CliRunner().invoke(cold_start_command, ["--requests", str(requests_csv), "--warmup", "3d"])
    assert result.exit_code == 2 and "warm-up covers the whole request series" in result.output
