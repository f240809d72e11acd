"""``GET /api/v1/scorecard``, and the page's panel: what happened in each pool over the last hour, day
and week.

Every figure comes from the pool's live scorecard (``autoscaler.scorecard.pools``, defined in
``autoscaler.scorecard.figures``); docs/scorecard.md says what each one means and where it is read from.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from html import escape
from typing import Any

from aiohttp import web

from autoscaler.scorecard.live import LiveScorecard
from autoscaler.web.keys import CLOCK, SCORECARD

SCORECARD_PATH = "/api/v1/scorecard"
_SHORT_UNKNOWN = (
    '<p class="note">GPUs short are unknown: no Pending-pod watch runs (<code>inputs.pending_pods</code> off, or no '
    "Kubernetes API), so no pod waiting for capacity is seen. GPUs held, used and idle are still measured.</p>"
)


def scorecard_json(scorecard: LiveScorecard | None, now: datetime) -> dict[str, Any]:
    figures = scorecard.figures(now) if scorecard is not None else {}
    return {
        "at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "pools": [{"pool": pool, "periods": periods} for pool, periods in figures.items()],
    }


async def get_scorecard(request: web.Request) -> web.Response:
    return web.json_response(scorecard_json(request.app.get(SCORECARD), request.app[CLOCK]()))


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
        f'<table class="scorecard">{header}{"".join(rows)}</table>{_SHORT_UNKNOWN if unknown else ""}</div>'
    )
