from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pandas as pd

from forecast.known_demand import add_scheduled_windows, remove_known_jobs
from forecast.types import Forecast


def _forecast() -> Forecast:
    stamps = pd.date_range("2024-01-01T00:05Z", periods=12, freq="5min")
    return Forecast("naive", stamps, np.full(12, 4.0), {0.9: np.full(12, 6.0)})


def test_windows_add_on_mean_and_quantiles() -> None:
    window = (datetime(2024, 1, 1, 0, 12, tzinfo=UTC), datetime(2024, 1, 1, 0, 30, tzinfo=UTC), 8.0)
    out = add_scheduled_windows(_forecast(), [window])
    # Steps starting 00:10 .. 00:25 overlap [00:12, 00:30).
    assert list(out.mean) == [4, 12, 12, 12, 12] + [4] * 7
    assert list(out.quantile(0.9)[:6]) == [6, 14, 14, 14, 14, 6]
    assert out.notes


def test_known_jobs_are_removed_only_when_visible() -> None:
    index = pd.date_range("2024-01-01", periods=48, freq="1h", tz="UTC")
    values = np.full(48, 10.0)
    values[20:24] += 16
    history = pd.Series(values, index=index)
    visible = (index[20].to_pydatetime(), index[24].to_pydatetime(), 16.0)
    invisible = (index[30].to_pydatetime(), index[33].to_pydatetime(), 16.0)
    cleaned, notes = remove_known_jobs(history, [visible, invisible])
    assert np.all(cleaned.to_numpy() == 10.0)
    assert any("removed" in note for note in notes)
    assert any("not identifiable" in note for note in notes)
