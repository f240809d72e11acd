"""``gpu-autoscaler forecast``: what the service would serve for one PromQL query, as of any moment."""

from __future__ import annotations

import asyncio
import json
import math
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import click

from autoscaler.commands.errors import CommandFailed
from autoscaler.commands.numbers import decimal

if TYPE_CHECKING:  # imported when the command runs, so that `--help` stays light
    import numpy as np
    import pandas as pd

    from adapters.prometheus.client import PrometheusClientSettings
    from adapters.prometheus.promql import SignalQuery
    from forecast.engine import EngineResult


def parse_moment(text: str | None) -> datetime:
    """RFC 3339 or Unix seconds; ``None`` is now."""
    if text is None:
        return datetime.now(UTC)
    try:
        return datetime.fromtimestamp(float(text), tz=UTC)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is neither RFC 3339 (2026-11-17T08:00:00Z) nor Unix seconds") from None
    if moment.tzinfo is None:
        raise click.BadParameter(f"{text!r} has no time zone; add Z or an offset such as +01:00")
    return moment.astimezone(UTC)


def _duration(ctx: click.Context, param: click.Parameter, value: str) -> timedelta:
    from forecast.durations import parse_positive_duration

    try:
        return parse_positive_duration(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def _finite(values: np.ndarray) -> list[float | None]:
    return [round(float(v), 6) if math.isfinite(v) else None for v in values]


def history_summary(series: pd.Series) -> dict[str, Any]:
    observed = series.dropna()
    return {
        "start": series.index[0].isoformat() if len(series) else None,
        "end": series.index[-1].isoformat() if len(series) else None,
        "points": len(series),
        "gaps": int(series.isna().sum()),
        "last": round(float(observed.iloc[-1]), 6) if len(observed) else None,
        "mean": round(float(observed.mean()), 6) if len(observed) else None,
        "min": round(float(observed.min()), 6) if len(observed) else None,
        "max": round(float(observed.max()), 6) if len(observed) else None,
    }


async def _pull(settings: PrometheusClientSettings, query: SignalQuery, start: datetime, end: datetime) -> list[Any]:
    from adapters.prometheus.client import PrometheusSource

    async with PrometheusSource(settings) as prometheus:
        return await prometheus.backfill(query, start, end)


def _moment(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime:
    return parse_moment(value)


def _headers(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for header in values:
        name, separator, value = header.partition("=")
        if not separator or not name:
            raise click.BadParameter(f"{header!r} is not NAME=VALUE")
        headers[name] = value
    return headers


@click.command("forecast")
@click.option("--prometheus-url", required=True, help="Base URL of Prometheus, e.g. http://prometheus:9090.")
@click.option("--query", "promql", required=True, help="PromQL returning one series (aggregate it if needed).")
@click.option("--lookback", default="14d", show_default=True, callback=_duration, help="History to fit on.")
@click.option("--step", default="5m", show_default=True, callback=_duration, help="Resolution of history and forecast.")
@click.option("--horizon", default="1h", show_default=True, callback=_duration, help="How far ahead to forecast.")
@click.option("--quantile", default=0.9, show_default=True, type=decimal(0.5, 1.0, min_open=True, max_open=True))
@click.option(
    "--at", "at", callback=_moment, help="Forecast as of this moment (RFC 3339 or Unix seconds) [default: now]."
)
@click.option("--format", "output", type=click.Choice(["json", "table"]), default="table", show_default=True)
@click.option("--bearer-token-file", type=click.Path(exists=True, dir_okay=False), help="Token sent as Bearer.")
@click.option("--ca-file", type=click.Path(exists=True, dir_okay=False), help="CA bundle for https Prometheus.")
@click.option(
    "--header", "headers", multiple=True, callback=_headers, help="Extra request header NAME=VALUE (repeatable)."
)
@click.option("--timeout", default="30s", show_default=True, callback=_duration, help="Per request.")
def forecast_command(
    prometheus_url: str,
    promql: str,
    lookback: timedelta,
    step: timedelta,
    horizon: timedelta,
    quantile: float,
    at: datetime,
    output: str,
    bearer_token_file: str | None,
    ca_file: str | None,
    headers: dict[str, str],
    timeout: timedelta,
) -> None:
    """Pull one query's history from Prometheus and print the forecast the service would make."""
    from adapters.prometheus.client import PrometheusClientSettings
    from adapters.prometheus.promql import SignalQuery

    try:
        settings = PrometheusClientSettings(
            url=prometheus_url,
            timeout_s=timeout.total_seconds(),
            bearer_token_file=bearer_token_file,
            ca_file=ca_file,
            headers=headers,
        )
        query = SignalQuery(name="query", promql=promql, step=step)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    series = _pull_one_series(settings, query, at - lookback, at)
    result = _fit_select_predict(series, max(1, int(horizon / step)), quantile)
    document = _document(promql, at, step, quantile, series, result)
    if output == "json":
        click.echo(json.dumps(document, indent=2))
    else:
        _print_table(document, result, quantile)


def _pull_one_series(
    settings: PrometheusClientSettings, query: SignalQuery, start: datetime, end: datetime
) -> pd.Series:
    """The query's one series over ``start``-``end``; Prometheus failing or answering nothing is a
    runtime failure, several series a usage error (the query must aggregate them)."""
    from adapters.prometheus.client import PrometheusError

    try:
        signals = asyncio.run(_pull(settings, query, start, end))
    except PrometheusError as error:
        raise CommandFailed(f"{type(error).__name__}: {error}") from None
    if not signals:
        raise CommandFailed("the query returned no data in the lookback")
    if len(signals) > 1:
        shown = ", ".join(str(dict(s.labels)) for s in signals[:3])
        raise click.UsageError(
            f"the query returned {len(signals)} series ({shown}, ...); "
            "aggregate it to one, e.g. sum(...) or sum by () (...)"
        )
    series: pd.Series = signals[0].series
    return series


def _fit_select_predict(series: pd.Series, horizon_steps: int, quantile: float) -> EngineResult:
    from forecast.engine import fit_select_predict

    try:
        return fit_select_predict(
            series,
            horizon_steps=horizon_steps,
            quantiles=(quantile,),
            policy_quantile=quantile,
            lead_steps=horizon_steps,
        )
    except ValueError as error:
        raise CommandFailed(f"cannot forecast this history: {error}") from None


def _document(
    promql: str, at: datetime, step: timedelta, quantile: float, series: pd.Series, result: EngineResult
) -> dict[str, Any]:
    forecast = result.forecast
    return {
        "query": promql,
        "at": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "step_seconds": int(step.total_seconds()),
        "history": history_summary(series),
        "forecast": {
            "model": result.model,
            "timestamps": [stamp.isoformat() for stamp in forecast.timestamps],
            "mean": _finite(forecast.mean),
            "quantiles": {f"{quantile:g}": _finite(forecast.quantile(quantile))},
            "notes": list(result.notes),
        },
    }


def _print_table(document: dict[str, Any], result: EngineResult, quantile: float) -> None:
    from rich.console import Console
    from rich.table import Table

    summary, forecast = document["history"], result.forecast
    console = Console()
    console.print(
        f"[bold]{document['query']}[/bold] as of {document['at']}: {summary['points']} points "
        f"({summary['gaps']} gaps), last {summary['last']}, mean {summary['mean']}, max {summary['max']}"
    )
    table = Table(title=f"forecast by {result.model}")
    table.add_column("time (UTC)")
    table.add_column("mean", justify="right")
    table.add_column(f"p{round(quantile * 100)}", justify="right")
    for stamp, mean, upper in zip(forecast.timestamps, forecast.mean, forecast.quantile(quantile), strict=True):
        table.add_row(f"{stamp:%Y-%m-%d %H:%M}", f"{mean:.2f}", f"{upper:.2f}")
    console.print(table)
    for note in result.notes:
        console.print(f"note: {note}")
