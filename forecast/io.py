"""Read a demand series from CSV (optionally gzip) and aggregate it to a regular step.

The file has a header with the columns ``timestamp`` (RFC3339, or Unix seconds) and ``value``
(a float; empty means a gap). Errors name the line and column so that a person can fix the file.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

REQUIRED_COLUMNS = ("timestamp", "value")
_GAP_TOKENS = frozenset({"", "nan", "NaN", "NA", "null"})


class SeriesFileError(ValueError):
    """The input file is malformed; ``line`` is 1-based (the header is line 1, 0 = whole file)."""

    def __init__(self, path: str, line: int, column: str | None, problem: str) -> None:
        where = f"line {line}" + (f", column {column!r}" if column else "")
        # Line 0 means the file as a whole (missing, not gzip, not text).
        super().__init__(f"{path}: {where}: {problem}" if line > 0 else f"{path}: {problem}")
        self.path = path
        self.line = line
        self.column = column
        self.problem = problem


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return io.TextIOWrapper(open(path, "rb"), encoding="utf-8", newline="")  # the caller closes it


def _parse_timestamp(text: str) -> float:
    """Unix seconds from RFC3339 text (a missing offset means UTC) or a plain number of seconds."""
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise ValueError(f"timestamp {text!r} is not finite")
        return seconds
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"timestamp {text!r} is neither RFC3339 nor Unix seconds") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def read_series_csv(path: str | Path) -> pd.Series:
    """The file's values as float64 on a sorted, tz-aware UTC DatetimeIndex; gaps are NaN."""
    path = Path(path)
    name = str(path)
    if not path.is_file():
        raise SeriesFileError(name, 0, None, "file not found")
    stamps: list[float] = []
    values: list[float] = []
    seen: dict[float, int] = {}
    try:
        with _open_text(path) as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if header is None:
                raise SeriesFileError(name, 1, None, "empty file: expected a header 'timestamp,value'")
            columns = [column.strip().lstrip("\ufeff") for column in header]
            for required in REQUIRED_COLUMNS:
                if required not in columns:
                    raise SeriesFileError(name, 1, required, f"missing column (header has {columns})")
            ts_col, value_col = columns.index("timestamp"), columns.index("value")
            for row in reader:
                line = reader.line_num
                if not row or all(not cell.strip() for cell in row):
                    continue
                if len(row) != len(columns):
                    raise SeriesFileError(name, line, None, f"expected {len(columns)} fields, found {len(row)}")
                try:
                    stamp = _parse_timestamp(row[ts_col].strip())
                except ValueError as error:
                    raise SeriesFileError(name, line, "timestamp", str(error)) from None
                raw = row[value_col].strip()
                if raw in _GAP_TOKENS:
                    value = math.nan
                else:
                    try:
                        value = float(raw)
                    except ValueError:
                        raise SeriesFileError(name, line, "value", f"{raw!r} is not a number") from None
                    if not math.isfinite(value):
                        raise SeriesFileError(name, line, "value", f"{raw!r} is not finite")
                if stamp in seen:
                    raise SeriesFileError(name, line, "timestamp", f"duplicate of line {seen[stamp]}")
                seen[stamp] = line
                stamps.append(stamp)
                values.append(value)
    except (UnicodeDecodeError, gzip.BadGzipFile, EOFError, csv.Error) as error:
        raise SeriesFileError(name, 0, None, f"unreadable file: {error}") from None
    if not stamps:
        raise SeriesFileError(name, 2, None, "no data rows")
    index = pd.DatetimeIndex(pd.to_datetime(np.asarray(stamps), unit="s", utc=True))
    series = pd.Series(np.asarray(values, dtype=np.float64), index=index, name=path.name)
    return series.sort_index()


def aggregate(series: pd.Series, step: pd.Timedelta) -> pd.Series:
    """Mean per ``step`` bin on a regular UTC grid; bins without data become NaN gaps."""
    if len(series) > 1:
        native = pd.Timedelta(pd.Series(series.index).diff().median())
        if native > step:
            raise ValueError(f"input is sampled every {native}, coarser than the step {step}")
    out = series.resample(step, label="left", closed="left", origin="epoch").mean()
    return out.astype(np.float64)
