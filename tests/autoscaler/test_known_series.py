"""Known series of a count of GPUs: 0 where the exporter was alive and no series came, a gap where it
was down, and pools known from kube_node_labels, from another source or from their history."""

from __future__ import annotations

import numpy as np
import pandas as pd

from adapters.types import Signal
from autoscaler.refresh.known_series import alive_points, fill_absent, known_identities, newest_pools

STEP = pd.Timedelta(minutes=5)
GRID = pd.date_range("2026-11-22T00:00Z", periods=6, freq=STEP)


def signal(labels: dict[str, str], values: list[float], name: str = "gpus") -> Signal:
    return Signal(name, labels, pd.Series(values, index=GRID[: len(values)], dtype=np.float64), STEP)


def test_a_known_series_is_zero_while_its_exporter_is_alive_and_a_gap_while_it_is_down():
    history = [signal({"nodepool": "a100"}, [16, 16, np.nan, np.nan, np.nan, np.nan])]
    alive = alive_points([signal({}, [1, 1, 1, np.nan, np.nan, 1], name="gpus:alive")])
    known = known_identities(("nodepool",), history, pools={"h100"})
    filled = {s.labels["nodepool"]: s for s in fill_absent("gpus", history, alive, known, STEP, STEP)}
    assert set(filled) == {"a100", "h100"}
    np.testing.assert_array_equal(filled["a100"].series.to_numpy(), [16, 16, 0, np.nan, np.nan, 0])
    np.testing.assert_array_equal(filled["h100"].series.to_numpy(), [0, 0, 0, np.nan, np.nan, 0])
    # Stamped by when its newest point was read: a step's peak is read at the step's end.
    assert filled["a100"].newest_at() == GRID[-1] + STEP


def test_which_series_are_known():
    history = [signal({"nodepool": ""}, [2.0])]
    assert known_identities(("nodepool",), history, {"a100"}) == {(("nodepool", ""),), (("nodepool", "a100"),)}
    assert known_identities((), [], {"a100"}) == {()}  # the whole cluster's series always exists
    # Pools name only series split by pool alone; other splits know their series from history.
    assert known_identities(("nodepool", "namespace"), [], {"a100"}) == set()
    pools = [signal({"nodepool": "a100"}, [1, 1, 1]), signal({"nodepool": "t4"}, [1, np.nan, np.nan])]
    assert newest_pools(pools) == {"a100"}  # t4's nodes are gone


def test_nothing_is_filled_without_a_sign_of_life():
    history = [signal({"nodepool": "a100"}, [16.0])]
    assert fill_absent("gpus", history, alive_points([]), {(("nodepool", "a100"),)}, STEP, STEP) == []
