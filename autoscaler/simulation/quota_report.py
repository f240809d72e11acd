"""What a simulation behind a quota queue (``--quota-gpus``; :mod:`.quota`) adds to its report: each
policy's Workload waits, named as the live scorecard names them (``queue_wait_seconds``, one entry per
kind of autoscaler/scorecard/queue_waits.py), and the demand the service sees with and without
counting the queue's Workloads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from autoscaler.scorecard.columns import waits_json
from autoscaler.scorecard.figures import wait_figures
from autoscaler.scorecard.queue_waits import KINDS
from autoscaler.simulation.engine import Outcome, Period
from autoscaler.simulation.quota import QuotaPlan

if TYPE_CHECKING:  # rich is imported only when a table is printed
    from rich.console import Console

QUEUE_WAITS = "queue_wait_seconds"
QUEUEING_STRATEGY = "BestEffortFIFO"


def queue_wait_figures(outcome: Outcome) -> dict[str, dict[str, Any]]:
    """p50, p95 and max (seconds) and how many, of each kind of wait."""
    figures: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        entry = waits_json(wait_figures(outcome.queue_waits.get(kind, np.zeros(0))))
        figures[kind] = {
            key: value if value is None or key == "count" else round(value, 3) for key, value in entry.items()
        }
    return figures


def _level(gpus: np.ndarray, step_s: float) -> dict[str, float]:
    return {"gpu_hours": round(float(gpus.sum()) * step_s / 3600, 3), "max_gpus": float(gpus.max(initial=0.0))}


def quota_queue_figures(plan: QuotaPlan, period: Period, step_s: float) -> dict[str, Any]:
    """The queue, and the demand the service sees over the scored period (at each step start, as the
    policies saw it): pods that exist alone, and with the Workloads it counts; and the GPUs waiting for
    quota, which neither counts."""
    scored = slice(int(period.scored_from // step_s), None)
    pods, workloads, waiting = plan.pods_gpus[scored], plan.workload_gpus[scored], plan.waiting_gpus[scored]
    return {
        "quota_gpus": plan.settings.quota_gpus,
        "queueing_strategy": QUEUEING_STRATEGY,
        "admission_check_seconds": plan.settings.admission_check_s,
        "see_workloads": plan.settings.see_workloads,
        "demand_seen": {
            "without_workloads": _level(pods, step_s),
            "with_workloads": _level(pods + workloads, step_s),
            "workloads_counted": _level(workloads, step_s),
            "waiting_for_quota": _level(waiting, step_s),
        },
    }


def render_quota_queue(console: Console, report: dict[str, Any]) -> None:
    """The queue's line and each policy's waits, under the main table."""
    from rich.table import Table

    queue = report.get("quota_queue")
    if queue is None:
        return
    seen = queue["demand_seen"]
    console.print(
        f"quota queue: {queue['quota_gpus']} GPUs of nominal quota ({queue['queueing_strategy']}), admission checks "
        f"{queue['admission_check_seconds']:g} s, Workloads {'' if queue['see_workloads'] else 'not '}seen by auto; "
        f"demand seen: {_hours(seen['without_workloads'])} from pods alone, {_hours(seen['with_workloads'])} with "
        f"the Workloads counted; {_hours(seen['waiting_for_quota'])} waiting for quota (counted by neither)"
    )
    table = Table(title="Workload waits (seconds): from creation to quota, to admission, to its pod running")
    table.add_column("policy", no_wrap=True)
    for kind in KINDS:
        for figure in ("p50", "p95", "max"):
            table.add_column(f"{kind.replace('_', ' ')} {figure}", justify="right")
    for text, figures in report["policies"].items():
        waits = figures[QUEUE_WAITS]
        cells = [waits[kind][figure] for kind in KINDS for figure in ("p50", "p95", "max")]
        table.add_row(text, *("-" if cell is None else f"{cell:,.0f}" for cell in cells))
    console.print(table)


def _hours(level: dict[str, float]) -> str:
    return f"{level['gpu_hours']:,.0f} GPU-hours (at most {level['max_gpus']:g} GPUs)"
