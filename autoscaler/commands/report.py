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

if TYPE_CHECKING:  # heavy: imported when the command runs, not for --help
    import pandas as pd

    from autoscaler.simulation.runner import SimulationConfig

SERVICE_POLICY = "auto:0.9"  # gpu_headroom at the 0.9 quantile, the service's default
DEFAULT_POLICIES = f"reactive,static_buffer:8,reactive_max:60m,holt_winters,{SERVICE_POLICY}"
SCORED_AT_LEAST = timedelta(days=1)
WARMUP_BOUNDS = (timedelta(days=1), timedelta(days=7))


def _duration(ctx: click.Context, param: click.Parameter, value: str) -> timedelta:
    from forecast.durations import parse_positive_duration

    try:
        return parse_positive_duration(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


@click.command("report")
@click.option("--prometheus-url", required=True, metavar="URL", help="Prometheus with kube-state-metrics history")
@click.option("--since", default="30d", show_default=True, callback=_duration, help="history to replay")
@click.option("--output", "output", required=True, type=click.Path(path_type=Path, dir_okay=False), help="HTML file")
@click.option("--lead-time", default="5m", show_default=True, callback=_duration, help="node lead time")
@click.option("--gpus-per-node", default=8, show_default=True, type=integer(1, 64))
@click.option("--gpu-hour-price", default=4.0, show_default=True, type=decimal(0), help="cost of one GPU-hour")
@click.option("--policies", default=DEFAULT_POLICIES, show_default=True, help="comma-separated NAME[:PARAMETER]")
@click.option(
    "--warmup",
    default=None,
    callback=lambda ctx, param, value: None if value is None else _duration(ctx, param, value),
    help="history that only trains the forecasters [default: a quarter of the history, 1d to 7d]",
)
@click.option("--workers", default=1, show_default=True, type=integer(1, 64), help="processes")
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
    query_timeout: timedelta,
) -> None:
    """Write an HTML report: what the service would have served over your Prometheus's history, per
    node pool, against reactive (what happened) and the heuristics.

    Read-only: it reads the Prometheus and nothing else (docs/try-it.md)."""
    import pandas as pd
    import uvloop

    from autoscaler.simulation.policies import parse_policies
    from autoscaler.simulation.what_if import ReportContext, render_html, simulate_pools

    if not output.parent.is_dir():
        raise click.BadParameter(f"directory {output.parent} does not exist", param_hint="--output")
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
    context = ReportContext(prometheus_url, start, end, SERVICE_POLICY, gpu_hour_price)
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
            signals = await prometheus.backfill(gpu_query(), max(found.history_start, now - since), now)
        except TrialError as error:
            raise CommandFailed(str(error)) from None
        except PrometheusError as error:
            raise CommandFailed(f"cannot read the GPU requests from Prometheus at {url}: {error}") from None
    series = {signal.labels.get(NODEPOOL_LABEL, ""): signal.series for signal in signals}
    series = {pool: values for pool, values in series.items() if values.notna().any()}
    if not series:
        raise CommandFailed(f"Prometheus at {url}: no GPUs requested in any node pool over the last {since}")
    return series


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
