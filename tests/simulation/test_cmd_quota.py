"""``simulate --quota-gpus``: the quota queue's options, its JSON and table, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from autoscaler.commands.simulate import simulate_command
from tests.cli_helpers import assert_usage_error

# tests/simulation/test_quota.py's hand-made Jobs (arrival, duration, GPUs): the waits it computes
# by hand, here through the command (whose grid starts at the first arrival, 60 s, and ends at 7,260 s).
POD_LIST = "arrival,duration,gpus\n60,1000,4\n120,600,3\n180,600,2\n240,600,1\n6000,60,1\n7150,60,1\n"
RUN = ("--warmup", "0s", "--gpus-per-node", "4", "--lead-time", "5m", "--policies", "reactive,static_buffer:4")


@pytest.fixture
def pod_list(tmp_path) -> Path:
    path = tmp_path / "jobs.csv"
    path.write_text(POD_LIST)
    return path


def _run(*args: str) -> Result:
    return CliRunner().invoke(simulate_command, list(args))


def test_json_names_the_queue_and_each_policys_waits(pod_list):
    result = _run("--pods", str(pod_list), *RUN, "--quota-gpus", "4", "--admission-check-delay", "2m")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    queue = report["quota_queue"]
    assert {key: queue[key] for key in ("quota_gpus", "queueing_strategy", "admission_check_seconds")} == {
        "quota_gpus": 4,
        "queueing_strategy": "BestEffortFIFO",
        "admission_check_seconds": 120.0,
    }
    assert queue["see_workloads"] is True
    assert set(queue["demand_seen"]) == {
        "without_workloads",
        "with_workloads",
        "workloads_counted",
        "waiting_for_quota",
    }
    seen = queue["demand_seen"]
    # Each Workload is counted for its 2 minutes of checks, at two minute starts: 4 GPUs, then 4 (3 + 1),
    # 2 and 1; the last one's checks begin 50 s before the end, at one minute start.
    assert seen["workloads_counted"] == {"gpu_hours": round(((4 + 4 + 2 + 1) * 2 + 1) / 60, 3), "max_gpus": 4.0}
    assert seen["with_workloads"]["gpu_hours"] == pytest.approx(
        seen["without_workloads"]["gpu_hours"] + seen["workloads_counted"]["gpu_hours"]
    )
    reactive = report["policies"]["reactive"]["queue_wait_seconds"]
    assert reactive == {
        "quota": {"count": 6, "p50": 620.5, "p95": 1856.0, "max": 2021.0},
        "admission_check": {"count": 6, "p50": 120.0, "p95": 120.0, "max": 120.0},
        "capacity": {"count": 5, "p50": 0.0, "p95": 301.0, "max": 301.0},
    }
    # A spare node held by placeholders: only the first pod waits, for that node, launched at the start
    # (Ready at 301 s; the pod was created at 120 s).
    buffered = report["policies"]["static_buffer:4"]["queue_wait_seconds"]
    assert buffered["capacity"] == {"count": 5, "p50": 0.0, "p95": 144.8, "max": 181.0}


def test_no_check_records_no_admission_wait_and_the_flag_is_named(pod_list):
    result = _run("--pods", str(pod_list), *RUN, "--quota-gpus", "4", "--no-see-workloads")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["quota_queue"]["see_workloads"] is False
    assert report["quota_queue"]["demand_seen"]["workloads_counted"] == {"gpu_hours": 0.0, "max_gpus": 0.0}
    waits = report["policies"]["reactive"]["queue_wait_seconds"]
    assert waits["admission_check"] == {"count": 0, "p50": None, "p95": None, "max": None}
    assert waits["quota"]["max"] == 1781.0


def test_table_has_the_queue_and_its_waits(pod_list):
    result = _run("--pods", str(pod_list), *RUN, "--quota-gpus", "4", "--format", "table")
    assert result.exit_code == 0, result.stderr
    assert "quota queue: 4 GPUs of nominal quota (BestEffortFIFO)" in result.stdout
    assert "Workload waits (seconds)" in result.stdout and "quota p95" in result.stdout


def test_without_a_queue_there_is_no_queue_in_the_json(pod_list):
    result = _run("--pods", str(pod_list), *RUN)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert "quota_queue" not in report
    assert all("queue_wait_seconds" not in figures for figures in report["policies"].values())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--quota-gpus", "0"], "'--quota-gpus'"),
        (["--quota-gpus", "4.5"], "'--quota-gpus'"),
        (["--quota-gpus", "3"], "--quota-gpus 3 is less than a pod's 4 GPUs: its Workload could never be admitted"),
        (["--admission-check-delay", "2m"], "--admission-check-delay is the quota queue's: it needs --quota-gpus"),
        (["--no-see-workloads"], "--see-workloads is the quota queue's: it needs --quota-gpus"),
        (["--quota-gpus", "8", "--admission-check-delay", "soon"], "--admission-check-delay"),
        (["--quota-gpus", "8", "--schedule", "0 2 * * *;8;1h"], "declared windows (--schedule) are not queued"),
    ],
)
def test_bad_queues_are_usage_errors(pod_list, args, message):
    assert_usage_error(_run("--pods", str(pod_list), *RUN, *args), message)


def test_fluid_demand_cannot_be_queued(tmp_path):
    demand = tmp_path / "demand.csv"
    demand.write_text("timestamp,value\n2024-03-01T00:00:00Z,5\n2024-03-01T00:01:00Z,6\n2024-03-01T00:02:00Z,6\n")
    assert_usage_error(
        _run("--input", str(demand), "--warmup", "0s", "--policies", "reactive", "--quota-gpus", "8"),
        "--quota-gpus queues pods: give --pods (a pod trace) or --unit-pods, not fluid --input demand",
    )
