"""Real demand series derived from the public traces (``tests/traces.py`` lists them and fetches them).

Each loader returns a float64 series on a tz-aware UTC DatetimeIndex at one-minute steps, derived
exactly as the data README describes. ``trace(name, step)`` aggregates by mean to a coarser step.
Alibaba times are anonymised seconds without a wall clock: they are placed on an arbitrary fixed UTC
origin (``ALIBABA_ORIGIN``) so that calendar features stay consistent between runs.

Run as a script to write the four goal traces as CSV files for the ``backtest`` command:

    .venv/bin/python tests/data_helpers.py --out /tmp/traces
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

if __package__ in (None, ""):  # run as a script: the repository root makes ``tests`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests import traces

# Anonymised Alibaba seconds are counted from this instant (an arbitrary, fixed choice).
ALIBABA_ORIGIN = pd.Timestamp("2023-01-01T00:00:00Z")


def helios_paths() -> list[Path]:
    """The 16 Helios Earth virtual clusters' per-minute sequences (``TracesMissing`` if one is absent)."""
    return [traces.path(f"helios_earth_2020/earth_{vc}_cluster_sequence_vc.csv.gz") for vc in traces.HELIOS_VCS]


def _minute_series(values: np.ndarray, start: pd.Timestamp) -> pd.Series:
    index = pd.date_range(start, periods=len(values), freq="1min", tz="UTC")
    return pd.Series(np.asarray(values, dtype=np.float64), index=index)


@functools.cache
def helios_running_gpus() -> pd.Series:
    """Helios Earth: running GPUs summed over the 16 published VCs, per minute (May 2020)."""
    total: pd.Series | None = None
    for path in helios_paths():
        frame = pd.read_csv(path, usecols=["time", "running_gpu_num"])
        part = pd.Series(
            frame["running_gpu_num"].to_numpy(dtype=np.float64),
            index=pd.DatetimeIndex(pd.to_datetime(frame["time"]), tz="UTC"),
        )
        total = part if total is None else total.add(part, fill_value=0.0)
    assert total is not None
    return total.asfreq("1min").astype(np.float64)


@functools.cache
def _alibaba_pods() -> pd.DataFrame:
    return pd.read_csv(traces.path("alibaba_gpu_v2023/openb_pod_list_default.csv.gz"))


def _alibaba_window() -> tuple[int, int]:
    pods = _alibaba_pods()
    return int(pods.deletion_time.min() // 60), int(pods.deletion_time.max() // 60) + 1


@functools.cache
def alibaba_running_gpus() -> pd.Series:
    """Alibaba v2023 default: whole GPUs (num_gpu) requested by running pods, per minute."""
    pods = _alibaba_pods()
    running = pods[pods.scheduled_time.notna()]
    t0, t1 = _alibaba_window()
    delta = np.zeros(t1 - t0 + 1)
    starts = np.clip(running.scheduled_time // 60 - t0, 0, t1 - t0).astype(int)
    ends = np.clip(running.deletion_time // 60 - t0, 0, t1 - t0).astype(int)
    np.add.at(delta, starts, running.num_gpu)
    np.add.at(delta, ends, -running.num_gpu)
    return _minute_series(np.cumsum(delta[:-1]), ALIBABA_ORIGIN + pd.Timedelta(minutes=t0))


@functools.cache
def alibaba_pod_creations() -> pd.Series:
    """Alibaba v2023 default: pod creations per minute inside the observation window."""
    pods = _alibaba_pods()
    t0, t1 = _alibaba_window()
    minute = (pods.creation_time // 60).astype(int)
    minute = minute[(minute >= t0) & (minute < t1)] - t0
    counts = np.bincount(minute.to_numpy(), minlength=t1 - t0)
    return _minute_series(counts, ALIBABA_ORIGIN + pd.Timedelta(minutes=t0))


@functools.cache
def genai_lora_requests() -> pd.Series:
    """Alibaba GenAI LoRA trace: image-generation requests per minute, zeros where none arrived."""
    frame = pd.read_csv(traces.path("alibaba_genai_v2026/lora_request_trace.csv.gz"), usecols=["gmt_create"])
    created = pd.to_datetime(frame["gmt_create"], format="mixed").dt.floor("min")
    counts = created.value_counts().sort_index()
    index = pd.date_range(counts.index.min(), counts.index.max(), freq="1min")
    per_minute = counts.reindex(index, fill_value=0).astype(np.float64)
    per_minute.index = per_minute.index.tz_localize("UTC")
    return per_minute


TRACES: dict[str, Callable[[], pd.Series]] = {
    "helios_running_gpus": helios_running_gpus,
    "alibaba_running_gpus": alibaba_running_gpus,
    "genai_lora_requests_per_min": genai_lora_requests,
    "alibaba_pod_creations_per_min": alibaba_pod_creations,
}


def trace(name: str, step: str = "5min") -> pd.Series:
    """A goal trace aggregated by mean to ``step`` (bins labelled by their start)."""
    series = TRACES[name]()
    out = series.resample(step, label="left", closed="left").mean()
    out.name = name
    return out.astype(np.float64)


def write_csv(series: pd.Series, path: Path) -> Path:
    """Write ``series`` in the backtest CSV format (RFC3339 ``timestamp``, ``value``; empty = gap)."""
    frame = pd.DataFrame({"timestamp": series.index.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": series.to_numpy()})
    frame.to_csv(path, index=False, na_rep="")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--step", default="1min", help="aggregation step of the written files")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in TRACES:
        path = write_csv(trace(name, args.step), args.out / f"{name}.csv.gz")
        print(path)


if __name__ == "__main__":
    main()
