"""``gpu-autoscaler report``: what the service would have served on your Prometheus's history, as HTML.

Read-only, like ``serve --prometheus-url``: the GPUs requested per node pool (kube-state-metrics) are
pulled over ``--since`` and replayed through the simulator (``autoscaler.simulation.what_if``). The
Prometheus is checked first: one line and exit 1 when it cannot be reached, has no kube-state-metrics
or too short a history.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import click

from autoscaler.commands.errors import CommandFailed, writing
from autoscaler.commands.numbers import QUERY_TIMEOUT_HELP, PositiveDuration, decimal, integer
from autoscaler.defaults import DEFAULT_LEAD_TIME, DEMO_LEAD_TIME, minutes_text
from autoscaler.simulation.defaults import POLICIES_HELP, shown_list

if TYPE_CHECKING:  # heavy: imported when the command runs, not for --help
    import pandas as pd

    from adapters.prometheus.promql import SignalQuery
    from autoscaler.simulation.runner import SimulationConfig

SERVICE_POLICY = "auto:0.9"  # gpu_headroom at the 0.9 quantile, the service's default
DEFAULT_POLICIES = f"reactive,static_buffer:8,reactive_max:60m,holt_winters,{SERVICE_POLICY}"
SCORED_AT_LEAST = timedelta(days=1)
WARMUP_BOUNDS = (timedelta(days=1), timedelta(days=7))
HELP = f"""Write an HTML report: what the service would have served over your Prometheus's history, per
node pool, against reactive (what happened) and the heuristics.

Read-only: it reads the Prometheus and nothing else (docs/try-it.md).

