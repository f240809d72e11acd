"""``gpu-autoscaler backtest``: rolling-origin accuracy of every model on a CSV series."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from autoscaler.commands.numbers import decimal
from autoscaler.commands.output import emit
from autoscaler.commands.progress import progress_bar

if TYPE_CHECKING:  # the forecast engine (pandas, scikit-learn, statsmodels) is imported when the command runs
    from forecast.backtest import BacktestRun


def _table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from forecast.backtest import AUTO, METRICS

    table = Table(
        title=f"{report['input']}: {report['points']} points at {report['step_seconds']} s, "
        f"q={report['quantile']}, {report['origins']} origins"
    )
    table.add_column("model")
    table.add_column("horizon")
    for name in METRICS:
        table.add_column(name, justify="right")
    table.add_column("fit s (median)", justify="right")
    rows = [*report["models"].items(), (AUTO, report["auto"])]
    for name, scores in rows:
        for label in scores["mae"]:
            cells = [_cell(scores[metric][label]) for metric in METRICS]
            table.add_row(name, label, *cells, _cell(scores["fit_seconds_median"]))
    selected = ", ".join(f"{name}: {count}" for name, count in report["selected_counts"].items())
    console = Console()
    console.print(table)
    console.print(f"auto selected: {selected or 'nothing'}")


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _plot(run: BacktestRun, path: Path) -> None:
    """Actual vs forecast and the upper band of automatic selection at the longest horizon."""
    import matplotlib
    import numpy as np

    from forecast.backtest import AUTO

    matplotlib.use("Agg")  # no display: write a file
    import matplotlib.pyplot as plt

    label, steps = max(run.horizons.items(), key=lambda item: item[1])
    record = run.records[AUTO]
    times = np.asarray([(origin + run.step * steps).to_datetime64() for origin in run.origins])
    figure, axis = plt.subplots(figsize=(12, 4.5))
    axis.plot(times, np.asarray(record.actual[label]), "o-", color="black", label="actual", markersize=3)
    axis.plot(times, np.asarray(record.mean[label]), "s--", color="tab:blue", label="forecast", markersize=3)
    axis.fill_between(
        times,
        np.asarray(record.mean[label]),
        np.asarray(record.upper[label]),
        color="tab:orange",
        alpha=0.3,
        label=f"upper band (q={run.quantile})",
    )
    axis.set_title(f"{Path(run.input).name}: auto forecast {label} ahead, every origin")
    axis.set_ylabel("value")
    axis.legend(loc="upper left")
    figure.autofmt_xdate()
    figure.tight_layout()
    figure.savefig(path, format="png", dpi=100)
    plt.close(figure)


@click.command("backtest")
@click.option("--input", "input_path", required=True, type=click.Path(path_type=Path), help="CSV(.gz): timestamp,value")
@click.option("--step", default="5m", show_default=True, help="aggregation step (mean per step)")
@click.option("--horizons", default="15m,30m,60m", show_default=True, help="comma-separated horizons")
@click.option("--quantile", default=0.9, show_default=True, type=decimal(), help="policy quantile")
@click.option("--format", "output_format", type=click.Choice(["json", "table"]), default="json", show_default=True)
@click.option("--origin-every", default="6h", show_default=True, help="spacing of rolling origins")
@click.option("--eval-days", default="7d", show_default=True, help="evaluation period at the end of the series")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path), default=None, help="write a PNG here")
def backtest(
    input_path: Path,
    step: str,
    horizons: str,
    quantile: float,
    output_format: str,
    origin_every: str,
    eval_days: str,
    plot_path: Path | None,
) -> None:
    """Rolling-origin backtest of every model and of automatic selection."""
    import pandas as pd

    from forecast.backtest import run_backtest_records, summarize
    from forecast.durations import parse_positive_duration, steps_in
    from forecast.io import SeriesFileError, aggregate, read_series_csv

    try:
        step_delta = pd.Timedelta(parse_positive_duration(step))
        horizon_steps = {
            label.strip(): steps_in(parse_positive_duration(label), step_delta) for label in horizons.split(",")
        }
        every = steps_in(parse_positive_duration(origin_every), step_delta)
        # A bare number of days is accepted too (``--eval-days 7``).
        eval_text = eval_days if not eval_days.strip().isdigit() else f"{eval_days.strip()}d"
        eval_steps = steps_in(parse_positive_duration(eval_text), step_delta)
        if not 0.0 < quantile < 1.0:
            raise ValueError(f"--quantile must be between 0 and 1, got {quantile}")
        series = aggregate(read_series_csv(input_path), step_delta)
        with progress_bar("backtest origins") as progress:
            run = run_backtest_records(
                series,
                horizons=horizon_steps,
                quantile=quantile,
                origin_every=every,
                eval_steps=eval_steps,
                input_name=str(input_path),
                progress=progress,
            )
    except (SeriesFileError, ValueError, TypeError) as error:
        # Flags, the file and a series too short for these flags: all the input's fault.
        raise click.UsageError(str(error)) from None
    emit(summarize(run), output_format, _table, plot_path, lambda path: _plot(run, path))
