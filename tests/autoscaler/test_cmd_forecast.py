"""`gpu-autoscaler forecast` end to end against the real Prometheus."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from autoscaler.commands.cli import main
from tests.cli_helpers import assert_runtime_failure, assert_usage_error

pytestmark = pytest.mark.prometheus

A100_QUERY = 'sum(kube_pod_container_resource_requests{resource="nvidia_com_gpu", node=~"earth-.*"})'


def run(*args: str):
    return CliRunner().invoke(main, ["forecast", *args], catch_exceptions=False)


def test_json_shape_and_values(prometheus):
    at = prometheus.trace.end - pd.Timedelta(hours=6)
    result = run(
        "--prometheus-url",
        prometheus.url,
        "--query",
        A100_QUERY,
        "--lookback",
        "3d",
        "--step",
        "5m",
        "--horizon",
        "1h",
        "--quantile",
        "0.9",
        "--at",
        at.isoformat(),
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert set(document) == {"query", "at", "step_seconds", "history", "forecast"}
    assert document["query"] == A100_QUERY
    assert document["at"] == at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert document["step_seconds"] == 300
    assert set(document["history"]) == {"start", "end", "points", "gaps", "last", "mean", "min", "max"}
    # As of `at`, nothing after it is seen.
    assert pd.Timestamp(document["history"]["end"]) <= at
    grid = pd.date_range((at - pd.Timedelta(days=3)).ceil("5min"), at.floor("5min"), freq="5min")
    assert document["history"]["points"] == len(grid)
    assert document["history"]["end"] == grid[-1].isoformat()
    forecast = document["forecast"]
    assert set(forecast) == {"model", "timestamps", "mean", "quantiles", "notes"}
    assert len(forecast["timestamps"]) == len(forecast["mean"]) == len(forecast["quantiles"]["0.9"]) == 12
    assert pd.Timestamp(forecast["timestamps"][0]) > pd.Timestamp(document["history"]["end"])
    assert all(upper >= mean for upper, mean in zip(forecast["quantiles"]["0.9"], forecast["mean"], strict=True))
    # The running pods' GPUs at `at` come from the fixture's trace: the forecast starts near there.
    running_at = prometheus.trace.running.loc[:at].iloc[-5:].sum(axis=1).mean()
    assert abs(forecast["mean"][0] - running_at) <= 0.25 * running_at + 2


def test_table_output(prometheus):
    result = run("--prometheus-url", prometheus.url, "--query", A100_QUERY, "--lookback", "2d", "--horizon", "30m")
    assert result.exit_code == 0, result.output
    assert "forecast by" in result.output and "p90" in result.output


def test_several_series_are_refused_with_advice(prometheus):
    result = run(
        "--prometheus-url",
        prometheus.url,
        "--query",
        'kube_pod_container_resource_requests{resource="nvidia_com_gpu"}',
        "--lookback",
        "1d",
    )
    assert_usage_error(result, "aggregate it to one")


def test_bad_promql_reports_prometheus_message(prometheus):
    result = run("--prometheus-url", prometheus.url, "--query", "sum(", "--lookback", "1d")
    assert_runtime_failure(result, "PrometheusQueryError")
    assert "parse error" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--at", "yesterday"], "Invalid value for '--at': 'yesterday' is neither RFC 3339"),
        (["--at", "2026-11-17T08:00:00"], "no time zone"),
        (["--header", "X-Token"], "Invalid value for '--header': 'X-Token' is not NAME=VALUE"),
        (["--step", "soon"], "Invalid value for '--step': invalid duration 'soon'"),
        (["--prometheus-url", "ftp://x"], "Prometheus url must be http(s)"),
    ],
)
def test_bad_arguments(args, message):
    base = {"--prometheus-url": "http://127.0.0.1:1", "--query": "up"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    result = run(*[item for pair in base.items() for item in pair])
    assert_usage_error(result, message)


def test_unreachable_prometheus_is_exit_1():
    result = run("--prometheus-url", "http://127.0.0.1:1", "--query", "up", "--lookback", "1h", "--timeout", "1s")
    assert_runtime_failure(result, "PrometheusUnavailable")