{POLICIES_HELP}"""


def _duration(ctx: click.Context, param: click.Parameter, value: str) -> timedelta:
    from forecast.durations import parse_positive_duration

    try:
        return parse_positive_duration(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


@click.command("report", help=HELP)
@click.option("--prometheus-url", required=True, metavar="URL", help="Prometheus with kube-state-metrics history")
@click.option("--since", default="30d", show_default=True, callback=_duration, help="history to replay")
@click.option("--output", "output", required=True, type=click.Path(path_type=Path, dir_okay=False), help="HTML file")
@click.option(
    "--lead-time",
    default=minutes_text(DEFAULT_LEAD_TIME),
    show_default=True,
    callback=_duration,
    help="node lead time the policies plan for: the service's forecast.default_lead_time, what it plans for "
    f"until NodeClaims teach it a pool's launch time (the demo uses {minutes_text(DEMO_LEAD_TIME)}); give your "
    "nodes' launch time",
)
@click.option("--gpus-per-node", default=8, show_default=True, type=integer(1, 64))
@click.option("--gpu-hour-price", default=4.0, show_default=True, type=decimal(0), help="cost of one GPU-hour")
@click.option(
    "--policies",
    default=DEFAULT_POLICIES,
    help=f"comma-separated, with reactive and {SERVICE_POLICY} (Policies, above) "
    f"[default: {shown_list(DEFAULT_POLICIES)}]",
)
@click.option(
    "--warmup",
    default=None,
    callback=lambda ctx, param, value: None if value is None else _duration(ctx, param, value),
    help="history that only trains the forecasters [default: a quarter of the history, 1d to 7d]",
)
@click.option("--workers", default=1, show_default=True, type=integer(1, 64), help="processes")
@click.option(
    "--save-series",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="write each pool's GPUs requested here (CSV), for the simulate command the report prints per pool",
)
@click.option("--query-timeout", default="120s", show_default=True, type=PositiveDuration(), help=QUERY_TIMEOUT_HELP)
def report_command(
    prometheus_url: str,
    since: timedelta,
    output: Path,
    lead_time: timedelta,
    gpus_per_node: int,
    gpu_hour_price: float,
    policies: str,
    warmup: timedelta | None,
    workers: int,
    save_series: Path | None,
    query_timeout: timedelta,
) -> None:
    """HELP, above."""
    import pandas as pd
    import uvloop

    from autoscaler.simulation.policies import parse_policies
    from autoscaler.simulation.what_if import ReportContext, render_html, simulate_pools

    if not output.parent.is_dir():
        raise click.BadParameter(f"directory {output.parent} does not exist", param_hint="--output")
    if save_series is not None and not save_series.is_dir():
        raise click.BadParameter(f"directory {save_series} does not exist", param_hint="--save-series")
    try:
        specs = parse_policies(policies)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--policies") from None
    if SERVICE_POLICY not in {spec.text for spec in specs} or "reactive" not in {spec.text for spec in specs}:
        raise click.BadParameter(f"must hold reactive and {SERVICE_POLICY} (the service)", param_hint="--policies")
    needed = (warmup or WARMUP_BOUNDS[0]) + SCORED_AT_LEAST
    if since < needed:
        from autoscaler.checks.trial import span_text

        raise click.BadParameter(
            f"{span_text(since)} is shorter than the {span_text(needed)} the report needs (the warmup, then a "
            "day to score)",
            param_hint="--since",
        )
    series = uvloop.run(_pull(prometheus_url, since, needed, query_timeout))
    start = min(pd.Timestamp(values.dropna().index[0]) for values in series.values())  # _pull keeps none empty
    end = max(pd.Timestamp(values.index[-1]) for values in series.values())
    config = _config(end - start, warmup, lead_time, gpus_per_node)
    try:
        runs = simulate_pools(
            series, specs, config, gpu_hour_price=gpu_hour_price, workers=workers,
            on_pool=lambda pool: click.echo(f"simulating node pool {pool!r} ...", err=True),
        )  # fmt: skip
    except ValueError as error:  # InputError among them: the series pulled cannot be simulated
        raise CommandFailed(f"cannot simulate the history of Prometheus at {prometheus_url}: {error}") from None
    commands = _save_series(series, save_series, config, policies, gpus_per_node, gpu_hour_price)
    context = ReportContext(prometheus_url, start, end, SERVICE_POLICY, gpu_hour_price, commands)
    with writing(output):
        output.write_text(render_html(context, runs), encoding="utf-8")
    click.echo(f"{output}: {len(runs)} node pools, {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC")


async def _pull(url: str, since: timedelta, needed: timedelta, query_timeout: timedelta) -> dict[str, pd.Series]:
    """Each node pool's GPUs requested over ``since`` (from its first point), after the checks."""
    from datetime import UTC, datetime

    from adapters.prometheus.client import PrometheusClientSettings, PrometheusError, PrometheusSource
    from adapters.types import NODEPOOL_LABEL
    from autoscaler.checks.trial import TrialError, check_prometheus, gpu_query

    try:
        settings = PrometheusClientSettings(url=url, timeout_s=query_timeout.total_seconds())
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--prometheus-url") from None
    now = datetime.now(UTC)
    async with PrometheusSource(settings) as prometheus:
        try:
            found = await check_prometheus(prometheus, now, since, needed)
            start = max(found.history_start, now - since)
            # As serve does: the shipped recording rule's series when they cover the range, several times
            # cheaper for Prometheus than the raw ones (docs/benchmarks/query-cost.md).
            query = await prometheus.read_recorded_if_held(gpu_query(), start)
            click.echo(f"reading the GPUs requested from {_read_from(query)} ...", err=True)
            signals = await prometheus.backfill(query, start, now)
        except TrialError as error:
            raise CommandFailed(str(error)) from None
        except PrometheusError as error:
            raise CommandFailed(f"cannot read the GPU requests from Prometheus at {url}: {error}") from None
    series = {signal.labels.get(NODEPOOL_LABEL, ""): signal.series for signal in signals}
    series = {pool: values for pool, values in series.items() if values.notna().any()}
    if not series:
        raise CommandFailed(f"Prometheus at {url}: no GPUs requested in any node pool over the last {since}")
    return series


