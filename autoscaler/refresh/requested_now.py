"""What a headroom decision starts from: GPUs requested now in a series' pool, and a saved value
checked and capped as a computed one is."""

from __future__ import annotations

import logging
import math
from dataclasses import replace

from adapters.types import NODEPOOL_LABEL, Signal
from autoscaler import policy
from autoscaler.serving.provider import ServedSeries
from autoscaler.targets.plans import MetricPlan, RefreshInputs

log = logging.getLogger(__name__)


def requested(inputs: RefreshInputs, signal: Signal) -> tuple[float, str]:
    """GPUs requested now in the series' pool, and what besides its signal that holds. A pod waiting
    for a node is in the pool-less series (``nodepool=""``); the GPUs of those Karpenter would place in
    a pool count in that pool, and the pool-less series leaves them out: no pod is counted twice."""
    observed = policy.last_observed(signal.series)
    pending = inputs.pending_gpus
    if math.isnan(observed) or pending is None or NODEPOOL_LABEL not in signal.labels:
        return observed, ""
    pool = signal.labels[NODEPOOL_LABEL]
    if pool:
        waiting = pending(pool)
        placement = inputs.pending_placement(pool) if inputs.pending_placement is not None else ""
        source = f"{waiting:g} of them Pending pods waiting for NodePool {pool}" if waiting else ""
        return observed + waiting, source + (f"; {placement}" if source and placement else "")
    moved = pending(None) - pending("")
    source = f"less {moved:g} of Pending pods counted in their NodePools" if moved else ""
    return max(0.0, observed - moved), source


def restorable(inputs: RefreshInputs, plan: MetricPlan, series: ServedSeries) -> ServedSeries | None:
    """A saved value as it may be served again, or None (logged) if it must not be."""
    reason = policy.unservable(series.value)
    if reason is not None:
        log.warning("dropping the saved value of %s%s: %s", series.metric, dict(series.labels), reason)
        return None
    decision = policy.Decision(series.value, series.explanation)
    if plan.kind == "headroom" and inputs.caps is not None:
        # GPUs requested now are not known yet: a pool's whole limit bounds its placeholders.
        decision = policy.apply_caps(decision, inputs.caps(plan, series.labels, 0.0))
    decision = policy.clamp(decision, plan.min_value, plan.max_value)
    if not decision.adjustments:
        return series
    return replace(series, value=decision.value, explanation=decision.explanation)
