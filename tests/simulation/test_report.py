"""The report's frontier: each ``auto:Q`` against the best heuristic at no more GPU-hours."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest

from autoscaler.simulation import report as report_module
from autoscaler.simulation.actuation import Actuation
from autoscaler.simulation.forecasting import ForecastCadence
from autoscaler.simulation.lead_times import parse_lead_time_distribution
from autoscaler.simulation.policies import parse_policy
from autoscaler.simulation.report import frontier_check, render_table
from autoscaler.simulation.runner import PolicyRun, SimulationConfig, SimulationResult
from tests.simulation.fakes import outcome


def _figures(hours: float, short: float) -> dict[str, float]:
    return {"provisioned_gpu_hours": hours, "short_gpu_minutes": short}


def _judged(best: str, short: float, hours: float, *, dominated: bool, reduction: float) -> dict[str, Any]:
    return {
        "best_heuristic": best,
        "heuristic_short_gpu_minutes": short,
        "heuristic_provisioned_gpu_hours": hours,
        "dominated": dominated,
        "short_reduction": reduction,
    }


UNJUDGED = {
    "best_heuristic": None,
    "heuristic_short_gpu_minutes": None,
    "heuristic_provisioned_gpu_hours": None,
    "dominated": False,
    "short_reduction": None,
}

POLICIES = {
    "reactive": _figures(90.0, 900.0),
    "scheduled": _figures(91.0, 880.0),
    "holt_winters": _figures(96.0, 650.0),
    "static_buffer:8": _figures(100.0, 500.0),
    "oracle": _figures(101.0, 0.0),  # knows the future: never the yardstick
    "reactive_max:60m": _figures(104.0, 450.0),
    "auto:0.6": _figures(85.0, 990.0),
    "auto:0.8": _figures(97.0, 700.0),
    "auto:0.9": _figures(105.0, 400.0),
    "auto:0.99": _figures(120.0, 100.0),
}
STATIC_SWEEP = {
    "static_buffer:0": _figures(90.0, 900.0),
    "static_buffer:8": _figures(100.0, 500.0),
    "static_buffer:12": _figures(118.0, 150.0),
    "static_buffer:13": _figures(121.0, 120.0),
}
ROLLING_MAX_SWEEP = {
    "reactive_max:5m": _figures(93.0, 800.0),
    "reactive_max:10m": _figures(98.0, 560.0),
    "reactive_max:60m": _figures(104.0, 450.0),
    "reactive_max:65m": _figures(105.0, 390.0),
    "reactive_max:70m": _figures(121.0, 60.0),
}


def test_auto_against_every_heuristic_given():
    assert frontier_check(POLICIES) == {
        "auto:0.6": UNJUDGED,  # cheaper than every heuristic: nothing to compare with
        # Holt-Winters is a heuristic: what an operator runs without this service.
        "auto:0.8": _judged("holt_winters", 650.0, 96.0, dominated=True, reduction=round(-50 / 650, 4)),
        # The oracle (0 short at 101 GPU-hours) is not.
        "auto:0.9": _judged("reactive_max:60m", 450.0, 104.0, dominated=False, reduction=round(50 / 450, 4)),
        "auto:0.99": _judged("reactive_max:60m", 450.0, 104.0, dominated=False, reduction=round(350 / 450, 4)),
    }


def test_both_sweeps_join_the_heuristics_and_a_rolling_max_can_dominate_auto():
    frontier = frontier_check(POLICIES, STATIC_SWEEP | ROLLING_MAX_SWEEP)
    assert frontier == {
        "auto:0.6": UNJUDGED,
        "auto:0.8": _judged("holt_winters", 650.0, 96.0, dominated=True, reduction=round(-50 / 650, 4)),
        # reactive_max:65m costs what auto:0.9 costs and is short less.
        "auto:0.9": _judged("reactive_max:65m", 390.0, 105.0, dominated=True, reduction=round(-10 / 390, 4)),
        # reactive_max:70m (60 short) and static_buffer:13 cost more than auto:0.99: they do not count.
        "auto:0.99": _judged("static_buffer:12", 150.0, 118.0, dominated=False, reduction=round(50 / 150, 4)),
    }
    json.dumps(frontier, allow_nan=False)


def test_of_heuristics_equally_short_the_cheapest_is_the_yardstick():
    policies = {"static_buffer:16": _figures(100.0, 50.0), "auto:0.9": _figures(101.0, 60.0)}
    frontier = frontier_check(policies, {"reactive_max:30m": _figures(99.0, 50.0)})
    assert frontier["auto:0.9"] == _judged("reactive_max:30m", 50.0, 99.0, dominated=True, reduction=-0.2)


def test_against_a_heuristic_never_short_the_share_is_undefined():
    frontier = frontier_check({"static_buffer:16": _figures(100.0, 0.0), "auto:0.9": _figures(101.0, 3.0)})
    assert frontier["auto:0.9"]["dominated"] is True
    assert frontier["auto:0.9"]["short_reduction"] is None
    json.dumps(frontier, allow_nan=False)  # valid JSON: no Infinity
    tie = frontier_check({"static_buffer:16": _figures(100.0, 0.0), "auto:0.9": _figures(101.0, 0.0)})
    assert tie["auto:0.9"]["dominated"] is False and tie["auto:0.9"]["short_reduction"] == 0.0


def test_table_prints_both_sweeps_and_one_frontier_line_per_auto(capsys: pytest.CaptureFixture[str]):
    base = {"demand_gpu_hours": 80.0, "idle_gpu_hours": 1.0, "node_launches": 3}
    report = {
        "input": "demand.csv",
        "scored": {"start": "2024-03-02T00:00:00+00:00", "end": "2024-03-03T00:00:00+00:00"},
        "lead_time_seconds": 300.0,
        "lead_time_distribution": "fixed:5m",
        "policies": {text: {**base, **figures} for text, figures in POLICIES.items()},
        "forecasting": {},
        "static_sweep": STATIC_SWEEP,
        "rolling_max_sweep": ROLLING_MAX_SWEEP,
        "frontier": frontier_check(POLICIES, STATIC_SWEEP | ROLLING_MAX_SWEEP),
    }
    render_table(report)
    lines = capsys.readouterr().out.splitlines()
    assert "static buffers swept: static_buffer:0 to static_buffer:13" in lines
    assert "rolling maxima swept: reactive_max:5m to reactive_max:70m" in lines
    assert [line for line in lines if line.startswith("auto:")] == [
        "auto:0.6: no heuristic run provisions as few GPU-hours",
        "auto:0.8: 7.7% more short GPU-minutes than holt_winters (650 at 96 GPU-hours), "
        "the best heuristic at no more GPU-hours: dominated",
        "auto:0.9: 2.6% more short GPU-minutes than reactive_max:65m (390 at 105 GPU-hours), "
        "the best heuristic at no more GPU-hours: dominated",
        "auto:0.99: 33.3% fewer short GPU-minutes than static_buffer:12 (150 at 118 GPU-hours), "
        "the best heuristic at no more GPU-hours: not dominated",
    ]


def test_tradeoff_picture_draws_each_sweep_as_its_own_dashed_curve(monkeypatch: pytest.MonkeyPatch):
    matplotlib.use("Agg")
    saved = []
    monkeypatch.setattr(report_module, "_save", lambda figure, path: saved.append(figure))

    def outcomes(figures: dict[str, dict[str, float]]) -> dict[str, Any]:
        return {text: outcome(f["provisioned_gpu_hours"], f["short_gpu_minutes"]) for text, f in figures.items()}

    runs = {
        text: PolicyRun(spec=parse_policy(text), outcome=result, metric=np.zeros(0))
        for text, result in outcomes(POLICIES).items()
    }
    config = SimulationConfig(
        gpus_per_node=8, lead_time_s=300.0, lead_margin_s=90.0, warmup_s=0.0,
        lead_distribution=parse_lead_time_distribution("fixed:5m"), consolidate_after_s=600.0,
        cadence=ForecastCadence(), actuation=Actuation("capacity-buffer"),
    )  # fmt: skip
    result = SimulationResult(
        workload=None, period=None, config=config, runs=runs, seconds=0.0,  # the picture reads neither
        static_sweep=outcomes(STATIC_SWEEP), rolling_max_sweep=outcomes(ROLLING_MAX_SWEEP),
    )  # fmt: skip
    report_module._plot_tradeoff(result, Path("unused.png"))
    assert "capacity-buffer" in saved[0].axes[0].get_title()  # the picture names the actuation
    curves = {line.get_label(): line for line in saved[0].axes[0].get_lines() if line.get_linestyle() == "--"}
    assert set(curves) == {"static_buffer, swept", "reactive_max, swept"}
    rolling = curves["reactive_max, swept"]
    assert list(rolling.get_xdata()) == pytest.approx([93.0, 98.0, 104.0, 105.0, 121.0])
    assert list(rolling.get_ydata()) == pytest.approx([800.0, 560.0, 450.0, 390.0, 60.0])
    assert curves["static_buffer, swept"].get_color() != rolling.get_color()
    plt.close(saved[0])
