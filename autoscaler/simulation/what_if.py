"""``gpu-autoscaler report``'s HTML: what the service would have served on a cluster's own history.

Each node pool's GPUs-requested series is replayed through the simulator (``runner.simulate``, the
demand as ``simulate --input`` reads a CSV) under the service's policy, reactive (the cluster as it
ran: nodes launched when pods ask for them) and the heuristics an operator could run instead. The
figures are the simulator's (``report.build_report``), stated in the seeds' terms beside reactive
(``versus_reactive``). The file is self-contained: the stylesheet is inline and the pictures are
PNGs embedded as base64.
"""

from __future__ import annotations

import base64
import io
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from autoscaler.simulation.coverage import headroom_coverage
from autoscaler.simulation.inputs import InputError, Pods, Workload, make_workload
from autoscaler.simulation.policies import PolicySpec
from autoscaler.simulation.report import build_report, plot
from autoscaler.simulation.runner import SimulationConfig, SimulationResult, simulate
from autoscaler.simulation.versus_reactive import describe

# (policy figure, column heading): the seeds' terms first.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("short_gpu_minutes", "short GPU-minutes"),
    ("capacity_wait_p50_s", "capacity wait p50 s"),
    ("capacity_wait_p95_s", "capacity wait p95 s"),
    ("minutes_short_fraction", "time demand waited"),
    ("coverage", "coverage"),
    ("idle_gpu_hours", "idle GPU-hours"),
    ("provisioned_gpu_hours", "provisioned GPU-hours"),
    ("gpu_allocation", "GPU allocation"),
    ("cost", "cost"),
    ("node_launches", "node launches"),
)
_PERCENT = ("minutes_short_fraction", "coverage", "gpu_allocation")
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 75rem; padding: 0 1rem; color: #1d2330; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; }
th, td { border: 1px solid #d0d5dd; padding: 0.25rem 0.6rem; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.service { background: #eef4ff; font-weight: 600; }
.notice { border-left: 4px solid #1f6feb; padding: 0.4em 0.8em; background: #eef4ff; }
img { max-width: 100%; }
"""


@dataclass(frozen=True)
class PoolRun:
    pool: str
    result: SimulationResult
    report: dict[str, Any]


@dataclass(frozen=True)
class ReportContext:
    """What the report was made from, stated at its top."""

    url: str
    start: pd.Timestamp
    end: pd.Timestamp
    service_policy: str  # the policy that stands for what the service serves (auto:Q)
    gpu_hour_price: float
    # Per pool, the ``simulate`` command that replays its series as the report did (report --save-series).
    commands: Mapping[str, str] = field(default_factory=dict)


def series_workload(name: str, series: pd.Series, step_s: float) -> Workload:
    """GPUs requested on a regular grid as the simulator's pods (``unit_pods``), from the first point;
    a gap carries the last value."""
    observed = series.dropna()
    if observed.empty:
        raise InputError(f"{name}: every point is a gap")
    if (observed < 0).any():
        raise InputError(f"{name}: GPUs requested must not be negative")
    levels = pd.Series(series.loc[observed.index[0] :].to_numpy(dtype=np.float64)).ffill().to_numpy()
    return make_workload(
        name, pd.Timestamp(observed.index[0]), step_s, np.zeros(len(levels)), unit_pods(levels, step_s), ()
    )


def unit_pods(levels: np.ndarray, step_s: float) -> Pods:
    """One 1-GPU pod per GPU requested, so that the simulator measures how long pods wait.

    The level is rounded up to whole GPUs (a MIG slice or a time-sliced share takes one). Each rise is
    that many pods arriving at the step; each fall ends the newest ones (long-running pods are the
    base the level never falls below). Pods still running at the end run until the end.
    """
    running: list[float] = []  # arrival of each pod still running, oldest first
    arrival: list[float] = []
    duration: list[float] = []
    previous = 0
    for step, level in enumerate(np.ceil(np.round(levels, 6)).astype(np.int64).tolist()):
        now = step * step_s
        running.extend([now] * max(0, level - previous))
        for _ in range(max(0, previous - level)):
            start = running.pop()
            arrival.append(start)
            duration.append(now - start)
        previous = level
    end = len(levels) * step_s
    arrival += running
    duration += [end - start for start in running]
    pods = Pods(
        np.asarray(arrival, dtype=np.float64),
        np.asarray(duration, dtype=np.float64),
        np.ones(len(arrival), dtype=np.int64),
        np.zeros(len(arrival), dtype=bool),
    )
    return pods.select(np.argsort(pods.arrival, kind="stable"))


def simulate_pools(
    series: Mapping[str, pd.Series],
    specs: Sequence[PolicySpec],
    config: SimulationConfig,
    *,
    gpu_hour_price: float,
    workers: int = 1,
    on_pool: Callable[[str], None] | None = None,
) -> list[PoolRun]:
    """Every pool's series through the simulator, in pool order."""
    runs = []
    for pool in sorted(series):
        if on_pool is not None:
            on_pool(pool)
        name = f"nodepool={pool!r}"
        workload = series_workload(name, series[pool], config.cadence.step_s)
        result = simulate(workload, specs, config, workers=workers)
        report = build_report(result, input_name=name, pods=True, gpu_hour_price=gpu_hour_price)
        runs.append(PoolRun(pool, result, report))
    return runs


def render_html(context: ReportContext, runs: Sequence[PoolRun]) -> str:
    """The whole report: the summary, then a section per pool with its table, lines and pictures."""
    sections = "\n".join(_pool_section(context, run) for run in runs)
    first = runs[0].report if runs else {}
    scored = first.get("scored", {})
    lead = first.get("lead_time_seconds", 0)
    return f"""<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>gpu-autoscaler report: {escape(context.url)}</title>
<style>{_STYLE}</style></head>
<body>
<h1>What gpu-autoscaler would have served</h1>
<p class="notice">Replayed from the GPU requests that kube-state-metrics recorded in Prometheus at
{escape(context.url)}, {_when(context.start)} to {_when(context.end)} (scored from
{escape(str(scored.get("start", "-")))}). Nothing was read from or written to the cluster.</p>
<p><b>{escape(context.service_policy)}</b> is what the service serves by default (gpu_headroom at the
0.9 quantile, placeholders scaled by an HPA); <b>reactive</b> is what happened without it (nodes are
launched when pods ask for them); the others are heuristics an operator could run instead.
Nodes take {lead:g} s to become Ready. Cost is provisioned GPU-hours at {context.gpu_hour_price:g} per
GPU-hour. Demand is the pool's GPUs requested, replayed as one-GPU pods: each rise is pods arriving,
each fall ends the newest; a pod waits (capacity wait p50, p95) from its arrival until Ready capacity runs it.
Coverage is the share of steps at which the GPUs requested plus the headroom served reached the most
GPUs requested over the lead time that followed ({escape(context.service_policy)} asks for about
{_asked(context.service_policy)} of them).</p>
<h2>Summary</h2>
{_summary(context, runs)}
{sections}
</body>
</html>
"""


def _summary(context: ReportContext, runs: Sequence[PoolRun]) -> str:
    rows = []
    for run in runs:
        versus = run.report["versus_reactive"].get(context.service_policy, {})
        policies = run.report["policies"]
        service, reactive = policies.get(context.service_policy, {}), policies.get("reactive", {})
        cells = [
            f"<td>{escape(run.pool or '(no pool: Pending pods)')}</td>",
            *(
                f'<td class="num">{_cell(key, service.get(key))} (reactive {_cell(key, reactive.get(key))})</td>'
                for key in ("short_gpu_minutes", "capacity_wait_p95_s", "idle_gpu_hours", "cost")
            ),
            f'<td class="num">{_change(versus.get("cost", {}).get("change"))}</td>',
        ]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    head = "".join(
        f"<th>{escape(h)}</th>"
        for h in ("node pool", "short GPU-minutes", "capacity wait p95 s", "idle GPU-hours", "cost", "cost change")
    )
    return f'<table class="figures summary"><tr>{head}</tr>{"".join(rows)}</table>'


def _pool_section(context: ReportContext, run: PoolRun) -> str:
    head = "".join(f"<th>{escape(title)}</th>" for _, title in COLUMNS)
    rows = []
    result = run.result
    for text, figures in run.report["policies"].items():
        lead_time_s = result.config.lead_time_s
        coverage = headroom_coverage(result.workload, result.runs[text].metric, lead_time_s, result.period)
        figures = {**figures, "coverage": coverage}
        marked = ' class="service"' if text == context.service_policy else ""
        cells = "".join(f'<td class="num">{_cell(key, figures.get(key))}</td>' for key, _ in COLUMNS)
        rows.append(f"<tr{marked}><td>{escape(text)}</td>{cells}</tr>")
    lines = "".join(
        f"<li>{escape(describe(text, entry))}</li>" for text, entry in run.report["versus_reactive"].items()
    )
    capacity, tradeoff = _pictures(run.result)
    title = run.pool or "(no pool: Pending pods)"
    served = _served_picture(run.result, context.service_policy, title)
    return f"""<h2>Node pool {escape(title)}</h2>
<table class="figures"><tr><th>policy</th>{head}</tr>{"".join(rows)}</table>
<p>Against reactive:</p><ul>{lines}</ul>{_reproduce(context.commands.get(run.pool))}
<img alt="what {escape(context.service_policy)} would have served, node pool {escape(title)}"
 src="data:image/png;base64,{served}">
<img alt="demand and Ready capacity per policy, node pool {escape(title)}" src="data:image/png;base64,{capacity}">
<img alt="short GPU-minutes against provisioned GPU-hours, node pool {escape(title)}"
 src="data:image/png;base64,{tradeoff}">
"""


def _pictures(result: SimulationResult) -> tuple[str, str]:
    """The simulator's two pictures (``report.plot``) as base64 PNG."""
    with tempfile.TemporaryDirectory(prefix="gpu-autoscaler-report-") as directory:
        capacity = Path(directory) / "capacity.png"
        tradeoff = plot(result, capacity)
        return _base64(capacity), _base64(tradeoff)


def _served_picture(result: SimulationResult, policy: str, title: str) -> str:
    """GPUs requested, and requested plus the headroom ``policy`` served, over the scored period (PNG)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: render to memory
    import matplotlib.pyplot as plt

    workload, run = result.workload, result.runs[policy]
    first = int(result.period.scored_from // workload.step_s)
    times = workload.index()[first:]
    requested = workload.observed[first:]
    figure, axis = plt.subplots(figsize=(13, 3.6))
    axis.fill_between(times, requested, color="lightgray", step="post", label="GPUs requested (what happened)")
    axis.step(times, requested + run.metric[first:], where="post", color="tab:orange", linewidth=0.9,
              label=f"GPUs requested + headroom served by {policy}")  # fmt: skip
    axis.set_title(f"Node pool {title}: what {policy} would have served", fontsize=10, loc="left")
    axis.set_ylabel("GPUs")
    axis.set_ylim(bottom=0.9 * float(requested.min()))  # the headroom is small beside the level: zoom on it
    axis.legend(loc="best", fontsize=8)
    figure.autofmt_xdate()
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90)
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _base64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key in _PERCENT:
        return f"{value:.1%}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return escape(str(value))


def _reproduce(command: str | None) -> str:
    if command is None:
        return ""
    return (
        "<p>The same table from the command line, with the pool's series saved by <code>--save-series</code>: "
        f"<code>{escape(command)}</code></p>"
    )


def _asked(policy: str) -> str:
    """The share of steps a quantile policy (``auto:0.9``) asks its headroom to cover."""
    quantile = policy.partition(":")[2]
    try:
        return f"{float(quantile):.0%}"
    except ValueError:
        return "what its target asks"


def _change(change: float | None) -> str:
    return "-" if change is None else f"{change:+.1%}"


def _when(moment: pd.Timestamp) -> str:
    return f"{pd.Timestamp(moment).tz_convert('UTC'):%Y-%m-%d %H:%M} UTC"
