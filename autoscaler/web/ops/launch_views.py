"""``GET /api/v1/launches``, and the page's panel: each pool's launch record (docs/launch-outcomes.md):
failed and slow NodeClaim launches per instance type, the lead-time distribution (retries included)
and whether the pool keeps failing, so that demand is planned in the next pool."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from html import escape
from typing import Any

import numpy as np
from aiohttp import web

from adapters.kubernetes.launch_record import LaunchRecord, PoolLaunches
from autoscaler.web.shared.keys import CLOCK, LAUNCHES

LAUNCHES_PATH = "/api/v1/launches"


def _stamp(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _lead_times(record: LaunchRecord, pool: str) -> dict[str, Any]:
    seconds = [sample.seconds for sample in record.history.samples(pool)]
    if not seconds:
        return {"samples": 0, "p50": None, "p90": None, "max": None}
    p50, p90 = (float(np.quantile(seconds, q)) for q in (0.5, 0.9))
    return {"samples": len(seconds), "p50": p50, "p90": p90, "max": max(seconds)}


def _instance_types(launches: PoolLaunches) -> list[dict[str, Any]]:
    kinds = sorted({kind for kind, _ in launches.failures} | set(launches.ready))
    return [
        {
            "instance_type": kind,
            "ready": launches.ready[kind],
            "slow": launches.slow[kind],
            "failures": {reason: n for (k, reason), n in sorted(launches.failures.items()) if k == kind},
        }
        for kind in kinds
    ]


def pool_json(record: LaunchRecord, pool: str, now: datetime) -> dict[str, Any]:
    launches = record.pools.get(pool) or PoolLaunches()
    return {
        "pool": pool,
        "failing": record.failing(pool, now),
        "ready": sum(launches.ready.values()),
        "slow": sum(launches.slow.values()),
        "failures": dict(sorted(launches.failures_by_reason().items())),
        "instance_types": _instance_types(launches),
        "lead_time_seconds": _lead_times(record, pool),
        "open_need_since": _stamp(launches.need_start),
        "recent": [
            {
                "at": _stamp(outcome.at),
                "nodeclaim": outcome.name,
                "instance_type": outcome.instance_type,
                "outcome": outcome.reason or "Ready",
                "seconds": outcome.seconds,
                "retries": outcome.retries,
            }
            for outcome in reversed(launches.recent)
        ],
    }


def launches_json(record: LaunchRecord | None, now: datetime) -> dict[str, Any]:
    pools = sorted(record.pools) if record is not None else []
    return {"at": _stamp(now), "pools": [pool_json(record, pool, now) for pool in pools if record is not None]}


async def get_launches(request: web.Request) -> web.Response:
    return web.json_response(launches_json(request.app.get(LAUNCHES), request.app[CLOCK]()))


def add_launch_routes(app: web.Application) -> None:
    app.router.add_get(LAUNCHES_PATH, get_launches)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value / 60:.1f} min"


def launch_panel(pool: Mapping[str, Any] | None) -> str:
    """The pool's launch record as HTML; empty when nothing was launched in it."""
    if pool is None:
        return ""
    failing = pool["failing"]
    warning = (
        f'<p class="warning">Launches keep failing: {escape(failing)}. Demand that fits another pool is '
        "planned there, as Karpenter falls back by weight.</p>"
        if failing
        else ""
    )
    lead = pool["lead_time_seconds"]
    header = "<tr><th>Instance type</th><th>Ready</th><th>Slow</th><th>Failed</th></tr>"
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{escape(str(cell))}</td>"
            for cell in (
                kind["instance_type"] or "(none yet)",
                kind["ready"],
                kind["slow"],
                ", ".join(f"{reason} x{n}" for reason, n in kind["failures"].items()) or "0",
            )
        )
        + "</tr>"
        for kind in pool["instance_types"]
    )
    summary = (
        f"<p>Lead time (retries included) over {lead['samples']} launches: p50 {_seconds(lead['p50'])}, "
        f"p90 {_seconds(lead['p90'])}, max {_seconds(lead['max'])}.</p>"
    )
    return (
        f'<div class="launches table-wrap"><h3>NodeClaim launches in this pool</h3>{warning}{summary}'
        f'<table class="launches">{header}{rows}</table></div>'
    )
