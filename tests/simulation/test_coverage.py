"""A policy's coverage in the report: the share of steps whose requested GPUs plus the headroom served
reached the peak requested over the lead time that followed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from autoscaler.simulation.coverage import headroom_coverage
from autoscaler.simulation.engine import Period
from autoscaler.simulation.inputs import Pods, Workload, make_workload

STEP_S = 60.0


def fluid(levels: list[float]) -> Workload:
    origin = pd.Timestamp("2026-01-01", tz="UTC")
    return make_workload("test", origin, STEP_S, np.asarray(levels, dtype=float), Pods.empty(), ())


def test_a_headroom_covers_a_step_when_it_reaches_the_peak_over_the_lead_time():
    # Demand 10, then a rise to 14 at step 4 for two steps, then 10 again.
    workload = fluid([10, 10, 10, 10, 14, 14, 10, 10, 10, 10])
    period = Period(start=0.0, scored_from=0.0, end=10 * STEP_S)
    # A lead time of 2 steps: steps 0..7 have a whole lead time after them; steps 2 and 3 see the
    # rise of 4 ahead, step 4 sees 14 ahead of its own 14 and step 5 nothing above 10.
    assert headroom_coverage(workload, np.full(10, 4.0), 2 * STEP_S, period) == 1.0
    assert headroom_coverage(workload, np.full(10, 3.0), 2 * STEP_S, period) == pytest.approx(6 / 8)
    assert headroom_coverage(workload, np.zeros(10), 2 * STEP_S, period) == pytest.approx(6 / 8)
    # A headroom that could not be served is not judged (as the live scorecard): 3 too small of 6 judged.
    unserved = np.full(10, 3.0)
    unserved[:2] = np.nan
    assert headroom_coverage(workload, unserved, 2 * STEP_S, period) == pytest.approx(4 / 6)
    assert headroom_coverage(workload, np.full(10, np.nan), 2 * STEP_S, period) is None


def test_only_scored_steps_with_a_whole_lead_time_after_them_count():
    workload = fluid([10, 10, 10, 10, 14, 14, 10, 10, 10, 10])
    scored_late = Period(start=0.0, scored_from=4 * STEP_S, end=10 * STEP_S)
    assert headroom_coverage(workload, np.zeros(10), 2 * STEP_S, scored_late) == 1.0  # steps 4..7
    too_short = Period(start=0.0, scored_from=9 * STEP_S, end=10 * STEP_S)
    assert headroom_coverage(workload, np.zeros(10), 2 * STEP_S, too_short) is None
