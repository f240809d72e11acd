"""Small fixtures cut from the public traces, committed in ``tests/data/traces/`` (README there).

Tests that need only a slice of a trace read it from here, so they run without the trace cache.
``tests/test_trace_registry.py`` checks that each committed file equals its derivation from the full
traces. To write them again (the traces must be in the cache, ``tests/traces.py``):

    .venv/bin/python -m tests.trace_slices
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from tests import data_helpers, traces

DIRECTORY = Path(__file__).resolve().parent / "data" / "traces"
STEPS_PER_DAY = 288  # 5-minute steps


def helios_10d() -> pd.Series:
    """The last ten days of Helios Earth running GPUs at 5-minute means (enough for every model)."""
    return data_helpers.trace("helios_running_gpus").iloc[-10 * STEPS_PER_DAY :]


def lora_5m() -> pd.Series:
    """GenAI LoRA requests per minute at 5-minute means (23 days, a clear daily cycle)."""
    return data_helpers.trace("genai_lora_requests_per_min")


def genai_per_replica() -> pd.DataFrame:
    """Alibaba GenAI Stable-Diffusion serving: per sample, mean GPU duty cycle over pods and QPS per pod."""
    duty = pd.read_csv(traces.path("alibaba_genai_v2026/pod_gpu_duty_cycle_anon.csv.gz"))
    qps = pd.read_csv(traces.path("alibaba_genai_v2026/qps.csv.gz"))
    per_sample = duty.groupby("timestamp_anon").agg(utilization=("value", "mean"), pods=("container_ip", "nunique"))
    per_sample = per_sample.join(qps.groupby("timestamp_anon")["value"].sum().rename("qps"), how="inner")
    per_sample["qps_per_pod"] = per_sample["qps"] / per_sample["pods"]
    return per_sample


# file name -> (derivation, the derived series' name)
SERIES: dict[str, tuple[Callable[[], pd.Series], str]] = {
    "helios_running_gpus_5m_last10d": (helios_10d, "helios_running_gpus"),
    "genai_lora_requests_per_min_5m": (lora_5m, "genai_lora_requests_per_min"),
}
FRAMES: dict[str, Callable[[], pd.DataFrame]] = {"genai_serving_per_sample": genai_per_replica}


def _file(name: str) -> Path:
    return DIRECTORY / f"{name}.csv.gz"


def series(name: str) -> pd.Series:
    """A committed 5-minute series as the derivation returns it (UTC index with its frequency)."""
    frame = pd.read_csv(_file(name))
    index = pd.DatetimeIndex(pd.to_datetime(frame["timestamp"], utc=True)).rename(None)
    values = pd.Series(frame["value"].to_numpy(np.float64), index=index, name=SERIES[name][1])
    return values.asfreq("5min")


def frame(name: str) -> pd.DataFrame:
    return pd.read_csv(_file(name), index_col=0)


def write() -> list[Path]:
    DIRECTORY.mkdir(parents=True, exist_ok=True)
    written = [data_helpers.write_csv(derive(), _file(name)) for name, (derive, _) in SERIES.items()]
    for name, derive_frame in FRAMES.items():
        derive_frame().to_csv(_file(name))
        written.append(_file(name))
    return written


if __name__ == "__main__":
    if absent := traces.missing():
        sys.exit(traces.missing_message(absent))
    for path in write():
        print(path)
