"""Stand-ins for what a cluster run produces, for tests of what is done with its totals."""

from __future__ import annotations

import numpy as np

from autoscaler.simulation.engine import Outcome, Totals


def outcome(provisioned_gpu_hours: float, short_gpu_minutes: float = 0.0) -> Outcome:
    empty = np.zeros(0)
    totals = Totals(provisioned=provisioned_gpu_hours * 3600, short=short_gpu_minutes * 60)
    return Outcome(totals, pod_waits=empty, window_pod_waits=empty, capacity_times=empty, capacity_values=empty)
