"""Each policy in the seeds' terms, side by side with reactive (what happens without this service):
short GPU-minutes, GPU allocation, idle GPU-hours, capacity wait p50/p95, window start delay p95 and cost.

The seeds state their results this way ("GPU utilization 35 % to 78 %, queue wait 2 h to 15 min,
cost -29 %"); the simulator's report does the same for the trace it ran, from the policies'
figures (autoscaler/simulation/report.py computes them with the scorecard's definitions).
"""

from __future__ import annotations

from typing import Any

# The figures compared, under the names each policy's figures have (one name per figure everywhere).
SEEDS_FIGURES: tuple[str, ...] = (
    "short_gpu_minutes",
    "gpu_allocation",
    "idle_gpu_hours",
    "capacity_wait_p50_s",
    "capacity_wait_p95_s",
    "window_start_delay_p95_s",
    "cost",
)
# Figures whose change is stated as a share of reactive's (the others are stated as they are).
_RELATIVE = ("short_gpu_minutes", "idle_gpu_hours", "cost")


def versus_reactive(policies: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """For every policy but reactive, each seeds' figure both ran with, as ``{"policy", "reactive"}``
    (and ``change``, policy over reactive minus 1, for idle GPU-hours and cost). Empty without
    reactive."""
    reactive = policies.get("reactive")
    if reactive is None:
        return {}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for text, figures in policies.items():
        if text == "reactive":
            continue
        entry: dict[str, dict[str, Any]] = {}
        for key in SEEDS_FIGURES:
            if key not in figures or key not in reactive:
                continue
            pair: dict[str, Any] = {"policy": figures[key], "reactive": reactive[key]}
            if key in _RELATIVE and figures[key] is not None and reactive[key]:
                pair["change"] = round(figures[key] / reactive[key] - 1, 4)
            entry[key] = pair
        out[text] = entry
    return out


def describe(text: str, entry: dict[str, dict[str, Any]]) -> str:
    """One line: ``auto-slo:1%: GPU allocation 71.2 % (reactive 80.3 %), idle GPU-hours -12.0 %, ...``."""
    parts = []
    for key, pair in entry.items():
        policy, reactive = pair["policy"], pair["reactive"]
        if key == "gpu_allocation":
            parts.append(f"GPU allocation {_percent(policy)} (reactive {_percent(reactive)})")
        elif key in _RELATIVE:
            name = {"short_gpu_minutes": "short GPU-minutes", "idle_gpu_hours": "idle GPU-hours"}.get(key, key)
            change = pair.get("change")
            how = "" if change is None else f" ({change:+.1%} against reactive's {reactive:,.0f})"
            parts.append(f"{name} {policy:,.0f}{how}")
        else:
            name = key.removesuffix("_s").replace("_", " ")
            parts.append(f"{name} {_seconds(policy)} (reactive {_seconds(reactive)})")
    return f"{text}: " + ", ".join(parts)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} s"
