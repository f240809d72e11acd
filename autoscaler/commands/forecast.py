"""``gpu-autoscaler forecast``: what the service would serve for one PromQL query, as of any moment."""

from __future__ import annotations

import asyncio
import json
import math
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import click
import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from adapters.prometheus import PrometheusClientSettings, PrometheusError, PrometheusSource
from adapters.promql import SignalQuery
from forecast.durations import parse_positive_duration


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
    async with PrometheusSource(settings) as prometheus:
        return await prometheus.backfill(query, start, end)


@click.command("forecast")
@click.option("--prometheus-url", required=True, help="Base URL of Prometheus, e.g. http://prometheus:9090.")
@click.option("--query", "promql", required=True, help="PromQL returning one series (aggregate it if needed).")
@click.option("--lookback", default="14d", show_default=True, callback=_duration, help="History to fit on.")
@click.option("--step", default="5m", show_default=True, callback=_duration, help="Resolution of history and forecast.")
@click.option("--horizon", default="1h", show_default=True, callback=_duration, help="How far ahead to forecast.")
@click.option(
    "--quantile", default=0.9, show_default=True, type=click.FloatRange(0.5, 1.0, min_open=True, max_open=True)
)
@click.option("--at", "at_text", help="Forecast as of this moment (RFC 3339 or Unix seconds) [default: now].")
@click.option("--format", "output", type=click.Choice(["json", "table"]), default="table", show_default=True)
@click.option("--bearer-token-file", type=click.Path(exists=True, dir_okay=False), help="Token sent as Bearer.")
@click.option("--ca-file", type=click.Path(exists=True, dir_okay=False), help="CA bundle for https Prometheus.")
@click.option("--header", "headers", multiple=True, help="Extra request header NAME=VALUE (repeatable).")
@click.option("--timeout", default="30s", show_default=True, callback=_duration, help="Per request.")
def forecast_command(
    prometheus_url: str,
    promql: str,
    lookback: timedelta,
    step: timedelta,
    horizon: timedelta,
    quantile: float,
    at_text: str | None,
    output: str,
    bearer_token_file: str | None,
    ca_file: str | None,
    headers: tuple[str, ...],
    timeout: timedelta,
) -> None:
    """Pull one query's history from Prometheus and print the forecast the service would make."""
    from forecast.engine import fit_select_predict

    at = parse_moment(at_text)
    parsed_headers: dict[str, str] = {}
    for header in headers:
        name, separator, value = header.partition("=")
        if not separator or not name:
            raise click.BadParameter(f"{header!r} is not NAME=VALUE", param_hint="--header")
        parsed_headers[name] = value
    try:
        settings = PrometheusClientSettings(
            url=prometheus_url,
            timeout_s=timeout.total_seconds(),
            bearer_token_file=bearer_token_file,
            ca_file=ca_file,
            headers=parsed_headers,
        )
        query = SignalQuery(name="query", promql=promql, step=step)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    try:
        signals = asyncio.run(_pull(settings, query, at - lookback, at))
    except PrometheusError as error:
        click.echo(f"gpu-autoscaler forecast: {type(error).__name__}: {error}", err=True)
        sys.exit(1)
    if not signals:
        click.echo("gpu-autoscaler forecast: the query returned no data in the lookback", err=True)
        sys.exit(1)
    if len(signals) > 1:
        shown = ", ".join(str(dict(s.labels)) for s in signals[:3])
        click.echo(
            f"gpu-autoscaler forecast: the query returned {len(signals)} series ({shown}, ...); "
            "aggregate it to one, e.g. sum(...) or sum by () (...)",
            err=True,
        )
        sys.exit(2)
    series = signals[0].series
    horizon_steps = max(1, int(horizon / step))
    try:
        result = fit_select_predict(
            series,
            horizon_steps=horizon_steps,
            quantiles=(quantile,),
            policy_quantile=quantile,
            lead_steps=horizon_steps,
        )
    except ValueError as error:
        click.echo(f"gpu-autoscaler forecast: cannot forecast this history: {error}", err=True)
        sys.exit(1)
    forecast = result.forecast
    summary = history_summary(series)
    document: dict[str, Any] = {
        "query": promql,
        "at": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "step_seconds": int(step.total_seconds()),
        "history": summary,
        "forecast": {
            "model": result.model,
            "timestamps": [stamp.isoformat() for stamp in forecast.timestamps],
            "mean": _finite(forecast.mean),
            "quantiles": {f"{quantile:g}": _finite(forecast.quantile(quantile))},
            "notes": list(result.notes),
        },
    }
    if output == "json":
        click.echo(json.dumps(document, indent=2))
        return
    console = Console()
    console.print(
        f"[bold]{promql}[/bold] as of {document['at']}: {summary['points']} points "
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
