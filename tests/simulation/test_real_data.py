"""The command on the shared public traces: the Alibaba v2023 pod list and Helios Earth demand."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from autoscaler.commands.simulate import simulate_command
from tests import data_helpers

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not data_helpers.data_available(), reason="shared traces not present"),
]

ALIBABA_PODS = data_helpers.DATA_DIR / "alibaba_gpu_v2023" / "openb_pod_list_default.csv.gz"


def _invoke(*args: str) -> dict:
    result = CliRunner().invoke(simulate_command, list(args))
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_alibaba_pod_list_is_read_directly(tmp_path):
    """The real pod list, cut to the pods deleted in the first three days of its observation window."""
    pods = pd.read_csv(ALIBABA_PODS)
    cutoff = pods.deletion_time.min() + 3 * 86400
    short_list = tmp_path / "openb_pod_list_default.csv.gz"
    pods[pods.deletion_time <= cutoff].to_csv(short_list, index=False)
    report = _invoke(
        "--pods", str(short_list), "--warmup", "1d", "--policies", "reactive,static_buffer:8,oracle",
        "--schedule", "0 2 * * *;16;2h",
    )  # fmt: skip
    figures = report["policies"]
    for policy in figures.values():
        assert {"pod_wait_p50_s", "pod_wait_p95_s", "window_pod_wait_p95_s"} <= set(policy)
        assert policy["demand_gpu_hours"] > 0
    assert figures["oracle"]["short_gpu_minutes"] == 0
    assert figures["oracle"]["pod_wait_p95_s"] == 0
    # A pod that finds no room waits for a node: at most the batch and the lead time, often less when
    # a node launched for earlier pods is already on its way.
    assert 120 <= figures["reactive"]["pod_wait_p95_s"] <= 301
    assert figures["reactive"]["window_pod_wait_p95_s"] == pytest.approx(301, abs=2)
    assert figures["reactive"]["short_gpu_minutes"] > figures["static_buffer:8"]["short_gpu_minutes"]


@pytest.fixture(scope="module")
def helios_report(tmp_path_factory) -> dict:
    """Six days of Helios Earth demand: five train the forecasters, the sixth is scored; static
    buffers swept."""
    series = data_helpers.helios_running_gpus().iloc[: 6 * 1440]
    directory = tmp_path_factory.mktemp("helios")
    path = data_helpers.write_csv(series, directory / "helios.csv.gz")
    report = _invoke(
        "--input", str(path), "--warmup", "5d", "--policies", "reactive,static_buffer:3,auto:0.9", "--sweep-static",
        "--plot", str(directory / "run.png"),
    )  # fmt: skip
    report["tradeoff_png"] = (directory / "run-tradeoff.png").read_bytes()
    return report


def test_auto_is_short_less_than_reactive_on_helios(helios_report):
    report = helios_report
    reactive, auto = report["policies"]["reactive"], report["policies"]["auto:0.9"]
    assert auto["short_gpu_minutes"] < 0.7 * reactive["short_gpu_minutes"]
    # One full selection per 6 h over a day and the settling hour; forecasts in between need no fit.
    assert report["forecasting"]["auto:0.9"]["fits"] == 5


def test_static_sweep_reaches_past_auto_and_decides_the_frontier(helios_report):
    report = helios_report
    auto_hours = report["policies"]["auto:0.9"]["provisioned_gpu_hours"]
    sweep = report["static_sweep"]
    # Every whole buffer from 0, each with its two figures, up to the first costlier than auto.
    assert list(sweep) == [f"static_buffer:{gpus}" for gpus in range(len(sweep))]
    assert all(set(figures) == {"provisioned_gpu_hours", "short_gpu_minutes"} for figures in sweep.values())
    hours = [figures["provisioned_gpu_hours"] for figures in sweep.values()]
    assert max(hours[:-1]) <= auto_hours < hours[-1]
    # A swept buffer is the same simulation as that policy given on the command line.
    given = report["policies"]["static_buffer:3"]
    assert sweep["static_buffer:3"] == {key: given[key] for key in ("provisioned_gpu_hours", "short_gpu_minutes")}
    # The frontier is decided by the best of every heuristic at no more GPU-hours, swept ones included.
    cheaper = {text: f for text, f in sweep.items() if f["provisioned_gpu_hours"] <= auto_hours}
    best = min(cheaper, key=lambda text: cheaper[text]["short_gpu_minutes"])
    check = report["frontier"]["auto:0.9"]
    assert check["best_heuristic"] == best
    assert check["heuristic_short_gpu_minutes"] == cheaper[best]["short_gpu_minutes"]
    assert report["tradeoff_png"][:8] == b"\x89PNG\r\n\x1a\n"  # the sweep drawn as a curve
    assert check["dominated"] == (
        report["policies"]["auto:0.9"]["short_gpu_minutes"] > cheaper[best]["short_gpu_minutes"]
    )
