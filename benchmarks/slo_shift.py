"""A level shift: demand scaled by 1.3 from one day on, and what each walk-forward tuned policy attained
in the 7 days after it.

    PYTHONPATH=. .venv/bin/python -m benchmarks.slo_shift --out /tmp/slo-shift [--traces helios,alibaba,dlrm,genai]
        [--targets 1%,0.3%] [--shift-day 14] [--policies auto-slo:T,static_buffer@T] [--hpa-tolerance up=0,down=0.05]
        [--extra "--tune-gain 1"]

For each trace (the four of ``benchmarks.slo_attainment``), the 7 days before the shift day (from the
trace's first day: day 14 by default) and the 7 days after it are cut out; from the shift on, a
fluid trace's GPUs are multiplied by 1.3, and a pod trace gets a copy of 30 % of its pods (a seeded
draw): of those arriving after the shift, and of those running at it (from the shift, for the time
they had left). ``gpu-autoscaler simulate`` then runs each policy with the first 7 days as warm-up,
so the tuned policies decide from the shift on, on 7 days before it: the scored week is exactly the 7
days after the shift. The table gives what each attained there and its GPU-hours; the issue's check
is ``auto-slo`` at most 2 x its target. ``--extra`` passes more options to every run (compare a rule).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from autoscaler.simulation.inputs import alibaba_pods as read_alibaba_pods
from benchmarks.slo_attainment import COMMON, dlrm_pods, genai_busy_gpus
from tests import traces
from tests.data_helpers import helios_running_gpus, write_csv

DAY_S = 86400.0
SCALE = 1.3
SEED = 20261206
WINDOW = ["--schedule", "0 2 * * *;16;2h"]


def shifted_series(series: pd.Series, shift_day: int) -> pd.Series:
    start = series.index[0].floor("1D") + pd.Timedelta(days=shift_day)
    cut = series[(series.index >= start - pd.Timedelta(days=7)) & (series.index < start + pd.Timedelta(days=7))]
    shifted: pd.Series = cut.where(cut.index < start, cut * SCALE)
    return shifted


def shifted_pods(pods: pd.DataFrame, shift_day: int) -> pd.DataFrame:
    """``arrival,duration,gpus`` pods cut to the 7 days either side of the shift, re-based to the cut's
    start, with a copy of 30 % of those arriving after the shift or running at it."""
    origin = float(pods.arrival.min())
    shift_s = origin + shift_day * DAY_S
    begin, end = shift_s - 7 * DAY_S, shift_s + 7 * DAY_S
    finish = pods.arrival + pods.duration
    kept = pods[(pods.arrival < end) & (finish > begin)].copy()
    running_before = kept.arrival < begin  # running when the cut starts: from its start, for what is left
    kept.loc[running_before, "duration"] = finish[kept.index][running_before] - begin
    kept.loc[running_before, "arrival"] = begin
    rng = np.random.default_rng(SEED)
    after = kept[(kept.arrival + kept.duration > shift_s)]
    copies = after[rng.random(len(after)) < SCALE - 1.0].copy()
    late_start = copies.arrival < shift_s  # running at the shift: the copy arrives at it
    copies.loc[late_start, "duration"] = copies.arrival[late_start] + copies.duration[late_start] - shift_s
    copies.loc[late_start, "arrival"] = shift_s
    both = pd.concat([kept, copies], ignore_index=True).sort_values("arrival", kind="stable")
    both["arrival"] -= begin
    both["duration"] = np.minimum(both.duration, end - begin - both.arrival)
    return both[both.duration > 0]


def alibaba_pods() -> pd.DataFrame:
    """The Alibaba v2023 pod list's GPU pods as ``simulate --pods`` reads them."""
    arrival, duration, gpus = read_alibaba_pods(traces.path("alibaba_gpu_v2023/openb_pod_list_default.csv.gz"))
    return pd.DataFrame({"arrival": arrival, "duration": duration, "gpus": gpus})


def trace_arguments(name: str, out: Path, shift_day: int) -> list[str]:
    if name == "helios":
        series = shifted_series(helios_running_gpus(), shift_day)
        return ["--input", str(write_csv(series, out / "helios_shifted.csv.gz")), *WINDOW, "--gpus-per-node", "8"]
    if name == "genai":
        busy = pd.read_csv(genai_busy_gpus(out), parse_dates=["timestamp"]).set_index("timestamp")["value"]
        series = shifted_series(busy, shift_day)
        return ["--input", str(write_csv(series, out / "genai_shifted.csv.gz")), "--gpus-per-node", "1"]
    if name in ("alibaba", "dlrm"):
        pods = alibaba_pods() if name == "alibaba" else pd.read_csv(dlrm_pods(out))
        path = out / f"{name}_shifted_pods.csv"
        shifted_pods(pods, shift_day).to_csv(path, index=False)
        return ["--pods", str(path), *(WINDOW if name == "alibaba" else []), "--gpus-per-node", "8"]
    raise SystemExit(f"unknown trace {name!r}: helios, alibaba, dlrm or genai")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--traces", default="helios,alibaba,dlrm,genai")
    parser.add_argument("--targets", default="1%,0.3%")
    parser.add_argument("--shift-day", type=int, default=14)
    parser.add_argument("--policies", default="auto-slo:T,static_buffer@T")
    parser.add_argument("--hpa-tolerance", default="up=0,down=0.05")
    parser.add_argument("--extra", default="", help="more simulate options for every run")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    targets = args.targets.split(",")
    policies = ",".join(policy.replace("T", target) for target in targets for policy in args.policies.split(","))
    print("| trace | target | " + " | ".join(args.policies.split(",")) + " |")
    print("|---|---|" + "---|" * len(args.policies.split(",")))
    for name in args.traces.split(","):
        started = time.perf_counter()
        command = [
            sys.executable, "-m", "autoscaler", "simulate", *trace_arguments(name, args.out, args.shift_day),
            *COMMON, "--policies", policies, "--hpa-tolerance", args.hpa_tolerance, *shlex.split(args.extra),
        ]  # fmt: skip
        print("$", " ".join(command), file=sys.stderr)
        completed = subprocess.run(command, capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            raise SystemExit(f"{name}: simulate failed: {completed.stderr[-2000:]}")
        (args.out / f"{name}.json").write_text(completed.stdout)
        report = json.loads(completed.stdout)["policies"]
        for target in targets:
            cells = []
            for policy in args.policies.split(","):
                figures = report[policy.replace("T", target)]
                cells.append(f"{figures['attained']:.3%} / {figures['provisioned_gpu_hours']:,.0f}")
            print(f"| {name} | {target} | " + " | ".join(cells) + " |", flush=True)
        print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
