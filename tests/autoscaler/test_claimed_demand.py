"""GPUs DRA claims use, recorded at each pull and added to a ``gpus_requested`` signal's pool series
(``autoscaler.refresh.claimed_demand``): on the point the pull reads, only to series of one pool, never
filling a gap, and kept across a restart unless the file is garbled."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from adapters.prometheus import presets
from adapters.types import Signal
from autoscaler.refresh.claimed_demand import ClaimedDemandSource

NOW = datetime(2026, 11, 20, 9, 0, 30, tzinfo=UTC)
STEP = pd.Timedelta(minutes=1)
QUERY = presets.gpus_requested(step=STEP.to_pytimedelta(), per_step="last")


class History:
    """Stands in for a Prometheus source: a 5-minute history per label set, the newest point at NOW's minute."""

    name = "gpus_requested"

    def __init__(self, *labels: dict[str, str]) -> None:
        self.labels = labels

    async def pull(self, now: datetime) -> list[Signal]:
        index = pd.date_range(end=pd.Timestamp(now).floor("min"), periods=5, freq=STEP)
        values = np.array([4.0, np.nan, 4.0, 4.0, 4.0])
        return [Signal(self.name, labels, pd.Series(values, index=index), STEP) for labels in self.labels]


def source(claimed: dict[str, float], path: Path | None, *labels: dict[str, str]) -> ClaimedDemandSource:
    return ClaimedDemandSource(History(*labels), QUERY, lambda: claimed, timedelta(hours=1), path)


async def test_claims_are_added_to_their_pools_series_from_when_they_were_seen(tmp_path: Path) -> None:
    claimed = {"a100": 2.0, "h100": 3.0}
    labels = ({"nodepool": "a100"}, {"nodepool": ""}, {"nodepool": "a100", "namespace": "ml"})
    first = source(claimed, tmp_path / "claims.json", *labels)
    await first.pull(NOW - 2 * STEP)
    claimed["a100"] = 1.0
    a100, pool_less, split = await first.pull(NOW)
    # 2 claimed two minutes ago, 1 now; the gap stays a gap.
    assert np.isnan(a100.series.iloc[1]) and a100.series.drop(a100.series.index[1]).tolist() == [4.0, 6.0, 4.0, 5.0]
    assert pool_less.series.equals(split.series) and pool_less.series.iloc[-1] == 4.0  # never added to
    restarted = source({}, tmp_path / "claims.json", *labels)
    assert (await restarted.pull(NOW))[0].series.iloc[-1] == 5.0


async def test_a_garbled_record_is_said_and_the_record_starts_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "claims.json"
    path.write_text('{"version": 1, "signal": "gpus_requested", "pools": {"a100": {"at": [1795000000], "gpus": [-1]}}}')
    with caplog.at_level(logging.ERROR):
        garbled = source({}, path, {"nodepool": "a100"})
    assert garbled.recorded == {}
    assert f"signal gpus_requested: ignoring {path}" in caplog.text and "-1 is not a count of GPUs" in caplog.text
