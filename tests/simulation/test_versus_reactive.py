"""The seeds' terms beside reactive: exact shapes, and the line the table prints."""

from __future__ import annotations

from autoscaler.simulation.versus_reactive import describe, versus_reactive


def test_each_policy_is_stated_beside_reactive_in_the_seeds_terms() -> None:
    policies = {
        "reactive": {
            "gpu_allocation": 0.9,
            "idle_gpu_hours": 100.0,
            "capacity_wait_p50_s": 120.0,
            "capacity_wait_p95_s": 301.0,
            "window_start_delay_p95_s": 300.0,
            "cost": 2000.0,
            "short_gpu_minutes": 50.0,
        },
        "auto-slo:1%": {
            "gpu_allocation": 0.8,
            "idle_gpu_hours": 150.0,
            "capacity_wait_p50_s": 0.0,
            "capacity_wait_p95_s": 0.0,
            "window_start_delay_p95_s": None,
            "cost": 2100.0,
            "short_gpu_minutes": 1.0,
        },
        "static_buffer:8": {"gpu_allocation": None, "idle_gpu_hours": 0.0},
    }
    versus = versus_reactive(policies)
    assert versus == {
        "auto-slo:1%": {
            "short_gpu_minutes": {"policy": 1.0, "reactive": 50.0, "change": -0.98},
            "gpu_allocation": {"policy": 0.8, "reactive": 0.9},
            "idle_gpu_hours": {"policy": 150.0, "reactive": 100.0, "change": 0.5},
            "capacity_wait_p50_s": {"policy": 0.0, "reactive": 120.0},
            "capacity_wait_p95_s": {"policy": 0.0, "reactive": 301.0},
            "window_start_delay_p95_s": {"policy": None, "reactive": 300.0},
            "cost": {"policy": 2100.0, "reactive": 2000.0, "change": 0.05},
        },
        "static_buffer:8": {
            "gpu_allocation": {"policy": None, "reactive": 0.9},
            "idle_gpu_hours": {"policy": 0.0, "reactive": 100.0, "change": -1.0},
        },
    }
    assert describe("auto-slo:1%", versus["auto-slo:1%"]) == (
        "auto-slo:1%: short GPU-minutes 1 (-98.0% against reactive's 50), "
        "GPU allocation 80.0% (reactive 90.0%), idle GPU-hours 150 (+50.0% against reactive's 100), "
        "capacity wait p50 0 s (reactive 120 s), capacity wait p95 0 s (reactive 301 s), "
        "window start delay p95 - (reactive 300 s), cost 2,100 (+5.0% against reactive's 2,000)"
    )
    assert versus_reactive({"auto:0.9": {"gpu_allocation": 0.5}}) == {}  # no reactive, nothing beside it
