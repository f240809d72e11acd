"""``GET /api/v1/scorecard``, and the page's panels: what happened in each pool over the last hour, day
and week, and each headroom's service-level target observed.

Every figure comes from the pool's live scorecard (``autoscaler.scorecard.pools``, defined in
``autoscaler.scorecard.figures``; targets judged in ``autoscaler.scorecard.target_status``);
docs/scorecard.md says what each one means and where it is read from.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from html import escape
from typing import Any

from aiohttp import web

from autoscaler.scorecard.kueue_histograms import waits_json
from autoscaler.scorecard.live import LiveScorecard
from autoscaler.scorecard.target_status import TUNE_WINDOW, TargetStatus, statuses, target_status
from autoscaler.serving.provenance import TargetChoice
from autoscaler.serving.provider import Snapshot
from autoscaler.web.shared.keys import CLOCK, SCORECARD, SNAPSHOTS

SCORECARD_PATH = "/api/v1/scorecard"
_QUEUE_WAITS = {"quota": "Quota wait", "admission_check": "Admission-check wait", "capacity": "Capacity wait"}
_SHORT_UNKNOWN = (
    '<p class="note">GPUs short are unknown: no Pending-pod watch runs (<code>inputs.pending_pods</code> off, or no '
    "Kubernetes API), so no pod waiting for capacity is seen. GPUs held, used and idle are still measured.</p>"
)


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _figure(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def target_json(status: TargetStatus) -> dict[str, Any]:
    """A target observed, as the API shows it (docs/scorecard.md)."""
    choice = status.choice
    return {
        "kind": status.target.kind,
        "value": status.target.value,
        "description": status.target.describe(),
        "tune_window_seconds": choice.window_s,
        "attained": {
            "live": {window: _figure(value) for window, value in status.live.items()},
            "replay": _figure(choice.replay_attained),
        },
        "error_budget_remaining": _figure(status.budget_remaining),
        "chosen": choice.chosen,
        "chosen_at": None if choice.chosen_at is None else _stamp(choice.chosen_at),
        "reason": choice.reason,
    }


def series_target_json(
    scorecard: LiveScorecard | None, choice: TargetChoice | None, now: datetime
) -> dict[str, Any] | None:
    """One served series' target observed (None without a target)."""
    if choice is None:
        return None
    card = scorecard.owned_cards().get(choice.pool) if scorecard is not None else None
    return target_json(target_status(choice, card, now.timestamp()))


def scorecard_json(scorecard: LiveScorecard | None, now: datetime, snapshot: Snapshot | None = None) -> dict[str, Any]:
    """Each scored pool's periods, and the targets judged on it (``targets``: metric -> target observed)."""
    figures = scorecard.figures(now) if scorecard is not None else {}
    observed = {}
    if snapshot is not None and scorecard is not None:
        observed = statuses(snapshot, scorecard.owned_cards(), now.timestamp())
    return {
        "at": _stamp(now),
        "cluster_queues": waits_json(scorecard.cluster_queue_waits) if scorecard is not None else [],
        "pools": [
            {
                "pool": pool,
                "periods": periods,
                "targets": {m: target_json(s) for (p, m), s in sorted(observed.items()) if p == pool},
            }
            for pool, periods in figures.items()
        ],
    }


async def get_scorecard(request: web.Request) -> web.Response:
    snapshot = request.app[SNAPSHOTS].snapshot
    return web.json_response(scorecard_json(request.app.get(SCORECARD), request.app[CLOCK](), snapshot))


def add_scorecard_routes(app: web.Application) -> None:
    app.router.add_get(SCORECARD_PATH, get_scorecard)


def _minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f} min"


def _count(count: int, noun: str) -> str:
    return f" ({count} {noun}{'' if count == 1 else 's'})"


def _coverage(judged: Mapping[str, Any]) -> str:
    parts = [
        f"{metric}: {figures['covered']}/{figures['judged']}"
        + (f" ({figures['coverage'] * 100:.0f} %)" if figures["coverage"] is not None else "")
        for metric, figures in judged.items()
    ]
    return "; ".join(parts) or "none judged yet"


