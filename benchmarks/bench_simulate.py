"""Simulator benchmark: one month of Helios Earth demand at 1-minute steps, as the issue runs it.

    .venv/bin/python benchmarks/bench_simulate.py [--workers 2] [--core-only] [--refit-every 1h]

As the service: a full selection and fit every 6 h, and a forecast from the newest data with the
fitted models at every forecast step (``--refit-every`` adds refits of the selected models).

The input is the real Helios Earth trace (running GPUs summed over the 16 published VCs, May 2020;
tests/data_helpers.py), 44,640 one-minute steps; the first 7 days only train the forecasters. Goal:
the whole run under 60 s on 2 cores. ``--core-only`` drops the forecasting policies to time the
HPA / node-pool loops alone. Prints the wall time and where it went.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoscaler.commands.simulate import DEFAULT_POLICIES
from autoscaler.config.settings import ForecastSettings
from autoscaler.simulation.forecasting import ForecastCadence
from autoscaler.simulation.inputs import demand_workload, parse_schedule
from autoscaler.simulation.lead_times import parse_lead_time_distribution
from autoscaler.simulation.policies import parse_policies
from autoscaler.simulation.runner import SimulationConfig, simulate
from forecast.durations import parse_positive_duration
from tests import data_helpers, traces  # importable once the path above is set

GOAL_S = 60.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--policies", default=DEFAULT_POLICIES)
    parser.add_argument("--core-only", action="store_true", help="leave out holt_winters and auto:Q")
    parser.add_argument("--refit-every", default=None, help="default: none between selections")
    parser.add_argument("--reselect-every", default="6h")
    args = parser.parse_args()
    if absent := traces.missing():
        sys.exit(traces.missing_message(absent))
    specs = parse_policies(args.policies)
    if args.core_only:
        specs = tuple(spec for spec in specs if not spec.forecasting)
    with tempfile.TemporaryDirectory() as directory:
        path = data_helpers.write_csv(data_helpers.helios_running_gpus(), Path(directory) / "helios.csv.gz")
        started = time.perf_counter()
        workload = demand_workload(path, pd.Timedelta(minutes=1), (parse_schedule("0 2 * * *;16;2h"),), 8)
        read_s = time.perf_counter() - started
    refit_every = args.refit_every or args.reselect_every
    cadence = ForecastCadence(
        refit_every_s=parse_positive_duration(refit_every).total_seconds(),
        reselect_every_s=parse_positive_duration(args.reselect_every).total_seconds(),
    )
    config = SimulationConfig(
        gpus_per_node=8,
        lead_time_s=300.0,
        lead_margin_s=ForecastSettings().lead_time_margin.total_seconds(),  # the service's default
        warmup_s=7 * 86400.0,
        lead_distribution=parse_lead_time_distribution("fixed:5m"),
        consolidate_after_s=600.0,
        cadence=cadence,
    )
    result = simulate(workload, specs, config, workers=args.workers)
    total = time.perf_counter() - started
    days = workload.end_s / 86400
    scored = (result.period.end - result.period.scored_from) / 86400
    print(f"input: Helios Earth running GPUs, {workload.steps} steps of {workload.step_s:g} s ({days:.1f} days)")
    print(f"policies: {', '.join(spec.text for spec in specs)}; {args.workers} worker(s)")
    print(
        f"scored: {scored:.1f} days after a 7-day warm-up; refit every {refit_every}, reselect every "
        f"{args.reselect_every}"
    )
    print(f"read input: {read_s:.1f} s")
    for text, run in result.runs.items():
        fits = (
            f"; {len(run.fit_seconds)} fits, {sum(run.fit_seconds):.1f} s; forecasts {run.forecast_seconds:.1f} s"
            if run.fit_seconds
            else ""
        )
        print(f"  {text:22s} loop {run.outcome.seconds:5.1f} s{fits}")
    loops = sum(run.outcome.seconds for run in result.runs.values())
    fitting = sum(sum(run.fit_seconds) for run in result.runs.values())
    forecasting = sum(run.forecast_seconds for run in result.runs.values())
    print(
        # Wall-clock seconds inside the workers, summed: they grow with whatever else shares the cores.
        f"worker seconds in loops: {loops:.1f} s; in forecast fits: {fitting:.1f} s; "
        f"in forecasts from fitted models: {forecasting:.1f} s"
    )
    # Workers are reaped when simulate shuts its pool down, so their CPU time is counted here: less
    # sensitive to other jobs on the machine than the wall-clock figures.
    used = os.times()
    cpu = used.user + used.system + used.children_user + used.children_system
    print(f"CPU time, this process and its workers: {cpu:.1f} s")
    verdict = "met" if total < GOAL_S else "NOT met"
    print(f"simulated month wall time: {total:.1f} s (goal < {GOAL_S:g} s: {verdict})")


if __name__ == "__main__":
    main()
