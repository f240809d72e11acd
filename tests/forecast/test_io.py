"""CSV input: good files parse, bad ones name the line and column."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from forecast.io import SeriesFileError, aggregate, read_series_csv


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_reads_rfc3339_unix_seconds_and_gaps(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "s.csv",
        "timestamp,value\n2024-01-01T00:00:00Z,1\n1704067260,\n2024-01-01T00:02:00+00:00,3.5\n",
    )
    series = read_series_csv(path)
    assert str(series.index.tz) == "UTC"
    assert series.index[1] == pd.Timestamp("2024-01-01T00:01:00Z")
    assert np.isnan(series.iloc[1])
    assert series.iloc[2] == 3.5


def test_reads_gzip(tmp_path: Path) -> None:
    path = tmp_path / "s.csv.gz"
    with gzip.open(path, "wt") as handle:
        handle.write("value,timestamp\n2,1704067200\n")
    assert read_series_csv(path).iloc[0] == 2.0


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("timestamp,value\n2024-01-01T00:00:00Z,1\nyesterday,2\n", 3, "timestamp"),
        ("timestamp,value\n2024-01-01T00:00:00Z,1\n2024-01-01T00:01:00Z,lots\n", 3, "value"),
        ("time,value\n2024-01-01T00:00:00Z,1\n", 1, "timestamp"),
        ("timestamp,gpus\n2024-01-01T00:00:00Z,1\n", 1, "value"),
        ("timestamp,value\n1704067200,1\n1704067200,2\n", 3, "timestamp"),
    ],
    ids=["bad-timestamp", "bad-value", "missing-timestamp", "missing-value", "duplicate"],
)
def test_bad_files_name_line_and_column(tmp_path: Path, text: str, line: int, column: str) -> None:
    with pytest.raises(SeriesFileError) as caught:
        read_series_csv(_write(tmp_path / "bad.csv", text))
    assert caught.value.line == line
    assert caught.value.column == column
    assert f"line {line}" in str(caught.value)
    assert repr(column) in str(caught.value)


def test_empty_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(SeriesFileError, match="empty file"):
        read_series_csv(_write(tmp_path / "empty.csv", ""))
    with pytest.raises(SeriesFileError, match="no data rows"):
        read_series_csv(_write(tmp_path / "header.csv", "timestamp,value\n"))
    with pytest.raises(SeriesFileError, match="not found"):
        read_series_csv(tmp_path / "absent.csv")


def test_aggregate_by_mean_keeps_gaps() -> None:
    index = pd.date_range("2024-01-01", periods=15, freq="1min", tz="UTC")
    values = np.arange(15, dtype=float)
    values[5:10] = np.nan
    out = aggregate(pd.Series(values, index=index), pd.Timedelta(minutes=5))
    assert list(out.iloc[[0, 2]]) == [2.0, 12.0]
    assert np.isnan(out.iloc[1])


def test_aggregate_rejects_coarser_input() -> None:
    index = pd.date_range("2024-01-01", periods=5, freq="1h", tz="UTC")
    with pytest.raises(ValueError, match="coarser"):
        aggregate(pd.Series(np.ones(5), index=index), pd.Timedelta(minutes=5))