def scorecard_panel(periods: Mapping[str, Mapping[str, Any]] | None) -> str:
    """The pool's outcomes as an HTML table (docs/scorecard.md); empty when the pool is not scored."""
    if periods is None:
        return ""
    header = (
        "<tr><th>Last</th><th>Minutes short</th><th>Short GPU-minutes</th><th>Capacity wait p50 / p95 / max</th>"
        "<th>Window start delay p95</th><th>Idle GPU-hours</th><th>GPU allocation</th><th>GPUs busy</th>"
        "<th>Live coverage</th></tr>"
    )
    rows = []
    for name, figures in periods.items():
        wait, delay = figures["capacity_wait_seconds"], figures["window_start_delay_seconds"]
        allocation, busy = figures["gpu_allocation"], figures["busy_utilization"]
        cells = (
            name,
            "unknown"
            if figures["minutes_short"] is None
            else f"{figures['minutes_short']} of {figures['minutes_scored']}",
            "unknown" if figures["short_gpu_minutes"] is None else f"{figures['short_gpu_minutes']:.1f}",
            " / ".join(_minutes(wait[key]) for key in ("p50", "p95", "max")) + _count(wait["count"], "pod"),
            _minutes(delay["p95"]) + _count(delay["count"], "run"),
            f"{figures['idle_gpu_hours']:.1f}",
            "-" if allocation is None else f"{allocation * 100:.0f} %",
            "-" if busy is None else f"{busy * 100:.0f} %",
            _coverage(figures["coverage"]),
        )
        rows.append("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in cells) + "</tr>")
    unknown = any(figures["minutes_short"] is None for figures in periods.values())
    return (
        '<div class="scorecard table-wrap"><h3>What happened in this pool (live scorecard)</h3>'
        f'<table class="scorecard">{header}{"".join(rows)}</table>{_SHORT_UNKNOWN if unknown else ""}'
        f"{_queue_waits(periods)}</div>"
    )


def _queue_waits(periods: Mapping[str, Mapping[str, Any]]) -> str:
    """Kueue Workloads' queue waits per period (docs/scorecard.md); empty while none is recorded."""
    if not any(wait["count"] for figures in periods.values() for wait in figures["queue_wait_seconds"].values()):
        return ""
    header = "".join(f"<th>{escape(title)} p50 / p95 / max</th>" for title in _QUEUE_WAITS.values())
    rows = []
    for name, figures in periods.items():
        queued = figures["queue_wait_seconds"]
        cells = [name] + [
            " / ".join(_minutes(queued[kind][key]) for key in ("p50", "p95", "max"))
            + _count(queued[kind]["count"], "Workload")
            for kind in _QUEUE_WAITS
        ]
        rows.append("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in cells) + "</tr>")
    return (
        "<h3>Kueue Workloads' queue waits</h3>"
        f'<table class="scorecard"><tr><th>Last</th>{header}</tr>{"".join(rows)}</table>'
    )


def cluster_queue_panel(scorecard: LiveScorecard | None) -> str:
    """Each ClusterQueue's waits from Kueue's own histograms, read where no Workload is watched
    (``scorecard.kueue_histograms``); empty when none was read."""
    queues = waits_json(scorecard.cluster_queue_waits) if scorecard is not None else []
    if not queues:
        return ""
    titles = {**_QUEUE_WAITS, "admission": "Wait to admission"}
    header = "".join(f"<th>{escape(titles[kind])} p50 / p95</th>" for kind in queues[0]["waits"])
    rows = []
    for queue in queues:
        cells = [queue["cluster_queue"]] + [
            " / ".join(_minutes(figures[key]) for key in ("p50", "p95"))
            + ("" if figures["count"] is None else f" ({figures['count']:.0f} Workloads)")
            for figures in queue["waits"].values()
        ]
        rows.append("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in cells) + "</tr>")
    days = queues[0]["window_seconds"] / 86400
    return (
        f'<section class="scorecard table-wrap"><h2>Kueue\'s queue waits, last {days:g} days</h2>'
        f'<table class="scorecard"><tr><th>ClusterQueue</th>{header}</tr>{"".join(rows)}</table>'
        "<p>From Kueue's own histograms in Prometheus (no Workload is watched here): per ClusterQueue, not per "
        "pool, interpolated within Kueue's buckets, and with no maximum (docs/kueue.md).</p></section>"
    )


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.2f} %"


def _attained(kind: str, value: float | None) -> str:
    """A live or replayed figure in the target's own unit."""
    if value is None:
        return "-"
    if kind == "minutes_short_fraction":
        return _percent(value)
    return f"{value:.1f} GPU-min/day" if kind == "short_gpu_minutes_per_day" else f"{value:.0f} s"


def target_panel(target: Mapping[str, Any] | None) -> str:
    """A series' target observed (``target_json``) as an HTML table; empty without a target."""
    if target is None:
        return ""
    kind, attained = target["kind"], target["attained"]
    live = attained["live"]
    header = "".join(f"<th>Live, {'tune window' if w == TUNE_WINDOW else 'last ' + escape(w)}</th>" for w in live)
    cells = [
        *(_attained(kind, value) for value in live.values()),
        _attained(kind, attained["replay"]),
        _percent(target["error_budget_remaining"]),
    ]
    chosen_at = f"at {target['chosen_at']}" if target["chosen_at"] else "no choice yet"
    days = target["tune_window_seconds"] / 86400
    return (
        f'<div class="scorecard table-wrap"><h3>Target: {escape(target["description"])}</h3>'
        f'<table class="scorecard"><tr>{header}<th>Replay (tune window)</th><th>Error budget left</th></tr>'
        "<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in cells) + "</tr></table>"
        f"<p>Serving <strong>{escape(target['chosen'])}</strong> ({escape(chosen_at)}): {escape(target['reason'])}."
        f" Live and replayed over a tune window of {days:g} day{'' if days == 1 else 's'}.</p></div>"
    )
