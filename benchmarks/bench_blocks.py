"""CPU time of some of bench_simulate's reselection periods, in one process: compares commits on a
shared machine, where wall-clock timings follow the load.

    git archive COMMIT | tar -x -C /tmp/tree-COMMIT
    .venv/bin/python benchmarks/bench_blocks.py --tree /tmp/tree-COMMIT [--blocks 10] [--first 70]

Runs ``run_block`` (a full selection and fit, a forecast from the fitted models at every 5-minute
step, the served value at every step) for ``--blocks`` of the month's 6-hour periods of the
``auto:0.9,auto:0.99`` group and of ``holt_winters``, with the simulator's workers' one BLAS
thread, on the pre-derived Helios trace (tests/data_helpers.py writes it). Prints the CPU time and,
for contrast, the wall-clock seconds the simulator reports for the same work.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# Where tests/data_helpers.py --out /tmp/traces writes the pre-derived traces (the README uses them).
TRACE = Path("/tmp/traces/helios_running_gpus.csv.gz")  # noqa: S108 - read only, a documented location


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1], help="the code to time")
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--first", type=int, default=70, help="the first 6-hour period timed")
    parser.add_argument("--trace", type=Path, default=TRACE)
    args = parser.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))  # the tree's packages before the installed ones
    import pandas as pd

    from autoscaler.refresh.workers import single_threaded_libraries
    from autoscaler.simulation.forecasting import ForecastCadence, forecast_groups, plan_blocks, run_block
    from autoscaler.simulation.inputs import demand_workload, parse_schedule
    from autoscaler.simulation.policies import parse_policies

    single_threaded_libraries()
    windows = (parse_schedule("0 2 * * *;16;2h"),)
    workload = demand_workload(args.trace, pd.Timedelta(minutes=1), windows, 8)
    first_step = 7 * 1440 - 60  # bench_simulate's: a 7-day warm-up less the hour the cluster settles
    for group in forecast_groups(parse_policies("holt_winters,auto:0.9,auto:0.99")):
        jobs = plan_blocks(group, workload, first_step, ForecastCadence())[args.first : args.first + args.blocks]
        cpu, wall = time.process_time(), time.perf_counter()
        fits = forecasts = 0.0
        for job in jobs:
            results = run_block(job)
            fits += sum(sum(result.fit_seconds) for result in results)
            forecasts += sum(result.forecast_seconds for result in results)
        print(
            f"{args.tree} {group[0].text}: {len(jobs)} periods, CPU {time.process_time() - cpu:.2f} s; "
            f"wall clock {time.perf_counter() - wall:.2f} s, of which fits {fits:.2f} s, forecasts {forecasts:.2f} s"
        )


if __name__ == "__main__":
    main()
