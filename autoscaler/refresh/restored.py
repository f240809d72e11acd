"""A value saved or published elsewhere, checked and capped as a computed one is before it is served again."""

from __future__ import annotations

import logging
from dataclasses import replace

from autoscaler import policy
from autoscaler.serving.provider import ServedSeries
from autoscaler.targets.plans import MetricPlan, RefreshInputs

log = logging.getLogger(__name__)


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
