"""The ``gpu-autoscaler`` command line.

``--help`` (and each command's) answers in well under a second: this module imports only click, and
the other commands' modules (which import pandas, scikit-learn, statsmodels, the Kubernetes client,
gRPC) are imported when one of them runs. ``tests/autoscaler/test_cli_imports.py`` holds it.
"""

from __future__ import annotations

import importlib
import json
import logging
import sys
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from autoscaler import __version__
from autoscaler.commands import read_only  # light: click only, the trial's modules are imported when it runs
from autoscaler.commands.errors import CommandFailed
from autoscaler.commands.numbers import QUERY_TIMEOUT_HELP, PositiveDuration, integer
from autoscaler.decimals import parse_integer

if TYPE_CHECKING:
    from autoscaler.config.settings import Settings

# Commands in their own modules: name -> (module, attribute, the command's one-line help, as its
# docstring starts; a test checks they agree), imported only when the command runs.
LAZY_COMMANDS: Mapping[str, tuple[str, str, str]] = {
    "backtest": (
        "autoscaler.commands.backtest",
        "backtest",
        "Rolling-origin backtest of every model and of automatic selection.",
    ),
    "forecast": (
        "autoscaler.commands.forecast",
        "forecast_command",
        "Pull one query's history from Prometheus and print the forecast the service would make.",
    ),
    "preflight": (
        "autoscaler.commands.preflight",
        "preflight_command",
        "Check the cluster before installing or starting: the external metrics APIService's owner, RBAC, "
        "the extension-apiserver-authentication ConfigMap and the CRDs the configuration reads.",
    ),
    "simulate": (
        "autoscaler.commands.simulate",
        "simulate_command",
        "Simulate GPU pre-provisioning (placeholders or a CapacityBuffer) under several policies and compare them.",
    ),
    "report": (
        "autoscaler.commands.report",
        "report_command",
        "Write an HTML report: what the service would have served over your Prometheus's history, per node pool, "
        "against reactive (what happened) and the heuristics.",
    ),
    "simulate-cold-start": (
        "autoscaler.commands.cold_start",
        "cold_start_command",
        "Requests that arrive while a scaled-to-zero inference Deployment has no Ready replica.",
    ),
}


# A short help this long is never cut: click then keeps the help's first sentence whole.
FULL_SENTENCE = 1000


class LazyGroup(click.Group):
    """A group whose ``LAZY_COMMANDS`` are imported when run; its help lists them without importing."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS and cmd_name not in self.commands:
            module, attribute, _ = LAZY_COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = [name for name in self.list_commands(ctx) if name in LAZY_COMMANDS or not self.commands[name].hidden]
        # Each command's whole first sentence, wrapped over as many lines as it takes (click would cut
        # it to one line and end it with "...").
        rows = [(name, self._short_help(name, FULL_SENTENCE)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def _short_help(self, name: str, limit: int) -> str:
        if name in self.commands:
            return self.commands[name].get_short_help_str(limit)
        # As click shortens the command's own help, without importing it.
        return click.Command(name, help=LAZY_COMMANDS[name][2]).get_short_help_str(limit)


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log collectors."""

    def format(self, record: logging.LogRecord) -> str:
        document = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document)


