"""``gpu-autoscaler preflight``: can the service be installed and run here, as configured?"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from autoscaler.commands.errors import CommandFailed

if TYPE_CHECKING:  # --help stays light: the settings import pydantic and the Kubernetes client
    from autoscaler.config.settings import Settings


async def _run(settings: Settings) -> list[Any]:
    from autoscaler.app.serving import kubernetes_client
    from autoscaler.checks.preflight import run_checks

    async with kubernetes_client(settings) as api:
        return await run_checks(api, settings)


def run_preflight(settings: Settings, fmt: str) -> None:
    """Print one line per check (or the JSON report); fail (exit 1) when any check found a problem."""
    from adapters.types import AdapterError
    from autoscaler.checks.preflight import report_json

    try:
        checks = asyncio.run(_run(settings))
    except (OSError, AdapterError) as error:  # no kubeconfig, an API that cannot be reached
        raise CommandFailed(f"cannot check the cluster: {error}") from None
    click.echo(report_json(checks) if fmt == "json" else "\n".join(check.line() for check in checks))
    problems = sum(1 for check in checks if not check.ok)
    if problems:
        raise CommandFailed(f"preflight: {problems} of {len(checks)} checks found a problem (see above)")


@click.command("preflight")
@click.option("--config", "config_file", type=click.Path(path_type=Path, dir_okay=False), help="Settings YAML file.")
@click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Kubeconfig file [default: kubernetes.kubeconfig; in a pod its service account; else $KUBECONFIG or "
    "~/.kube/config].",
)
@click.option(
    "--take-over",
    is_flag=True,
    help="Accept replacing another provider's external metrics APIService (preflight.take_over).",
)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def preflight_command(config_file: Path | None, kubeconfig: Path | None, take_over: bool, fmt: str) -> None:
    """Check the cluster before installing or starting: the external metrics APIService's owner, RBAC,
    the extension-apiserver-authentication ConfigMap and the CRDs the configuration reads.

    One line per check; exit 0 when all pass, 1 when any found a problem.
    """
    from autoscaler.config.settings_loader import SettingsError, load_settings

    overrides: dict[str, Any] = {
        "kubernetes.kubeconfig": str(kubeconfig) if kubeconfig else None,
        "preflight.take_over": True if take_over else None,
    }
    try:
        settings = load_settings(config_file, overrides=overrides)
    except SettingsError as error:
        raise click.UsageError(str(error)) from None
    if settings.kubernetes.kubeconfig is None and "KUBERNETES_SERVICE_HOST" not in os.environ:
        # Run before installing, from a workstation: the cluster kubectl talks to.
        default = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or "~/.kube/config"
        kubernetes = settings.kubernetes.model_copy(update={"kubeconfig": Path(default).expanduser()})
        settings = settings.model_copy(update={"kubernetes": kubernetes})
    run_preflight(settings, fmt)