def _read_from(query: SignalQuery) -> str:
    from adapters.prometheus.presets import RECORDED_GPUS_REQUESTED

    if RECORDED_GPUS_REQUESTED in query.promql:
        return f"the recording rule {RECORDED_GPUS_REQUESTED}"
    return "the raw kube-state-metrics series (the recording rule does not cover the range)"


def _save_series(
    series: dict[str, pd.Series],
    directory: Path | None,
    config: SimulationConfig,
    policies: str,
    gpus_per_node: int,
    gpu_hour_price: float,
) -> dict[str, str]:
    """Each pool's series written to ``directory`` (``--save-series``), and the ``simulate`` command that
    replays it, by pool."""
    if directory is not None:
        for pool, values in series.items():
            with writing(series_file(pool, directory)):
                write_series(values, series_file(pool, directory))
    return {
        pool: reproducing_command(series_file(pool, directory), config, policies, gpus_per_node, gpu_hour_price)
        for pool in series
    }


def series_file(pool: str, directory: Path | None) -> Path:
    """Where ``--save-series`` writes a pool's series (a label value is a safe file name; no pool is
    the Pending pods' series)."""
    return (directory or Path("SERIES-DIR")) / f"nodepool-{pool or '(none)'}.csv"


def write_series(values: pd.Series, path: Path) -> None:
    """``timestamp,value`` from the first point, gaps carrying the last value, as the report replays it."""
    observed = values.dropna()
    kept = values.loc[observed.index[0] :].ffill()
    frame = kept.rename("value").rename_axis("timestamp").reset_index()
    frame["timestamp"] = frame["timestamp"].map(lambda moment: moment.isoformat())
    frame.to_csv(path, index=False)


def reproducing_command(
    path: Path, config: SimulationConfig, policies: str, gpus_per_node: int, gpu_hour_price: float
) -> str:
    """The ``simulate`` command that replays a pool's saved series as this report did."""
    import shlex

    step, lead, warmup = (
        f"{int(seconds)}s" for seconds in (config.cadence.step_s, config.lead_time_s, config.warmup_s)
    )
    arguments = [
        "gpu-autoscaler", "simulate", "--input", str(path), "--unit-pods", "--step", step, "--forecast-step", step,
        "--lookback", f"{int(config.cadence.lookback_s)}s", "--lead-time", lead, "--warmup", warmup,
        "--gpus-per-node", str(gpus_per_node), "--consolidate-after", f"{int(config.consolidate_after_s)}s",
        "--gpu-hour-price", f"{gpu_hour_price:g}", "--policies", policies, "--format", "table",
    ]  # fmt: skip
    return shlex.join(arguments)


def _config(history: timedelta, warmup: timedelta | None, lead_time: timedelta, gpus_per_node: int) -> SimulationConfig:
    """The simulator as ``simulate`` runs it by default, on the service's 5-minute signal step."""
    from autoscaler.checks.trial import LOOKBACK, STEP, span_text
    from autoscaler.config.settings import ForecastSettings
    from autoscaler.simulation.forecasting import ForecastCadence
    from autoscaler.simulation.lead_times import parse_lead_time_distribution
    from autoscaler.simulation.runner import SimulationConfig

    low, high = WARMUP_BOUNDS
    chosen = warmup if warmup is not None else min(high, max(low, history / 4))
    if history < chosen + SCORED_AT_LEAST:
        raise CommandFailed(
            f"{span_text(history)} of history is too short for --warmup {span_text(chosen)} plus a day to "
            "score; give a shorter --warmup"
        )
    margin = ForecastSettings().lead_time_margin
    lead_s = lead_time.total_seconds()
    return SimulationConfig(
        gpus_per_node=gpus_per_node, lead_time_s=lead_s, lead_margin_s=margin.total_seconds(),
        warmup_s=chosen.total_seconds(),
        lead_distribution=parse_lead_time_distribution(f"fixed:{int(lead_s)}s"), consolidate_after_s=600.0,
        cadence=ForecastCadence(
            step_s=STEP.total_seconds(), lookback_s=LOOKBACK.total_seconds(), lead_s=lead_s + margin.total_seconds()
        ),
    )  # fmt: skip
