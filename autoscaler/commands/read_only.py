"""``gpu-autoscaler serve --prometheus-url URL``: the read-only trial on your own Prometheus.

No cluster, no config file: the settings come from ``autoscaler.checks.trial``, the Prometheus is checked
first (one line, exit 1, when it cannot be reached, has no kube-state-metrics or too short a history),
then the refresher and the page run as in the service. Nothing is served to the cluster.
"""

from __future__ import annotations

import ipaddress
import logging
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from autoscaler.commands.errors import CommandFailed

if TYPE_CHECKING:  # the settings model is imported when the command runs, not for --help
    from autoscaler.config.settings import Settings

log = logging.getLogger(__name__)
# The flags of ``serve`` that only mean something when serving the cluster, in its parameters' order.
CLUSTER_FLAGS = ("--config", "--demo", "--secure-port", "--grpc-port", "--skip-preflight", "--take-over")


def refuse_cluster_flags(*values: object) -> None:
    """Flags that only mean something when serving the cluster (``CLUSTER_FLAGS``, in that order) are a
    usage error with --prometheus-url."""
    named = [flag for flag, value in zip(CLUSTER_FLAGS, values, strict=True) if value not in (None, False)]
    if named:
        raise click.UsageError(
            f"{', '.join(named)}: --prometheus-url runs the read-only trial, which serves nothing to the "
            "cluster (no config file, no external metrics API, no KEDA, no Kubernetes API)"
        )


def serve_read_only(
    url: str,
    http_port: int | None,
    bind_address: str | None,
    state_dir: Path | None,
    query_timeout: timedelta | None = None,
) -> None:
    """Check the Prometheus, then forecast from it and show the forecasts until stopped."""
    import uvloop
    from pydantic import ValidationError

    from autoscaler.checks.trial import read_only_settings

    if bind_address is not None and not _loopback(bind_address):
        raise click.UsageError(f"--bind-address {bind_address}: the read-only trial binds to a loopback address only")
    overrides = {
        "server.http_port": http_port,
        "server.bind_address": bind_address,
        "state_dir": str(state_dir) if state_dir else None,
        "prometheus.timeout": query_timeout,
    }
    try:
        settings = read_only_settings(url, overrides=overrides)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise click.UsageError(f"--prometheus-url {url}: {problems}") from None
    try:
        uvloop.run(_checked_and_served(settings, overrides))
    except OSError as error:  # the port in use, for one
        raise CommandFailed(f"cannot serve: {error}") from None


async def _checked_and_served(settings: Settings, overrides: dict[str, Any]) -> None:
    from datetime import UTC, datetime

    from adapters.prometheus.client import PrometheusSource
    from autoscaler.app.read_only import serve_read_only as run
    from autoscaler.checks.trial import (
        GOOD_HISTORY,
        LOOKBACK,
        TrialError,
        check_prometheus,
        min_history,
        notice,
        read_only_settings,
        span_text,
    )
    from autoscaler.refresh.sources import client_settings

    if settings.prometheus is None:
        raise ValueError("the read-only trial's settings name no Prometheus")
    url = settings.prometheus.url
    now = datetime.now(UTC)
    async with PrometheusSource(client_settings(settings.prometheus)) as prometheus:
        try:
            found = await check_prometheus(prometheus, now, LOOKBACK, min_history())
        except TrialError as error:
            raise CommandFailed(str(error)) from None
    if found.history(now) < GOOD_HISTORY:
        shown = span_text(found.history(now))
        log.warning("only %s of history: seasonal models need two days; forecasts improve as it grows", shown)
    if not found.pool_label:
        log.warning(
            'kube_node_labels has no label_karpenter_sh_nodepool: every GPU counts in one pool nodepool="" '
            "(kube-state-metrics --metric-labels-allowlist=nodes=[karpenter.sh/nodepool] names the pools)"
        )
    if not found.dcgm:
        log.info("no dcgm-exporter series (%s): GPU utilisation is not forecast", "DCGM_FI_DEV_GPU_UTIL")
    await run(read_only_settings(url, found=found, overrides=overrides), notice(url))


def _loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
