"""The report's demand as pods (``what_if.unit_pods``): the pods rebuild the level they came from."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from autoscaler.simulation.inputs import InputError, pod_levels
from autoscaler.simulation.what_if import series_workload, unit_pods


def test_a_rise_arrives_and_a_fall_ends_the_newest_pods():
    pods = unit_pods(np.array([0.0, 2.0, 3.0, 1.0, 1.0, 0.0]), 60.0)
    # At 180 s the newest two end (arrived at 120 s and 60 s), at 300 s the last one.
    assert sorted(zip(pods.arrival.tolist(), pods.duration.tolist(), strict=True)) == [
        (60.0, 120.0),
        (60.0, 240.0),
        (120.0, 60.0),
    ]
    assert pods.gpus.tolist() == [1, 1, 1]


@pytest.mark.parametrize("seed", range(5))
def test_the_pods_rebuild_the_level_rounded_up_to_whole_gpus(seed):
    levels = np.random.default_rng(seed).integers(0, 40, 500) + np.random.default_rng(seed + 9).choice([0, 0.25], 500)
    at_start, _, _ = pod_levels(unit_pods(levels, 300.0), len(levels), 300.0)
    assert at_start.tolist() == np.ceil(levels).tolist()


def test_a_workload_starts_at_the_first_point_and_carries_gaps():
    index = pd.date_range("2026-11-01", periods=6, freq="5min", tz="UTC")
    series = pd.Series([np.nan, 2.0, np.nan, 4.0, np.nan, 1.0], index=index)
    workload = series_workload("nodepool='a100'", series, 300.0)
    assert workload.origin == index[1]
    assert workload.observed.tolist() == [2.0, 2.0, 4.0, 4.0, 1.0]
    with pytest.raises(InputError, match="every point is a gap"):
        series_workload("nodepool='a100'", series * np.nan, 300.0)
    with pytest.raises(InputError, match="must not be negative"):
        series_workload("nodepool='a100'", -series, 300.0)
