"""The ``simulate`` command: JSON shape, table, pictures, and bad input (a usage error, exit code 2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner, Result

from autoscaler.commands.simulate import simulate_command
from tests.cli_helpers import assert_usage_error

BASE_KEYS = {
    "demand_gpu_hours",
    "provisioned_gpu_hours",
    "idle_gpu_hours",
    "short_gpu_minutes",
    "node_launches",
    "minutes_short_fraction",
    "gpu_allocation",
}
HEURISTICS = "reactive,static_buffer:8,reactive_max:30m,scheduled,oracle"


@pytest.fixture(scope="module")
def demand_csv(tmp_path_factory) -> Path:
    """Two days of per-minute demand: a noisy level with a daytime bump."""
    rng = np.random.default_rng(1)
    index = pd.date_range("2024-03-01", periods=2 * 1440, freq="1min", tz="UTC")
    hours = index.hour.to_numpy()
    values = 60 + 30 * ((hours >= 9) & (hours < 18)) + np.cumsum(rng.choice([0, 0, 0, 1, -1], len(index)))
    path = tmp_path_factory.mktemp("simulate") / "demand.csv"
    pd.DataFrame({"timestamp": index.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": np.clip(values, 0, None)}).to_csv(
        path, index=False
    )
    return path


@pytest.fixture(scope="module")
def pods_csv(tmp_path_factory) -> Path:
    rng = np.random.default_rng(2)
    arrival = np.sort(rng.uniform(0, 2 * 86400, 400))
    frame = pd.DataFrame(
        {"arrival": arrival, "duration": rng.exponential(3600, 400).round(), "gpus": rng.choice([1, 2, 8], 400)}
    )
    path = tmp_path_factory.mktemp("simulate") / "pods.csv"
    frame.to_csv(path, index=False)
    return path


def _invoke(*args: str) -> tuple[int, str, str]:
    result = _run(*args)
    return result.exit_code, result.stdout, result.stderr


def _run(*args: str) -> Result:
    return CliRunner().invoke(simulate_command, list(args))


def test_json_has_exactly_the_documented_keys(demand_csv):
    code, out, _ = _invoke("--input", str(demand_csv), "--warmup", "1d", "--policies", HEURISTICS)
    assert code == 0
    report = json.loads(out)
    assert {"input", "step_seconds", "lead_time_seconds", "warmup_seconds", "policies"} <= set(report)
    assert (report["step_seconds"], report["lead_time_seconds"], report["warmup_seconds"]) == (60, 300, 86400)
    assert list(report["policies"]) == HEURISTICS.split(",")  # keyed by the policy string, in order
    for figures in report["policies"].values():
        assert set(figures) == BASE_KEYS
    figures = report["policies"]
    assert figures["oracle"]["short_gpu_minutes"] == 0
    assert figures["reactive"]["short_gpu_minutes"] > figures["static_buffer:8"]["short_gpu_minutes"]
    for f in figures.values():  # fluid demand uses every Ready GPU it wants: used = demand - short
        used = f["demand_gpu_hours"] - f["short_gpu_minutes"] / 60
        assert f["idle_gpu_hours"] == pytest.approx(f["provisioned_gpu_hours"] - used, abs=0.01)


def test_json_names_the_actuation(demand_csv):
    args = ("--input", str(demand_csv), "--warmup", "1d", "--policies", "reactive,static_buffer:8")
    default, explicit = _invoke(*args), _invoke(*args, "--actuation", "placeholder-hpa")
    assert default[0] == explicit[0] == 0
    placeholders, explicit_report = json.loads(default[1]), json.loads(explicit[1])
    assert placeholders["actuation"] == {
        "kind": "placeholder-hpa",
        "placeholder_gpus": 1,
        "hpa_tolerance": {"scale_up": 0.1, "scale_down": 0.1},
        "scale_down_stabilization_seconds": 300,
    }
    assert placeholders["policies"] == explicit_report["policies"]  # the default is the placeholder HPA
    code, out, _ = _invoke(*args, "--actuation", "capacity-buffer", "--buffer-chunk-gpus", "2")
    assert code == 0
    buffer = json.loads(out)
    assert buffer["actuation"] == {
        "kind": "capacity-buffer",
        "buffer_chunk_gpus": 2,
        "buffer_limit_gpus": None,
        "resync_seconds": 30.0,
        "resync_offset_seconds": 15.0,
    }
    assert set(buffer["policies"]["static_buffer:8"]) == BASE_KEYS


def test_hpa_tolerance_is_named_in_the_json_and_changes_the_run(demand_csv):
    args = ("--input", str(demand_csv), "--warmup", "1d", "--policies", "reactive,static_buffer:8,oracle")
    runs = {text: _invoke(*args, "--hpa-tolerance", text) for text in ("0.1", "0", "up=0,down=0.05", "down=0.05")}
    assert all(code == 0 for code, _, _ in runs.values())
    reports = {text: json.loads(out) for text, (_, out, _) in runs.items()}
    assert [reports[text]["actuation"]["hpa_tolerance"] for text in runs] == [
        {"scale_up": 0.1, "scale_down": 0.1},
        {"scale_up": 0.0, "scale_down": 0.0},
        {"scale_up": 0.0, "scale_down": 0.05},
        {"scale_up": 0.1, "scale_down": 0.05},  # an unset direction stays at the controller's 0.1
    ]
    assert reports["0.1"]["policies"] == json.loads(_invoke(*args)[1])["policies"]  # 0.1 is the default
    # The oracle's headroom is scaled past the scale-up tolerance only; it stays never short.
    for report in reports.values():
        assert report["policies"]["oracle"]["short_gpu_minutes"] == 0
    assert (
        reports["0"]["policies"]["oracle"]["provisioned_gpu_hours"]
        < reports["0.1"]["policies"]["oracle"]["provisioned_gpu_hours"]
    )


def test_buffer_limits_are_named_and_cap_the_buffer(demand_csv):
    args = ("--input", str(demand_csv), "--warmup", "1d", "--policies", "static_buffer:16")
    unlimited = json.loads(_invoke(*args, "--actuation", "capacity-buffer")[1])
    code, out, _ = _invoke(*args, "--actuation", "capacity-buffer", "--buffer-limit-gpus", "8")
    assert code == 0
    limited = json.loads(out)
    assert limited["actuation"]["buffer_limit_gpus"] == 8
    before, after = unlimited["policies"]["static_buffer:16"], limited["policies"]["static_buffer:16"]
    assert after["provisioned_gpu_hours"] < before["provisioned_gpu_hours"]
    assert after["short_gpu_minutes"] >= before["short_gpu_minutes"]


def test_sweep_static_runs_through_the_capacity_buffer(demand_csv):
    code, out, _ = _invoke(
        "--input", str(demand_csv), "--warmup", "1d", "--policies", "reactive,auto:0.9",
        "--actuation", "capacity-buffer", "--sweep-static", "--format", "table",
    )  # fmt: skip
    assert code == 0
    assert "actuation capacity-buffer" in " ".join(out.split())  # the title, however rich wraps it
    assert "static buffers swept: static_buffer:0 to static_buffer:" in out
    assert "auto:0.9 (capacity-buffer): " in out


def test_price_and_schedule_add_their_keys(demand_csv):
    code, out, _ = _invoke(
        "--input", str(demand_csv), "--warmup", "1d", "--policies", "reactive,scheduled",
        "--schedule", "0 2 * * *;16;2h", "--gpu-hour-price", "2.5",
    )  # fmt: skip
    assert code == 0
    report = json.loads(out)
    keys = BASE_KEYS | {"cost", "window_capacity_wait_p50_s", "window_capacity_wait_p95_s", "window_start_delay_p95_s"}
    for figures in report["policies"].values():
        assert set(figures) == keys
        assert figures["cost"] == pytest.approx(figures["provisioned_gpu_hours"] * 2.5, abs=0.01)
    assert report["policies"]["reactive"]["window_capacity_wait_p95_s"] == pytest.approx(301, abs=1)
    # The window's run started when its last pod ran: the lead time after its scheduled start.
    assert report["policies"]["reactive"]["window_start_delay_p95_s"] == pytest.approx(301, abs=1)


def test_pod_trace_adds_pod_waits(pods_csv):
    code, out, _ = _invoke("--pods", str(pods_csv), "--warmup", "12h", "--policies", "reactive,oracle")
    assert code == 0
    report = json.loads(out)
    for figures in report["policies"].values():
        assert set(figures) == BASE_KEYS | {"capacity_wait_p50_s", "capacity_wait_p95_s"}
    assert report["policies"]["oracle"]["short_gpu_minutes"] == 0
    assert report["policies"]["reactive"]["capacity_wait_p95_s"] >= report["policies"]["oracle"]["capacity_wait_p95_s"]


def test_table_and_pictures(demand_csv, tmp_path):
    picture = tmp_path / "run.png"
    code, out, _ = _invoke(
        "--input", str(demand_csv), "--warmup", "1d", "--policies", "reactive,static_buffer:8",
        "--format", "table", "--plot", str(picture),
    )  # fmt: skip
    assert code == 0
    assert "static_buffer:8" in out and "short GPU-min" in out
    for path in (picture, tmp_path / "run-tradeoff.png"):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input", "/nonexistent.csv"], "file not found"),
        ([], "exactly one of them"),
        (["--policies", "reactive,magic"], "unknown policy 'magic'"),
        (["--policies", "auto:1.5"], "Q must be a quantile"),
        (["--policies", "static_buffer"], "needs a parameter"),
        (["--policies", "reactive,reactive"], "given twice"),
        (["--schedule", "0 2 * *;16;2h"], "--schedule"),
        (["--schedule", "0 2 * * *;lots;2h"], "GPUS"),
        (["--lead-time-distribution", "gamma:5m"], "lead-time distribution"),
        (["--warmup", "30d"], "covers the whole input"),
        (["--step", "fast"], "--step"),
        (["--forecast-step", "90s"], "--forecast-step"),
        (["--gpus-per-node", "0"], "--gpus-per-node"),
        (["--plot", "/nonexistent/run.png"], "does not exist"),
        (["--gpu-hour-price", "-1"], "--gpu-hour-price"),
        (["--refit-every", "12h"], "--refit-every"),
        (["--policies", "reactive,static_buffer:8", "--sweep-static"], "give at least one auto:Q"),
        (["--policies", "reactive,reactive_max:30m", "--sweep-rolling-max"], "give at least one auto:Q"),
        (["--actuation", "hpa"], "'--actuation'"),
        (["--buffer-chunk-gpus", "4"], "--buffer-chunk-gpus sizes CapacityBuffer replicas: it needs --actuation"),
        (["--actuation", "placeholder-hpa", "--buffer-chunk-gpus", "1"], "it needs --actuation capacity-buffer"),
        (["--actuation", "capacity-buffer", "--scale-down-stabilization", "300s"], "has no HPA"),
        (["--actuation", "capacity-buffer", "--hpa-tolerance", "0.1"], "--hpa-tolerance is the placeholder HPA's"),
        (["--buffer-limit-gpus", "16"], "--buffer-limit-gpus is a CapacityBuffer's spec.limits: it needs"),
        (["--actuation", "capacity-buffer", "--buffer-limit-gpus", "-1"], "'--buffer-limit-gpus'"),
        (["--hpa-tolerance", "-0.1"], "the scale-up tolerance must be a number >= 0, got -0.1"),
        (["--hpa-tolerance", "up=0,sideways=1"], "'sideways=1' is not up=T or down=T"),
        (["--hpa-tolerance", "up=0,up=1"], "'up=1' is not up=T or down=T (each at most once)"),
        (["--hpa-tolerance", "none"], "--hpa-tolerance 'none'"),
        (["--actuation", "capacity-buffer", "--buffer-chunk-gpus", "9"], "from 1 to --gpus-per-node (8), got 9"),
        (["--actuation", "capacity-buffer", "--buffer-chunk-gpus", "0"], "from 1 to --gpus-per-node (8), got 0"),
    ],
)
def test_bad_input_is_a_usage_error(demand_csv, args, message):
    if "--input" not in args and args != []:
        args = ["--input", str(demand_csv), "--warmup", "1d", *args]
    assert_usage_error(_run(*args), message)


def test_bad_files_are_usage_errors(tmp_path, demand_csv, pods_csv):
    negative = tmp_path / "negative.csv"
    negative.write_text("timestamp,value\n2024-03-01T00:00:00Z,5\n2024-03-01T00:01:00Z,-3\n")
    malformed = tmp_path / "malformed.csv"
    malformed.write_text("timestamp,value\nyesterday,5\n")
    no_columns = tmp_path / "pods.csv"
    no_columns.write_text("name,size\na,1\n")
    too_big = tmp_path / "big.csv"
    too_big.write_text("arrival,duration,gpus\n0,60,16\n100,60,1\n")
    cases = [
        (["--input", str(negative)], "must not be negative"),
        (["--input", str(malformed)], "line 2"),
        (["--pods", str(no_columns)], "missing columns"),
        (["--pods", str(too_big)], "more than a node has"),
        (["--input", str(demand_csv), "--pods", str(pods_csv)], "exactly one of them"),
    ]
    for args, message in cases:
        assert_usage_error(_run(*args, "--warmup", "0s", "--policies", "reactive"), message)


def test_pools_failures_and_spot_interruptions_on_the_command_line(tmp_path, demand_csv, pods_csv):
    pools = tmp_path / "pools.yaml"
    pools.write_text(
        "pools:\n"
        "  - {name: spot, weight: 50, gpus_per_node: 8, lead_time: fixed:5m, capacity_type: spot,"
        " price_per_gpu_hour: 1.5, limit_gpus: 64}\n"
        "  - {name: od, weight: 10, gpus_per_node: 8, lead_time: fixed:5m, price_per_gpu_hour: 4}\n"
    )
    common = ("--warmup", "1d", "--policies", "reactive,static_buffer:8", "--seed", "1")
    scarce = ("--launch-failure-rate", "0.1", "--spot-interruptions", "0.5")
    code, out, _ = _invoke("--pods", str(pods_csv), "--pools", str(pools), *scarce, *common)
    assert code == 0
    report = json.loads(out)
    assert [pool["name"] for pool in report["pools"]] == ["spot", "od"]
    for figures in report["policies"].values():
        assert figures["cost"] == pytest.approx(sum(pool["cost"] for pool in figures["pools"].values()), abs=0.01)
        assert figures["pools"]["spot"]["spot_interruptions"] > 0
        assert figures["pools"]["od"]["spot_interruptions"] == 0
    assert set(report["versus_reactive"]["static_buffer:8"]) >= {"gpu_allocation", "capacity_wait_p95_s", "cost"}
    # Without --pools the one pool is a spot pool, priced by --gpu-hour-price.
    code, out, _ = _invoke("--input", str(demand_csv), "--spot-interruptions", "0.5", "--gpu-hour-price", "2", *common)
    assert code == 0
    report = json.loads(out)
    assert report["pools"][0]["capacity_type"] == "spot"
    assert report["policies"]["reactive"]["cost"] == pytest.approx(
        report["policies"]["reactive"]["provisioned_gpu_hours"] * 2, abs=0.01
    )
    assert_usage_error(
        _run("--input", str(demand_csv), "--pools", str(pools), "--gpu-hour-price", "2", *common),
        "with --pools each pool has its own price_per_gpu_hour",
    )
    pools.write_text("pools:\n  - {name: a, gpus_per_node: 0, lead_time: fixed:5m}\n")
    assert_usage_error(_run("--input", str(demand_csv), "--pools", str(pools), *common), "pools.0.gpus_per_node")
    assert_usage_error(_run("--input", str(demand_csv), "--launch-failure-rate", "1", *common), "--launch-failure-rate")


def test_the_default_lead_time_margin_is_the_services() -> None:
    """simulate's help shows it without loading the settings: the two must stay equal."""
    from autoscaler.commands.simulate import LEAD_TIME_MARGIN
    from autoscaler.config.settings import ForecastSettings

    assert f"{ForecastSettings().lead_time_margin.total_seconds():g}s" == LEAD_TIME_MARGIN
