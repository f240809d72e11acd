"""The command on the shared public traces: the Alibaba v2023 pod list and Helios Earth demand."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from autoscaler.commands.simulate import simulate_command
from autoscaler.simulation.actuation import Actuation
from autoscaler.simulation.forecasting import ForecastCadence
from autoscaler.simulation.hpa import SYNC_PERIOD_S
from autoscaler.simulation.inputs import Pods, Workload, make_workload
from autoscaler.simulation.lead_times import parse_lead_time_distribution
from autoscaler.simulation.policies import parse_policies
from autoscaler.simulation.runner import SimulationConfig, simulate
from tests import data_helpers, traces

pytestmark = [
    pytest.mark.slow,
    pytest.mark.traces,
]


def _invoke(*args: str) -> dict:
    result = CliRunner().invoke(simulate_command, list(args))
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_alibaba_pod_list_is_read_directly(tmp_path):
    """The real pod list, cut to the pods deleted in the first three days of its observation window."""
    pods = pd.read_csv(traces.path("alibaba_gpu_v2023/openb_pod_list_default.csv.gz"))
    cutoff = pods.deletion_time.min() + 3 * 86400
    short_list = tmp_path / "openb_pod_list_default.csv.gz"
    pods[pods.deletion_time <= cutoff].to_csv(short_list, index=False)
    report = _invoke(
        "--pods", str(short_list), "--warmup", "1d", "--policies", "reactive,static_buffer:8,oracle",
        "--schedule", "0 2 * * *;16;2h",
    )  # fmt: skip
    figures = report["policies"]
    for policy in figures.values():
        assert {"capacity_wait_p50_s", "capacity_wait_p95_s", "window_capacity_wait_p95_s"} <= set(policy)
        assert policy["demand_gpu_hours"] > 0
    assert figures["oracle"]["short_gpu_minutes"] == 0
    assert figures["oracle"]["capacity_wait_p95_s"] == 0
    # A pod that finds no room waits for a node: at most the batch and the lead time, often less when
    # a node launched for earlier pods is already on its way.
    assert 120 <= figures["reactive"]["capacity_wait_p95_s"] <= 301
    assert figures["reactive"]["window_capacity_wait_p95_s"] == pytest.approx(301, abs=2)
    assert figures["reactive"]["short_gpu_minutes"] > figures["static_buffer:8"]["short_gpu_minutes"]


@pytest.fixture(scope="module")
def helios_report(tmp_path_factory) -> dict:
    """Six days of Helios Earth demand: five train the forecasters, the sixth is scored; static buffers
    and rolling maxima swept (past auto:0.95, which costs more than reactive_max:30m on that day)."""
    series = data_helpers.helios_running_gpus().iloc[: 6 * 1440]
    directory = tmp_path_factory.mktemp("helios")
    path = data_helpers.write_csv(series, directory / "helios.csv.gz")
    report = _invoke(
        "--input", str(path), "--warmup", "5d", "--policies", f"{GIVEN_HEURISTICS},auto:0.9,auto:0.95",
        "--sweep-static", "--sweep-rolling-max", "--plot", str(directory / "run.png"),
    )  # fmt: skip
    report["tradeoff_png"] = (directory / "run-tradeoff.png").read_bytes()
    return report


GIVEN_HEURISTICS = "reactive,static_buffer:3,reactive_max:30m"
SWEPT_KEYS = ("provisioned_gpu_hours", "short_gpu_minutes")


def _costliest_auto(report: dict) -> float:
    return max(f["provisioned_gpu_hours"] for text, f in report["policies"].items() if text.startswith("auto:"))


def _assert_swept_just_past(sweep: dict, provisioned_limit: float) -> None:
    """Each setting with its two figures; every one but the last costs no more than the limit."""
    assert all(set(figures) == set(SWEPT_KEYS) for figures in sweep.values())
    hours = [figures["provisioned_gpu_hours"] for figures in sweep.values()]
    assert max(hours[:-1]) <= provisioned_limit < hours[-1]


def test_auto_is_short_less_than_reactive_on_helios(helios_report):
    report = helios_report
    reactive, auto = report["policies"]["reactive"], report["policies"]["auto:0.9"]
    assert auto["short_gpu_minutes"] < 0.7 * reactive["short_gpu_minutes"]
    # One full selection per 6 h over a day and the settling hour; forecasts in between need no fit.
    assert report["forecasting"]["auto:0.9"]["fits"] == 5


def test_static_sweep_reaches_just_past_the_costliest_auto(helios_report):
    sweep = helios_report["static_sweep"]
    assert list(sweep) == [f"static_buffer:{gpus}" for gpus in range(len(sweep))]  # every whole buffer from 0
    _assert_swept_just_past(sweep, _costliest_auto(helios_report))
    # A swept buffer is the same simulation as that policy given on the command line.
    given = helios_report["policies"]["static_buffer:3"]
    assert sweep["static_buffer:3"] == {key: given[key] for key in SWEPT_KEYS}


def test_rolling_max_sweep_reaches_just_past_the_costliest_auto(helios_report):
    sweep = helios_report["rolling_max_sweep"]
    assert list(sweep) == [f"reactive_max:{minutes}m" for minutes in range(5, 5 * len(sweep) + 1, 5)]
    _assert_swept_just_past(sweep, _costliest_auto(helios_report))
    given = helios_report["policies"]["reactive_max:30m"]
    assert sweep["reactive_max:30m"] == {key: given[key] for key in SWEPT_KEYS}


def test_frontier_judges_each_auto_against_every_heuristic_run(helios_report):
    report = helios_report
    given = {text: report["policies"][text] for text in GIVEN_HEURISTICS.split(",")}
    heuristics = given | report["static_sweep"] | report["rolling_max_sweep"]
    assert set(report["frontier"]) == {"auto:0.9", "auto:0.95"}
    for text, check in report["frontier"].items():
        auto = report["policies"][text]
        cheaper = {
            name: f for name, f in heuristics.items() if f["provisioned_gpu_hours"] <= auto["provisioned_gpu_hours"]
        }
        best = min(
            cheaper, key=lambda name: (cheaper[name]["short_gpu_minutes"], cheaper[name]["provisioned_gpu_hours"])
        )
        assert check["best_heuristic"] == best
        assert check["heuristic_short_gpu_minutes"] == cheaper[best]["short_gpu_minutes"]
        assert check["heuristic_provisioned_gpu_hours"] == cheaper[best]["provisioned_gpu_hours"]
        assert check["dominated"] == (auto["short_gpu_minutes"] > cheaper[best]["short_gpu_minutes"])
        assert check["actuation"] == "placeholder-hpa"  # the default, named in every judgement
    assert report["tradeoff_png"][:8] == b"\x89PNG\r\n\x1a\n"  # both sweeps drawn as curves


def _helios_workload(days: int) -> Workload:
    series = data_helpers.helios_running_gpus().iloc[: days * 1440]
    origin = pd.Timestamp(series.index[0])
    return make_workload("helios", origin, 60.0, series.to_numpy(dtype=np.float64), Pods.empty(), ())


def test_capacity_buffer_tracks_headroom_step_by_step_on_a_helios_slice():
    """Two days of Helios under a rolling max: the buffer's replicas are the served headroom, rounded
    up, at every step of the run; the HPA's placeholders are not (tolerance, stabilisation)."""
    workload = _helios_workload(2)
    config = SimulationConfig(
        gpus_per_node=8, lead_time_s=300.0, lead_margin_s=90.0, warmup_s=86400.0,
        lead_distribution=parse_lead_time_distribution("fixed:5m"), consolidate_after_s=600.0,
        cadence=ForecastCadence(),
    )  # fmt: skip
    specs = parse_policies("reactive,reactive_max:60m")
    buffer = simulate(workload, specs, replace(config, actuation=Actuation("capacity-buffer")))
    placeholders = simulate(workload, specs, config)
    first_step = int(buffer.period.start // workload.step_s)
    run = buffer.runs["reactive_max:60m"]
    served = run.metric[first_step:]
    assert run.outcome.placeholders.tolist() == np.ceil(served).astype(int).tolist()
    assert len(np.unique(run.outcome.placeholders)) > 10  # the headroom really moves on this slice
    # The HPA's placeholders at each sync differ from the headroom it read at some syncs.
    hpa = placeholders.runs["reactive_max:60m"].outcome.placeholders
    syncs = buffer.period.start + SYNC_PERIOD_S * np.arange(len(hpa))
    read = np.ceil(served[(syncs // workload.step_s).astype(int) - first_step]).astype(int)
    assert np.any(hpa != read)
    # With no headroom the actuation makes no difference.
    assert buffer.runs["reactive"].outcome.totals == placeholders.runs["reactive"].outcome.totals
