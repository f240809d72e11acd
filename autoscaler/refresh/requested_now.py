"""GPUs requested now in a series' pool: what a headroom decision starts from."""

from __future__ import annotations

import math

from adapters.types import NODEPOOL_LABEL, Signal
from autoscaler import policy
from autoscaler.targets.plans import RefreshInputs


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
