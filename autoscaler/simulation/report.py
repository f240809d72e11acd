"""What a simulation reports: the JSON document, the rich table, and the two pictures."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from autoscaler.scorecard.figures import gpu_allocation, short_figures, wait_figures
from autoscaler.simulation.engine import Outcome, Period
from autoscaler.simulation.periods import period_figures
from autoscaler.simulation.policies import parse_policy
from autoscaler.simulation.pool_report import actuation_figures, cost_figures, pool_settings
from autoscaler.simulation.quota_report import QUEUE_WAITS, queue_wait_figures, quota_queue_figures, render_quota_queue
from autoscaler.simulation.runner import PolicyRun, SimulationResult
from autoscaler.simulation.versus_reactive import describe as versus_line
from autoscaler.simulation.versus_reactive import versus_reactive

if TYPE_CHECKING:  # matplotlib is imported only when a picture is asked for
    from matplotlib.figure import Figure

PER_POLICY_KEYS = (
    "demand_gpu_hours",
    "provisioned_gpu_hours",
    "idle_gpu_hours",
    "short_gpu_minutes",
    "node_launches",
)


def _round(value: float, digits: int = 3) -> float:
    return round(float(value), digits)


def _maybe_round(value: float | None) -> float | None:
    return None if value is None else _round(value)


def policy_figures(
    run: PolicyRun, *, pods: bool, windows: bool, gpu_hour_price: float | None, period: Period
) -> dict[str, Any]:
    """One policy's figures over the scored period (keys as the command documents them).

    Provisioned GPU-hours count nodes from launch (what is billed), not only while Ready; idle is
    provisioned minus what real pods used; short is requested GPUs above Ready capacity. The
    scorecard's figures come from the run's minute ledger (autoscaler/scorecard/figures.py: the live
    service's definitions).
    """
    totals = run.outcome.totals
    figures: dict[str, Any] = {
        "demand_gpu_hours": _round(totals.demand / 3600),
        "provisioned_gpu_hours": _round(totals.provisioned / 3600),
        "idle_gpu_hours": _round((totals.provisioned - totals.used) / 3600),
        "short_gpu_minutes": _round(totals.short / 60),
        "node_launches": totals.launches,
    }
    ledger = run.outcome.scored_ledger(period)
    shorts = short_figures(ledger)
    allocation = gpu_allocation(ledger)
    figures["minutes_short_fraction"] = _round(shorts.minutes_short_fraction, 5)
    figures["gpu_allocation"] = None if allocation is None else _round(allocation, 4)
    if windows:
        figures["window_start_delay_p95_s"] = _maybe_round(wait_figures(run.outcome.window_start_delays).p95_s)
    if run.spec.target is not None:  # window start delays as the runs' pods started (not the ledger's proxy)
        attained = run.spec.target.attained(shorts, window_delays := wait_figures(run.outcome.window_start_delays))
        figures["target"] = {"kind": run.spec.target.kind, "value": run.spec.target.value}
        figures["attained"] = None if attained is None else _round(attained, 5)
        figures["met"] = run.spec.target.met(shorts, window_delays)
        figures["choices"] = _choice_counts(run)
    # Waits are read as the live scorecard reads capacity waits (scorecard.wait_figures).
    if pods:
        waits = wait_figures(run.outcome.pod_waits)
        figures["capacity_wait_p50_s"], figures["capacity_wait_p95_s"] = map(_maybe_round, (waits.p50_s, waits.p95_s))
    if windows:
        waits = wait_figures(run.outcome.window_pod_waits)
        figures["window_capacity_wait_p50_s"] = _maybe_round(waits.p50_s)
        figures["window_capacity_wait_p95_s"] = _maybe_round(waits.p95_s)
    if run.outcome.queue_waits:
        figures[QUEUE_WAITS] = queue_wait_figures(run.outcome)
    return figures | cost_figures(run.outcome, totals.provisioned, gpu_hour_price)


def _choice_counts(run: PolicyRun) -> dict[str, int]:
    """How many periods each candidate was served, most served first."""
    counts: dict[str, int] = {}
    for choice in run.choices:
        counts[choice.candidate] = counts.get(choice.candidate, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def service_level_check(policies: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """For each ``auto-slo:T``: the walk-forward-tuned heuristics at the same target, and whether
    auto-slo provisions no more GPU-hours than every one of them that also met it."""
    out: dict[str, Any] = {}
    for text, figures in policies.items():
        if not text.startswith("auto-slo:") or "target" not in figures:
            continue
        rivals = {
            name: rival for name, rival in policies.items() if "@" in name and rival.get("target") == figures["target"]
        }
        met = {name: rival for name, rival in rivals.items() if rival["met"]}
        cheapest = min(met, key=lambda name: met[name]["provisioned_gpu_hours"]) if met else None
        out[text] = {
            "attained": figures["attained"],
            "met": figures["met"],
            "provisioned_gpu_hours": figures["provisioned_gpu_hours"],
            "idle_gpu_hours": figures["idle_gpu_hours"],
            "tuned_heuristics": {
                name: {key: rival[key] for key in ("attained", "met", "provisioned_gpu_hours", "idle_gpu_hours")}
                for name, rival in rivals.items()
            },
            "cheapest_tuned_heuristic_that_met": cheapest,
            "no_costlier_than_any_that_met": all(
                figures["provisioned_gpu_hours"] <= rival["provisioned_gpu_hours"] for rival in met.values()
            ),
            "idle_reduction_vs_cheapest": None
            if cheapest is None or met[cheapest]["idle_gpu_hours"] <= 0
            else _round(1 - figures["idle_gpu_hours"] / met[cheapest]["idle_gpu_hours"], 4),
        }
    return out


def build_report(
    result: SimulationResult, *, input_name: str, pods: bool, gpu_hour_price: float | None
) -> dict[str, Any]:
    workload, period, config = result.workload, result.period, result.config
    windows = bool(workload.windows)
    origin = workload.origin
    forecasting = {
        text: {
            "fits": len(run.fit_seconds),
            "fit_seconds": _round(sum(run.fit_seconds), 2),
            "models": dict(run.models.most_common()),
            "notes": run.notes[:5],
        }
        for text, run in result.runs.items()
        if run.spec.forecasting
    }
    report: dict[str, Any] = {
        "input": input_name,
        "step_seconds": _round(workload.step_s),
        "lead_time_seconds": _round(config.lead_time_s),
        "warmup_seconds": _round(config.warmup_s),
        "scored": {
            "start": (origin + pd.Timedelta(seconds=period.scored_from)).isoformat(),
            "end": (origin + pd.Timedelta(seconds=period.end)).isoformat(),
        },
        "gpus_per_node": config.gpus_per_node,
        "lead_time_distribution": config.lead_distribution.text,
        "consolidate_after_seconds": _round(config.consolidate_after_s),
        "declared_windows": len(workload.windows),
        "actuation": actuation_figures(config.actuation),
        **pool_settings(config),
        **({} if result.quota is None else {"quota_queue": quota_queue_figures(result.quota, period, workload.step_s)}),
        "policies": {
            text: policy_figures(run, pods=pods, windows=windows, gpu_hour_price=gpu_hour_price, period=period)
            for text, run in result.runs.items()
        },
        "forecasting": forecasting,
        "elapsed_seconds": _round(result.seconds, 2),
    }
    # A tuned policy's choices and what each period attained (the level-shift watch's reading).
    tuned = {text: period_figures(run, period, origin) for text, run in result.runs.items() if run.choices}
    if tuned:
        report["periods"] = tuned
    sweeps = {"static_sweep": result.static_sweep, "rolling_max_sweep": result.rolling_max_sweep}
    swept: dict[str, dict[str, Any]] = {}
    for key, sweep in sweeps.items():
        if sweep:
            report[key] = _sweep_figures(sweep)
            swept.update(report[key])
    report["versus_reactive"] = versus_reactive(report["policies"])
    service_levels = service_level_check(report["policies"])
    if service_levels:
        report["service_levels"] = service_levels
    frontier = frontier_check(report["policies"], swept)
    if frontier:  # each judgement names the actuation it holds for
        report["frontier"] = {text: {**check, "actuation": config.actuation.kind} for text, check in frontier.items()}
    return report


def _sweep_figures(sweep: dict[str, Outcome]) -> dict[str, dict[str, float]]:
    return {
        text: {
            "provisioned_gpu_hours": _round(outcome.totals.provisioned / 3600),
            "short_gpu_minutes": _round(outcome.totals.short / 60),
            **({} if outcome.cost is None else {"cost": _round(outcome.cost, 2)}),
        }
        for text, outcome in sweep.items()
    }


def render_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{report['input']}: {report['scored']['start']} to {report['scored']['end']}, "
        f"lead time {report['lead_time_seconds']:g} s ({report['lead_time_distribution']})"
        + (f", actuation {report['actuation']['kind']}" if "actuation" in report else "")
    )
    columns = [key for key in next(iter(report["policies"].values())) if key not in ("pools", QUEUE_WAITS)]
    table.add_column("policy", no_wrap=True)
    for column in columns:
        table.add_column(_HEADERS.get(column, column), justify="right")
    for text, figures in report["policies"].items():
        table.add_row(text, *(_cell(figures[column]) for column in columns))
    # Piped output is not a terminal; rich would then wrap at 80 columns.
    console = Console(width=None if sys.stdout.isatty() else 160)
    console.print(table)
    render_quota_queue(console, report)
    for text, details in report["forecasting"].items():
        models = ", ".join(f"{name} x{count}" for name, count in details["models"].items())
        console.print(f"{text}: {details['fits']} fits, {details['fit_seconds']:g} s; models: {models}")
    for key, heuristic in (("static_sweep", "static buffers"), ("rolling_max_sweep", "rolling maxima")):
        if key in report:
            swept = list(report[key])
            console.print(f"{heuristic} swept: {swept[0]} to {swept[-1]}")
    for text, check in report.get("frontier", {}).items():
        console.print(_frontier_line(text, check))
    for text, entry in report.get("versus_reactive", {}).items():
        console.print(versus_line(text, entry))


def _frontier_line(text: str, check: dict[str, Any]) -> str:
    through = f" ({check['actuation']})" if "actuation" in check else ""
    if check["best_heuristic"] is None:
        return f"{text}{through}: no heuristic run provisions as few GPU-hours"
    verdict = "dominated" if check["dominated"] else "not dominated"
    reduction = check["short_reduction"]
    change = "more" if reduction is None else f"{abs(reduction):.1%} {'fewer' if reduction >= 0 else 'more'}"
    return (
        f"{text}{through}: {change} short GPU-minutes than {check['best_heuristic']} "
        f"({check['heuristic_short_gpu_minutes']:,.0f} at {check['heuristic_provisioned_gpu_hours']:,.0f} GPU-hours), "
        f"the best heuristic at no more GPU-hours: {verdict}"
    )


_HEADERS = {
    "demand_gpu_hours": "demand GPU-h",
    "provisioned_gpu_hours": "provisioned GPU-h",
    "idle_gpu_hours": "idle GPU-h",
    "short_gpu_minutes": "short GPU-min",
    "node_launches": "launches",
    "capacity_wait_p50_s": "capacity wait p50 s",
    "capacity_wait_p95_s": "capacity wait p95 s",
    "window_capacity_wait_p50_s": "window capacity wait p50 s",
    "window_capacity_wait_p95_s": "window capacity wait p95 s",
}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def plot(result: SimulationResult, path: Path) -> Path:
    """Demand and Ready capacity per policy over the scored period; and ``<stem>-tradeoff.png``: short
    GPU-minutes against provisioned GPU-hours, one point per policy. Returns the second path."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write files
    _plot_capacity(result, path)
    tradeoff = path.with_name(f"{path.stem}-tradeoff.png")
    _plot_tradeoff(result, tradeoff)
    return tradeoff


def _plot_capacity(result: SimulationResult, path: Path) -> None:
    """One panel per policy: demand, and Ready capacity, over the scored period."""
    import matplotlib.pyplot as plt

    workload, period = result.workload, result.period
    first = int(period.scored_from // workload.step_s)
    times = workload.index()[first:]
    step_times = np.arange(first, workload.steps) * workload.step_s
    runs = list(result.runs.values())
    figure, axes = plt.subplots(len(runs), 1, figsize=(13, 2.2 * len(runs) + 0.6), sharex=True, squeeze=False)
    demand = workload.peak[first:]
    for axis, run in zip(axes[:, 0], runs, strict=True):
        positions = np.searchsorted(run.outcome.capacity_times, step_times, side="right") - 1
        capacity = run.outcome.capacity_values[np.maximum(positions, 0)]
        axis.fill_between(times, demand, color="lightgray", step="post", label="demand (GPUs requested)")
        axis.step(times, capacity, where="post", color="tab:blue", linewidth=0.8, label="Ready capacity")
        short = run.outcome.totals.short / 60
        title = f"{run.spec.text} ({result.config.actuation.kind}): {short:,.0f} GPU-minutes short"
        axis.set_title(title, fontsize=9, loc="left")
        axis.set_ylabel("GPUs")
    axes[0, 0].legend(loc="upper right", fontsize=8)
    figure.autofmt_xdate()
    _save(figure, path)


def _plot_tradeoff(result: SimulationResult, path: Path) -> None:
    """Short GPU-minutes against provisioned GPU-hours: a point per policy, each sweep a dashed curve."""
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(9, 6.5))
    families: dict[str, list[tuple[float, float, str]]] = {}
    for run in result.runs.values():
        point = (run.outcome.totals.provisioned / 3600, run.outcome.totals.short / 60, run.spec.text)
        families.setdefault(run.spec.name, []).append(point)
    sweeps = (("static_buffer", result.static_sweep, "gray"), ("reactive_max", result.rolling_max_sweep, "tab:olive"))
    for heuristic, sweep, color in sweeps:
        if sweep:
            swept = sorted((o.totals.provisioned / 3600, o.totals.short / 60) for o in sweep.values())
            axis.plot(
                [p[0] for p in swept],
                [p[1] for p in swept],
                ".--",
                color=color,
                markersize=3,
                linewidth=0.8,
                label=f"{heuristic}, swept",
            )
    for family, points in families.items():
        points.sort()
        # A swept heuristic is a curve: its points joined in order of GPU-hours.
        style = "o-" if family in ("static_buffer", "reactive_max") and len(points) > 1 else "o"
        axis.plot([p[0] for p in points], [p[1] for p in points], style, markersize=5, linewidth=0.8, label=family)
        for hours_point, short_point, text in points:
            axis.annotate(text, (hours_point, short_point), textcoords="offset points", xytext=(4, 4), fontsize=7)
    axis.set_xlabel("provisioned GPU-hours")
    axis.set_ylabel("short GPU-minutes")
    axis.set_title(
        f"Short GPU-minutes against provisioned GPU-hours, {result.config.actuation.kind} (lower left is better)"
    )
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    _save(figure, path)


def _save(figure: Figure, path: Path) -> None:
    """Write ``figure`` as a PNG and free it (pyplot keeps every open figure)."""
    import matplotlib.pyplot as plt

    figure.tight_layout()
    figure.savefig(path, format="png", dpi=90)
    plt.close(figure)


def frontier_check(
    policies: dict[str, dict[str, Any]], swept: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """For each ``auto`` point: the heuristic with the fewest short GPU-minutes among those with no
    more GPU-hours (of equals, the cheapest), whether it beats ``auto``, and by how much ``auto`` is
    shorter (a share of the heuristic's short GPU-minutes).

    The heuristics are every policy given that an operator could run without this service's forecast
    (reactive, static buffers, rolling maxima, the cron scaler, Holt-Winters) and every swept one.
    """
    heuristics = {text: figures for text, figures in policies.items() if parse_policy(text).heuristic}
    for text, figures in (swept or {}).items():
        heuristics.setdefault(text, figures)
    out: dict[str, Any] = {}
    for text, figures in policies.items():
        if not text.startswith("auto:"):
            continue
        hours = figures["provisioned_gpu_hours"]
        cheaper = {name: f for name, f in heuristics.items() if f["provisioned_gpu_hours"] <= hours}
        if not cheaper:
            out[text] = {
                "best_heuristic": None,
                "heuristic_short_gpu_minutes": None,
                "heuristic_provisioned_gpu_hours": None,
                "dominated": False,
                "short_reduction": None,
            }
            continue
        best_name = min(
            cheaper, key=lambda name: (cheaper[name]["short_gpu_minutes"], cheaper[name]["provisioned_gpu_hours"])
        )
        best = cheaper[best_name]["short_gpu_minutes"]
        short = figures["short_gpu_minutes"]
        # Against a heuristic that is never short, a share is undefined (None) unless auto is not either.
        reduction = (best - short) / best if best > 0 else (0.0 if short == 0 else None)
        out[text] = {
            "best_heuristic": best_name,
            "heuristic_short_gpu_minutes": best,
            "heuristic_provisioned_gpu_hours": cheaper[best_name]["provisioned_gpu_hours"],
            "dominated": short > best,
            "short_reduction": None if reduction is None else _round(reduction, 4),
        }
    return out