class MalformedRequestFilter(logging.Filter):
    """aiohttp logs a malformed request with a traceback that quotes the offending bytes, which may hold
    a token; keep one line naming the error class instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            record.msg, record.args, record.exc_info = "malformed request refused (%s)", (type(error).__name__,), None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def configure_logging(level: str, fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp logs every request at INFO through its access logger; we count them in /metrics instead.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    server_logger = logging.getLogger("aiohttp.server")
    server_logger.filters[:] = [MalformedRequestFilter()]


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="gpu-autoscaler")
def main() -> None:
    """Predictive GPU autoscaler: forecasts GPU demand and serves it to HPAs on the external metrics API.

    Exit codes: 0 done, 2 usage error (Error: ...), 1 runtime failure (error: ...).
    """


class PortOrOff(click.ParamType[int | str]):
    """A port number, or ``off`` to switch the port off (the setting's ``null``)."""

    name = "PORT|off"
    OFF = "off"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if isinstance(value, int):
            return value
        if value == self.OFF:
            return self.OFF
        port = parse_integer(value)
        if port is None:
            self.fail(f"{value!r} is neither a port number nor 'off'", param, ctx)
        return port


@main.command()
@click.option("--config", "config_file", type=click.Path(path_type=Path, dir_okay=False), help="Settings YAML file.")
@click.option("--demo", is_flag=True, help="Run the embedded demo (the default when no --config is given).")
@click.option(
    "--prometheus-url",
    metavar="URL",
    help="Read-only trial: forecast your cluster's GPU demand per pool from this Prometheus (kube-state-metrics, "
    "dcgm-exporter) and show it on the page; no config, no cluster access, nothing served to the cluster.",
)
@click.option(
    "--query-timeout",
    type=PositiveDuration(),
    help=f"With --prometheus-url: {QUERY_TIMEOUT_HELP} [default: 120s; a config file: prometheus.timeout].",
)
@click.option("--secure-port", type=integer(), help="HTTPS port of the external metrics API [default: 6443].")
@click.option("--http-port", type=integer(), help="Plain HTTP port for probes and /metrics [default: 8080].")
@click.option(
    "--grpc-port",
    type=PortOrOff(),
    help="gRPC port of KEDA's external scaler; 0 any free port, 'off' none [default: off; demo: 9443].",
)
@click.option("--bind-address", help="Address to listen on [default: 0.0.0.0; demo: 127.0.0.1].")
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Where generated certificates live [default: .gpu-autoscaler].",
)
@click.option(
    "--skip-preflight",
    is_flag=True,
    help="Start without the preflight checks (preflight.on_start: false); see `gpu-autoscaler preflight`.",
)
@click.option(
    "--take-over",
    is_flag=True,
    help="Start even though another provider serves the external metrics APIService (preflight.take_over).",
)
def serve(
    config_file: Path | None,
    demo: bool,
    prometheus_url: str | None,
    query_timeout: timedelta | None,
    secure_port: int | None,
    http_port: int | None,
    grpc_port: int | str | None,
    bind_address: str | None,
    state_dir: Path | None,
    skip_preflight: bool,
    take_over: bool,
) -> None:
    """Serve the external metrics API (HTTPS), probes/metrics (HTTP) and KEDA's external scaler (gRPC).

    With the Kubernetes API in use, the checks of `gpu-autoscaler preflight` run first: another
    provider owning the external metrics APIService stops the start (exit 1) unless --skip-preflight
    or --take-over; other problems are logged as warnings. --prometheus-url: docs/try-it.md.
    """
    if prometheus_url is not None:
        read_only.refuse_cluster_flags(config_file, demo, secure_port, grpc_port, skip_preflight, take_over)
        configure_logging("info")
        return read_only.serve_read_only(prometheus_url, http_port, bind_address, state_dir, query_timeout)
    if query_timeout is not None:
        raise click.UsageError("--query-timeout goes with --prometheus-url; a config file sets prometheus.timeout")
    overrides: dict[str, Any] = {
        "preflight.on_start": False if skip_preflight else None,
        "preflight.take_over": True if take_over else None,
        "server.secure_port": secure_port,
        "server.http_port": http_port,
        "server.grpc_port": None if grpc_port == PortOrOff.OFF else grpc_port,
        "server.bind_address": bind_address,
        "state_dir": str(state_dir) if state_dir else None,
    }
    if demo or config_file is None:
        overrides["demo.enabled"] = True
        if bind_address is None:
            overrides["server.bind_address"] = "127.0.0.1"
    settings = _load_settings(config_file, overrides)
    if grpc_port == PortOrOff.OFF:  # an override of None means "not given", so switch it off here
        settings = settings.model_copy(update={"server": settings.server.model_copy(update={"grpc_port": None})})
    if settings.demo.enabled and not settings.server.is_loopback:
        raise click.UsageError("the demo binds to a loopback address only (it trusts its own local CA)")
    if settings.server.grpc_port is not None or settings.demo.enabled:  # the demo serves gRPC unless told
        from autoscaler.keda.core_log import route_core_log

        route_core_log()  # before logging is configured: its handler keeps the original stderr
    configure_logging(settings.log_level, settings.log_format)
    import uvloop

    from adapters.types import AdapterError
    from autoscaler.app.serving import serve as run_server  # heavy imports only when serving
    from autoscaler.checks.preflight import PreflightFailed

    try:
        # uvloop's event loop and TLS transport serve about twice the requests per core.
        uvloop.run(run_server(settings))
    except (OSError, AdapterError, PreflightFailed) as error:
        # A port in use, unreadable certificates, a Kubernetes API that cannot be reached, a failed preflight.
        raise CommandFailed(f"cannot serve: {error}") from None


@main.command("check-config")
@click.argument("config_file", type=click.Path(path_type=Path, dir_okay=False))
def check_config(config_file: Path) -> None:
    """Validate a settings file without starting anything (exit 0 valid, 2 invalid)."""
    _load_settings(config_file, {})
    click.echo(f"{config_file}: valid")


def _load_settings(config_file: Path | None, overrides: dict[str, Any]) -> Settings:
    """Settings that cannot be used (unreadable, not YAML, invalid) are a usage error."""
    from autoscaler.config.settings_loader import SettingsError, load_settings  # pydantic and the Kubernetes client

    try:
        return load_settings(config_file, overrides=overrides)
    except SettingsError as error:
        raise click.UsageError(str(error)) from None
