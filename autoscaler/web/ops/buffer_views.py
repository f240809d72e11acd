"""The CapacityBuffer writer as the inspection API (``GET /api/v1/capacity-buffers``) and the page show it.

JSON shape (documented in docs/capacity-buffers.md, tested exactly):

``{"mode", "dryRun", "apiVersion", "lease": {"namespace", "name", "holder", "held"} | null,
"buffers": [{"pool", "namespace", "name", "podTemplate", "gpusPerChunk", "metric", "labels",
"servedValue", "desired", "reason", "written", "writtenAt", "writes", "reported", "expected",
"expectedReason", "limitedByQuotas": {"status", "reason", "message"} | null, "conditions":
[{"type", "status", "reason", "message"}], "lastError"}]}``

``desired`` is what the served value asks for (what a dry run would write), ``written`` what this
replica last wrote or found, ``reported`` the autoscaler's ``status.replicas``, ``expected`` what the
autoscaler's sizing rule gives the spec as read (``limits`` applied, before quotas) and
``limitedByQuotas`` Cluster Autoscaler's condition of that name, when it reports one.
"""

from __future__ import annotations

from datetime import UTC
from html import escape
from typing import Any

from autoscaler.actuation.buffer_sizing import BufferState
from autoscaler.actuation.writer import BufferActuator


def _state_json(state: BufferState) -> dict[str, Any]:
    pool = state.pool
    return {
        "pool": pool.pool,
        "namespace": pool.namespace,
        "name": pool.name,
        "podTemplate": pool.template_name,
        "gpusPerChunk": pool.gpus_per_chunk,
        "metric": pool.metric,
        "labels": pool.series_labels,
        "servedValue": state.desired.value,
        "desired": state.desired.replicas,
        "reason": state.desired.reason,
        "written": state.written,
        "writtenAt": state.written_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if state.written_at else None,
        "writes": state.writes,
        "reported": state.reported,
        "expected": state.sizing.replicas if state.sizing else None,
        "expectedReason": state.sizing.reason if state.sizing else None,
        "limitedByQuotas": _limited_json(state),
        "conditions": [
            {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message} for c in state.conditions
        ],
        "lastError": state.last_error,
    }


def _limited_json(state: BufferState) -> dict[str, str] | None:
    condition = state.limited_by_quotas
    if condition is None:
        return None
    return {"status": condition.status, "reason": condition.reason, "message": condition.message}


def _limited_cell(state: BufferState) -> str:
    condition = state.limited_by_quotas
    if condition is None:
        return "-"
    if condition.status == "True":
        return f'<span class="warn">yes: {escape(condition.message)}</span>'
    return "no"


def buffers_json(actuator: BufferActuator) -> dict[str, Any]:
    elector = actuator.elector
    lease = (
        {"namespace": elector.namespace, "name": elector.name, "holder": elector.holder, "held": elector.is_leader}
        if elector is not None
        else None
    )
    return {
        "mode": actuator.mode,
        "dryRun": actuator.settings.dry_run,
        "apiVersion": f"autoscaling.x-k8s.io/{actuator.api_version}" if actuator.api_version else None,
        "lease": lease,
        "buffers": [_state_json(state) for state in actuator.states.values()],
    }


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def buffers_section(actuator: BufferActuator) -> str:
    """The page's table: per pool, desired vs written vs reported, and the autoscaler's conditions."""
    rows = []
    for state in actuator.states.values():
        conditions = ", ".join(f"{c.type}={c.status} ({c.reason})" for c in state.conditions) or "-"
        problem = f'<br><span class="warn">{escape(state.last_error)}</span>' if state.last_error else ""
        expected = f"; expected: {escape(state.sizing.reason)}" if state.sizing else ""
        rows.append(
            f"<tr><td>{escape(state.pool.pool)}</td><td>{escape(state.pool.namespace)}/{escape(state.pool.name)}</td>"
            f'<td class="num">{_count(state.desired.replicas)}</td><td class="num">{_count(state.written)}</td>'
            f'<td class="num">{_count(state.reported)}</td>'
            f'<td class="num">{_count(state.sizing.replicas if state.sizing else None)}</td>'
            f"<td>{_limited_cell(state)}</td><td>{escape(conditions)}</td>"
            f'<td><span class="muted">{escape(state.desired.reason)}{expected}</span>{problem}</td></tr>'
        )
    mode = {"dry-run": "dry run: nothing is written", "standby": "standby: another replica holds the Lease",
            "unavailable": "the cluster serves no CapacityBuffers", "writing": "writing"}[actuator.mode]  # fmt: skip
    return (
        f"<h2>CapacityBuffers</h2><p>{escape(mode)}</p>"
        '<div class="table-wrap"><table><thead><tr><th>Pool</th><th>CapacityBuffer</th><th class="num">Desired</th>'
        '<th class="num">Written</th><th class="num">Reported</th><th class="num">Expected</th>'
        "<th>Limited by quotas</th><th>Conditions</th><th>Why</th></tr></thead>"
        "<tbody>" + "".join(rows) + "</tbody></table></div>"
    )
