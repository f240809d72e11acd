"""Service-level targets on every GPU trace: what ``auto-slo`` attains and costs against the heuristics
an operator tunes walk-forward to the same target.

    PYTHONPATH=. .venv/bin/python -m benchmarks.slo_attainment --out /tmp/slo [--traces helios,alibaba,dlrm,genai]
        [--hpa-tolerance up=0,down=0.05] [--extra "--tune-restart-burn 3"]

For each trace, ``gpu-autoscaler simulate`` runs ``reactive``, and ``auto-slo:T``, ``static_buffer@T``,
``scheduled_buffer@T`` (a static buffer plus a cron scaler for the declared windows) and
``reactive_max@T`` for T = 1 % and 0.3 % of minutes with any GPU short (5-minute lead time, the
service's 90 s margin, 7 days of warm-up, 2 workers). Each run's JSON is written to ``--out``; a
Markdown table is printed: per target, the level each policy attained and its GPU-hours, whether
auto-slo attained at most 1.25 x the target, and whether it provisioned no more GPU-hours than every
tuned heuristic that met the target.

The traces (../shared/data, README there):
- ``helios``: Helios Earth running GPUs per minute, with the README's nightly 16-GPU window;
- ``alibaba``: the Alibaba v2023 pod list (``--pods``), with the same window;
- ``dlrm``: Alibaba's disaggregated DLRM inference GPU instances (``gpu_request`` each), as an
  ``arrival,duration,gpus`` pod list: alive from ``scheduled_time`` (0 when it existed before the
  trace) to ``deletion_time`` (the trace's end when still alive);
- ``genai``: Alibaba GenAI LoRA requests, busy GPUs per minute (``exec_time_seconds`` of the
  requests starting in the minute / 60), on 1-GPU nodes.
The GenAI duty-cycle files (one day) and the Azure LLM traces (one hour) are too short for 7 days of
warm-up and a week of walk-forward tuning.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tests import traces
from tests.data_helpers import helios_running_gpus, write_csv

TARGETS = ("1%", "0.3%")
RIVALS = ("auto-slo:", "static_buffer@", "scheduled_buffer@", "reactive_max@")
COMMON = (
    "--step", "1m", "--lead-time", "5m", "--warmup", "7d", "--consolidate-after", "10m",
    "--workers", "2", "--format", "json",
)  # fmt: skip


def dlrm_pods(out: Path) -> Path:
    frame = pd.read_csv(traces.path("alibaba_dlrm_v2025/disaggregated_DLRM_trace.csv.gz"))
    end = float(np.nanmax(frame[["creation_time", "scheduled_time", "deletion_time"]].to_numpy()))
    gpu = frame[frame.gpu_request > 0]
    arrival = gpu.scheduled_time.fillna(0.0)
    duration = gpu.deletion_time.fillna(end) - arrival
    path = out / "dlrm_gpu_instances.csv"
    pd.DataFrame({"arrival": arrival, "duration": duration, "gpus": gpu.gpu_request}).to_csv(path, index=False)
    return path


def genai_busy_gpus(out: Path) -> Path:
    frame = pd.read_csv(
        traces.path("alibaba_genai_v2026/lora_request_trace.csv.gz"), usecols=["gmt_create", "exec_time_seconds"]
    )
    minute = pd.to_datetime(frame.gmt_create, utc=True).dt.floor("min")
    busy = frame.groupby(minute).exec_time_seconds.sum() / 60.0
    busy = busy.reindex(pd.date_range(busy.index.min(), busy.index.max(), freq="1min"), fill_value=0.0)
    return write_csv(busy, out / "genai_lora_busy_gpus.csv.gz")


def trace_arguments(name: str, out: Path) -> list[str]:
    window = ["--schedule", "0 2 * * *;16;2h"]
    if name == "helios":
        return ["--input", str(write_csv(helios_running_gpus(), out / "helios_running_gpus.csv.gz")), *window]
    if name == "alibaba":
        return ["--pods", str(traces.path("alibaba_gpu_v2023/openb_pod_list_default.csv.gz")), *window]
    if name == "dlrm":
        return ["--pods", str(dlrm_pods(out))]
    if name == "genai":
        return ["--input", str(genai_busy_gpus(out)), "--gpus-per-node", "1"]
    raise SystemExit(f"unknown trace {name!r}: helios, alibaba, dlrm or genai")


def simulate_arguments(
    name: str, out: Path, policies: str, hpa_tolerance: str | None = None, extra: Sequence[str] = ()
) -> list[str]:
    """``gpu-autoscaler simulate``'s arguments for a trace, with the settings every SLO benchmark uses
    (and ``extra`` options)."""
    arguments = ["simulate", *trace_arguments(name, out), *COMMON, *extra]
    if "--gpus-per-node" not in arguments:
        arguments += ["--gpus-per-node", "8"]
    arguments += ["--policies", policies]
    if hpa_tolerance:
        arguments += ["--hpa-tolerance", hpa_tolerance]
    return arguments


def policies() -> str:
    return ",".join(["reactive"] + [f"{name}{target}" for target in TARGETS for name in RIVALS])


def rows(name: str, report: dict[str, Any]) -> list[str]:
    lines = []
    for target in TARGETS:
        value = float(target.rstrip("%")) / 100
        slo = report["policies"][f"auto-slo:{target}"]
        check = report["service_levels"][f"auto-slo:{target}"]
        cells = [f"`auto-slo:{target}` {slo['attained']:.3%} / {slo['provisioned_gpu_hours']:,.0f}"]
        for rival, figures in check["tuned_heuristics"].items():
            cells.append(f"`{rival}` {figures['attained']:.3%} / {figures['provisioned_gpu_hours']:,.0f}")
        within = slo["attained"] <= 1.25 * value
        cheapest = check["cheapest_tuned_heuristic_that_met"]
        reduction = check["idle_reduction_vs_cheapest"]
        idle = "-" if reduction is None else f"{reduction:+.1%}"
        verdict = "yes" if check["no_costlier_than_any_that_met"] else "**no**"
        lines.append(
            f"| {name} | {target} | {' | '.join(cells)} | {'yes' if within else '**no**'} | {verdict} "
            f"({cheapest or 'none met'}) | {idle} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--traces", default="helios,alibaba,dlrm,genai")
    parser.add_argument(
        "--hpa-tolerance", help="simulate's --hpa-tolerance (default: the controller's 0.1; shipped: up=0,down=0.05)"
    )
    parser.add_argument("--extra", default="", help="more simulate options for every run (a rule to compare)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    table = [
        "| trace | target | auto-slo: attained / GPU-hours | static_buffer@ | scheduled_buffer@ | reactive_max@ | "
        "within 1.25x | no costlier than every tuned heuristic that met it (cheapest) | idle GPU-hours vs that one |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in args.traces.split(","):
        started = time.perf_counter()
        command = [
            sys.executable,
            "-m",
            "autoscaler",
            *simulate_arguments(name, args.out, policies(), args.hpa_tolerance, shlex.split(args.extra)),
        ]
        print("$", " ".join(command), file=sys.stderr)
        completed = subprocess.run(command, capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            raise SystemExit(f"{name}: simulate failed: {completed.stderr[-2000:]}")
        (args.out / f"{name}.json").write_text(completed.stdout)
        report = json.loads(completed.stdout)
        table += rows(name, report)
        print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    print("\n".join(table))


if __name__ == "__main__":
    main()
