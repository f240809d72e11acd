"""``gpu-autoscaler simulate-cold-start``: an inference Deployment with ``minReplicas: 0`` on a real
request trace, woken by the observed rate, by ``request_rate_forecast`` or by both, and the requests
that arrive while no replica is Ready (pod start plus model load)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from autoscaler.commands.numbers import decimal

if TYPE_CHECKING:  # imported when the command runs: --help loads none of pandas or NumPy
    import pandas as pd

    from autoscaler.simulation.cold_start import WakeOutcome


def read_requests(path: Path) -> pd.Series:
    """A ``timestamp,value`` CSV(.gz) of requests per minute, on a regular 1-minute grid."""
    import pandas as pd

    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as error:
        raise ValueError(f"--requests {path}: {error}") from None
    if list(frame.columns[:2]) != ["timestamp", "value"]:
        raise ValueError(f"--requests {path}: expected the columns timestamp,value, got {list(frame.columns)}")
    index = pd.DatetimeIndex(pd.to_datetime(frame["timestamp"], utc=True))
    series = pd.Series(frame["value"].to_numpy(dtype=float), index=index)
    steps = index.to_series().diff().dropna().unique()
    if len(series) < 2 or len(steps) != 1 or steps[0] != pd.Timedelta(minutes=1):
        raise ValueError(f"--requests {path}: timestamps must be every minute without gaps")
    if (series < 0).any() or series.isna().any():
        raise ValueError(f"--requests {path}: request counts must be numbers >= 0")
    return series


def _figures(result: WakeOutcome) -> dict[str, Any]:
    figures = {key: round(value, 3) if isinstance(value, float) else value for key, value in asdict(result).items()}
    figures["fraction_while_none_ready"] = round(result.fraction_while_none_ready, 5)
    return figures


@click.command("simulate-cold-start")
@click.option(
    "--requests",
    "requests_path",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    required=True,
    help="requests per minute: a timestamp,value CSV(.gz) (tests/data_helpers.py writes the Alibaba GenAI one)",
)
@click.option("--cold-start", default="3m", show_default=True, help="pod start plus model load, until Ready")
@click.option("--replica-rate", default=20.0, show_default=True, type=decimal(), help="requests/s one replica serves")
@click.option("--quantile", default=0.9, show_default=True, type=decimal(0, 1, min_open=True, max_open=True))
@click.option(
    "--activation",
    default=0.0,
    show_default=True,
    type=decimal(min=0),
    help="requests/s the forecast must exceed to wake the Deployment (a KEDA ScaledObject's activationValue; "
    "0: the HPA's rule, any positive forecast)",
)
@click.option("--lead-time-margin", default="90s", show_default=True, help="added to --cold-start (the service's)")
@click.option("--warmup", default="7d", show_default=True, help="initial part that only trains the forecaster")
@click.option("--reselect-every", default="6h", show_default=True, help="full model selection cadence")
@click.option("--lookback", default="14d", show_default=True, help="history each fit sees")
@click.option("--format", "output_format", type=click.Choice(["json", "table"]), default="json", show_default=True)
def cold_start_command(
    requests_path: Path,
    cold_start: str,
    replica_rate: float,
    quantile: float,
    activation: float,
    lead_time_margin: str,
    warmup: str,
    reselect_every: str,
    lookback: str,
    output_format: str,
) -> None:
    """Requests that arrive while a scaled-to-zero inference Deployment has no Ready replica."""
    from autoscaler.commands.simulate_run import _seconds
    from autoscaler.simulation.cold_start import ColdStartConfig, simulate_wakers

    try:
        if not replica_rate > 0:
            raise ValueError(f"--replica-rate must be above 0, got {replica_rate}")
        config = ColdStartConfig(
            cold_start_s=_seconds("--cold-start", cold_start),
            replica_rate=replica_rate,
            quantile=quantile,
            activation=activation,
            lead_margin_s=_seconds("--lead-time-margin", lead_time_margin, allow_zero=True),
            reselect_every_s=_seconds("--reselect-every", reselect_every),
            lookback_s=_seconds("--lookback", lookback),
            warmup_s=_seconds("--warmup", warmup, allow_zero=True),
        )
        per_minute = read_requests(requests_path)
        results = simulate_wakers(per_minute, config)
    except ValueError as error:
        raise click.UsageError(str(error)) from None
    report = {
        "requests": str(requests_path),
        "cold_start_seconds": config.cold_start_s,
        "replica_rate": config.replica_rate,
        "quantile": config.quantile,
        "activation": config.activation,
        "lead_time_seconds": config.lead_s,
        "warmup_seconds": config.warmup_s,
        "wakers": {name: _figures(result) for name, result in results.items()},
    }
    if output_format == "json":
        click.echo(json.dumps(report, indent=2))
        return
    click.echo("| woken by | requests | while no replica Ready | share | wakes | replica-hours | hours none Ready |")
    click.echo("|---|---|---|---|---|---|---|")
    for name, result in results.items():
        click.echo(
            f"| {name} | {result.requests:,.0f} | {result.requests_while_none_ready:,.1f} | "
            f"{result.fraction_while_none_ready:.2%} | {result.wakes} | {result.replica_hours:,.1f} | "
            f"{result.hours_none_ready:,.1f} |"
        )
