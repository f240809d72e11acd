"""The report's frontier: each ``auto:Q`` against the best heuristic at no more GPU-hours."""

from __future__ import annotations

import json

import pytest

from autoscaler.simulation.report import frontier_check, render_table


def _figures(hours: float, short: float) -> dict[str, float]:
    return {"provisioned_gpu_hours": hours, "short_gpu_minutes": short}


POLICIES = {
    "reactive": _figures(90.0, 900.0),
    "static_buffer:8": _figures(100.0, 500.0),
    "reactive_max:60m": _figures(104.0, 450.0),
    "auto:0.9": _figures(105.0, 400.0),
    "auto:0.99": _figures(120.0, 100.0),
    "auto:0.5": _figures(95.0, 700.0),
}


def test_auto_against_the_heuristics_given():
    assert frontier_check(POLICIES) == {
        "auto:0.9": {
            "best_heuristic": "reactive_max:60m",
            "heuristic_short_gpu_minutes": 450.0,
            "heuristic_provisioned_gpu_hours": 104.0,
            "dominated": False,
            "short_reduction": round(50 / 450, 4),
        },
        "auto:0.99": {
            "best_heuristic": "reactive_max:60m",
            "heuristic_short_gpu_minutes": 450.0,
            "heuristic_provisioned_gpu_hours": 104.0,
            "dominated": False,
            "short_reduction": round(350 / 450, 4),
        },
        # reactive is not a heuristic an operator tunes: nothing to compare with.
        "auto:0.5": {
            "best_heuristic": None,
            "heuristic_short_gpu_minutes": None,
            "heuristic_provisioned_gpu_hours": None,
            "dominated": False,
            "short_reduction": None,
        },
    }


def test_a_swept_buffer_can_dominate_auto():
    sweep = {"static_buffer:8": _figures(100.0, 500.0), "static_buffer:12": _figures(118.0, 90.0)}
    frontier = frontier_check(POLICIES, sweep)
    assert frontier["auto:0.99"] == {
        "best_heuristic": "static_buffer:12",
        "heuristic_short_gpu_minutes": 90.0,
        "heuristic_provisioned_gpu_hours": 118.0,
        "dominated": True,
        "short_reduction": round(-10 / 90, 4),
    }
    assert frontier["auto:0.9"]["best_heuristic"] == "reactive_max:60m"  # 12 costs more than auto:0.9


def test_against_a_heuristic_never_short_the_share_is_undefined():
    frontier = frontier_check({"static_buffer:16": _figures(100.0, 0.0), "auto:0.9": _figures(101.0, 3.0)})
    assert frontier["auto:0.9"]["dominated"] is True
    assert frontier["auto:0.9"]["short_reduction"] is None
    json.dumps(frontier, allow_nan=False)  # valid JSON: no Infinity
    tie = frontier_check({"static_buffer:16": _figures(100.0, 0.0), "auto:0.9": _figures(101.0, 0.0)})
    assert tie["auto:0.9"]["dominated"] is False and tie["auto:0.9"]["short_reduction"] == 0.0


def test_table_says_what_each_auto_point_is_compared_with(capsys: pytest.CaptureFixture[str]):
    base = {"demand_gpu_hours": 80.0, "idle_gpu_hours": 1.0, "node_launches": 3}
    sweep = {"static_buffer:0": _figures(96.0, 950.0), "static_buffer:12": _figures(118.0, 90.0)}
    report = {
        "input": "demand.csv",
        "scored": {"start": "2024-03-02T00:00:00+00:00", "end": "2024-03-03T00:00:00+00:00"},
        "lead_time_seconds": 300.0,
        "lead_time_distribution": "fixed:5m",
        "policies": {text: {**base, **figures} for text, figures in POLICIES.items()},
        "forecasting": {},
        "static_sweep": sweep,
        "frontier": frontier_check(POLICIES, sweep),
    }
    render_table(report)
    out = capsys.readouterr().out
    assert "static buffers swept: static_buffer:0 to static_buffer:12" in out
    assert (
        "auto:0.99: 11.1% more short GPU-minutes than static_buffer:12 (90 at 118 GPU-hours), "
        "the best heuristic at no more GPU-hours: dominated"
    ) in out
    assert "auto:0.9: 11.1% fewer short GPU-minutes than reactive_max:60m (450 at 104 GPU-hours)" in out
    assert "auto:0.5: no heuristic run provisions as few GPU-hours" in out
