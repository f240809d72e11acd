"""Selection hysteresis (#18 item 3), measured: ``auto`` with and without a switch margin.

    .venv/bin/python benchmarks/hysteresis_measure.py backtest 6 0,0.05,0.1 /tmp/traces/helios_running_gpus.csv.gz,...
    SWITCH_MARGIN=0.05 .venv/bin/python benchmarks/hysteresis_measure.py simulate <simulate flags> --workers 1

``backtest ORIGIN_EVERY_HOURS MARGINS CSV_PATHS`` runs the README's backtest (5-minute steps, q = 0.9,
last 7 days) on each trace CSV for ``auto`` only (and naive_empirical, the yardstick),
each origin's selection keeping the previous origin's unless beaten by the margin; one JSON line per
trace and margin, with the 60-minute actuals and forecasts for a paired comparison.

``simulate`` runs ``gpu-autoscaler simulate`` with each reselection (every 6 h) keeping the previous
block's selection per quantile unless beaten by ``SWITCH_MARGIN``. Blocks must run in time order:
pass ``--workers 1``. The number of model changes per quantile goes to stderr at exit.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import sys
import time
from pathlib import Path

import pandas as pd

import autoscaler.simulation.forecasting as simulation_forecasting
from forecast.backtest import run_backtest_records, summarize
from forecast.engine import Selection, fit_select_many
from forecast.io import aggregate, read_series_csv


def backtest(every_hours: int, margins: list[float], traces: list[str]) -> None:
    step = pd.Timedelta("5min")
    for trace in traces:
        series = aggregate(read_series_csv(trace), step)
        for margin in margins:
            started = time.time()
            run = run_backtest_records(
                series,
                horizons={"15m": 3, "30m": 6, "60m": 12},
                quantile=0.9,
                origin_every=every_hours * 12,
                eval_steps=7 * 288,
                models=("naive_empirical",),
                switch_margin=margin,
            )
            summary = summarize(run)
            auto = summary["auto"]
            line = {
                "trace": Path(trace).name.split(".")[0],
                "every_h": every_hours,
                "margin": margin,
                "origins": summary["origins"],
                "auto_pinball": auto["pinball"],
                "ne_pinball_60m": summary["models"]["naive_empirical"]["pinball"]["60m"],
                "mae_60m": auto["mae"]["60m"],
                "coverage_60m": auto["coverage"]["60m"],
                "switches": sum(a != b for a, b in zip(run.selected, run.selected[1:], strict=False)),
                "distinct": len(set(run.selected)),
                "seconds": round(time.time() - started, 1),
                "actual_60m": run.records["auto"].actual["60m"],
                "upper_60m": run.records["auto"].upper["60m"],
                "selected": run.selected,
            }
            print(json.dumps(line), flush=True)


def simulate_with_hysteresis(margin: float) -> None:
    last: dict[float, str] = {}
    changes: dict[float, int] = {}
    original = simulation_forecasting.fit_block

    def fit_block(
        job: simulation_forecasting.BlockJob,
        history: pd.Series,
        previous: simulation_forecasting.Fitted | None,
    ) -> simulation_forecasting.Fitted:
        if job.holt_winters or previous is not None:  # Holt-Winters, or a refit within the block
            return original(job, history, previous)
        cadence = job.cadence
        results = fit_select_many(
            history,
            horizon_steps=cadence.horizon_steps,
            quantiles=(),
            policy_quantiles=[spec.quantile for spec in job.specs],
            lead_steps=cadence.lead_steps,
            seed=cadence.seed,
            time_budget_s=math.inf,
            incumbents=dict(last) if margin > 0 else None,
            switch_margin=margin,
        )
        chosen: dict[float, Selection] = {}
        for quantile, result in results.items():
            if result.selection is None:
                raise RuntimeError(f"no selection for quantile {quantile}")
            chosen[quantile] = result.selection
            changes[quantile] = changes.get(quantile, 0) + (quantile in last and last[quantile] != result.model)
            last[quantile] = result.model
        return chosen

    simulation_forecasting.fit_block = fit_block  # run_block looks it up here
    atexit.register(lambda: print(f"margin {margin} model changes per quantile: {changes}", file=sys.stderr))
    from autoscaler.commands.cli import main

    main()


if __name__ == "__main__":
    if sys.argv[1] == "backtest":
        backtest(int(sys.argv[2]), [float(m) for m in sys.argv[3].split(",")], sys.argv[4].split(","))
    else:
        simulate_with_hysteresis(float(os.environ.get("SWITCH_MARGIN", "0")))
