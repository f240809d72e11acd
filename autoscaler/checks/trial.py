"""Trying the service read-only on your own Prometheus (docs/try-it.md).

``gpu-autoscaler serve --prometheus-url URL`` and ``gpu-autoscaler report --prometheus-url URL`` read
the GPUs requested per node pool (kube-state-metrics: ``adapters.prometheus.presets.gpus_requested``) and, when
dcgm-exporter is scraped too, the GPU utilisation per pool (``adapters.prometheus.presets.gpu_utilization``).
They never use the Kubernetes API and serve nothing to the cluster.

Before anything is served or simulated, :func:`check_prometheus` says in one line what is missing: a
Prometheus that cannot be reached, no kube-state-metrics series, or a history too short to fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from adapters.gpu_units import MIG_PREFIX
from adapters.prometheus import presets
from adapters.prometheus.client import PrometheusError, PrometheusSource
from adapters.prometheus.promql import RawSeries, SignalQuery
from adapters.types import NODEPOOL_LABEL
from autoscaler.config.settings import Settings

STEP = timedelta(minutes=5)
LOOKBACK = timedelta(days=14)
GPU_SIGNAL = "gpus_requested"
UTILIZATION_SIGNAL = "gpu_utilization"
STATE_DIR = Path(".gpu-autoscaler") / "read-only"
# The naive models fit from this many steps; seasonal ones need two days (forecast/baselines.py).
MIN_HISTORY_STEPS = 24
GOOD_HISTORY = timedelta(days=2)
# What kube-state-metrics exports and these presets read: one of them is enough to tell it is scraped.
KSM_SERIES = ("kube_pod_container_resource_requests", "kube_node_info", 'up{job="kube-state-metrics"}')
# Coarse enough to read weeks in one request: only the first sample's time matters.
_SCAN_STEP = timedelta(hours=1)


class TrialError(Exception):
    """What keeps the trial from starting, in one line that names it."""


def notice(url: str) -> str:
    """Said at start-up and on every page."""
    return (
        f"Read-only trial on {url}: forecasts from its history only. Nothing is served to the cluster "
        "(no Kubernetes API access, no external metrics API, no KEDA scaler)."
    )


def min_history(step: timedelta = STEP) -> timedelta:
    return step * MIN_HISTORY_STEPS


def gpu_query(step: timedelta = STEP) -> SignalQuery:
    """GPUs requested by Pending or Running pods, per node pool (kube-state-metrics)."""
    return presets.gpus_requested(step=step, name=GPU_SIGNAL)


def utilization_query(step: timedelta = STEP) -> SignalQuery:
    """Average GPU utilisation per node pool (dcgm-exporter, percent)."""
    return presets.gpu_utilization(by=(NODEPOOL_LABEL,), step=step, name=UTILIZATION_SIGNAL)


@dataclass(frozen=True)
class Found:
    """What the Prometheus holds for the trial."""

    url: str
    history_start: pd.Timestamp  # the first hour with kube-state-metrics GPU requests
    dcgm: bool
    pool_label: bool  # kube_node_labels carries the Karpenter node pool label

    def history(self, now: datetime) -> timedelta:
        return pd.Timestamp(now) - self.history_start


async def check_prometheus(prometheus: PrometheusSource, now: datetime, since: timedelta, needed: timedelta) -> Found:
    """Raise :class:`TrialError` unless the Prometheus answers, holds kube-state-metrics series and at
    least ``needed`` of their history within the last ``since``."""
    url = prometheus.settings.url
    try:
        ksm = [await _newest(prometheus, f"count({series})", now) for series in KSM_SERIES]
        if not any(ksm):
            raise TrialError(
                f"Prometheus at {url} has no kube-state-metrics series ({', '.join(KSM_SERIES)}): "
                "is kube-state-metrics installed and scraped?"
            )
        requests = f'count({KSM_SERIES[0]}{{resource=~"{_gpu_resources()}"}})'
        utilization = f"count({presets.DCGM_UTILIZATION})"
        scan = await prometheus.query_range(requests, now - since, now, _SCAN_STEP)
        # dcgm-exporter counts as there if it reported within ``since`` (a pull then says if it stopped).
        dcgm = _first_sample(await prometheus.query_range(utilization, now - since, now, _SCAN_STEP)) is not None
        label = bool(await _newest(prometheus, f"count({presets.known_pools()})", now))
    except PrometheusError as error:
        raise TrialError(f"cannot query Prometheus at {url}: {error}") from None
    start = _first_sample(scan)
    if start is None:
        raise TrialError(
            f"Prometheus at {url} has kube-state-metrics but no GPU requests in the last {span_text(since)} "
            f"({KSM_SERIES[0]} with resource {_gpu_resources()}): nothing to forecast"
        )
    found = Found(url=url, history_start=start, dcgm=dcgm, pool_label=label)
    if found.history(now) < needed:
        raise TrialError(
            f"the GPU request history in Prometheus at {url} starts {start:%Y-%m-%dT%H:%M}Z, "
            f"{span_text(found.history(now))} ago: too short to fit (at least {span_text(needed)} is needed)"
        )
    return found


def read_only_settings(url: str, *, found: Found | None = None, overrides: dict[str, Any] | None = None) -> Settings:
    """The service's settings for the trial: both presets on ``url``, the page on loopback, no secure
    port use, no gRPC, no Kubernetes (``auth.mode: none``, no inputs, no actuators, no publication).

    Without dcgm-exporter series (``found.dcgm`` false), the utilisation signal is left out.
    """
    signals: list[dict[str, Any]] = [
        {"name": GPU_SIGNAL, "preset": "gpus_requested", "by": [NODEPOOL_LABEL], "step": STEP},
    ]
    metrics: dict[str, Any] = {
        "gpu_demand_forecast": {
            "signal": GPU_SIGNAL, "kind": "demand", "quantile": 0.9,
            "description": "GPUs expected to be requested per node pool within the lead time (upper quantile)",
        },
        # Served to the shipped configuration's service level (manifests/base/configmap.yaml).
        "gpu_headroom": {
            "signal": GPU_SIGNAL, "kind": "headroom", "target": {"minutes_short": "1%"},
            "description": "GPUs to hold spare per node pool: forecast demand minus GPUs requested now",
        },
    }  # fmt: skip
    if found is None or found.dcgm:
        signals.append({"name": UTILIZATION_SIGNAL, "preset": "gpu_utilization", "by": [NODEPOOL_LABEL], "step": STEP})
        metrics["gpu_utilization_forecast"] = {
            "signal": UTILIZATION_SIGNAL, "kind": "rate", "quantile": 0.9,
            "description": "GPU utilisation per node pool expected within the lead time, percent (dcgm-exporter)",
        }  # fmt: skip
    document: dict[str, Any] = {
        # The secure port is never bound (app/read_only.py); 0 keeps it from clashing with http_port.
        "server": {"bind_address": "127.0.0.1", "grpc_port": None, "secure_port": 0},
        "auth": {"mode": "none"},
        "preflight": {"on_start": False},
        "prometheus": {"url": url},
        "signals": signals,
        "metrics": metrics,
        "forecast": {"lookback": LOOKBACK, "interval": timedelta(minutes=1)},
        "state_dir": STATE_DIR,
    }
    for dotted, value in (overrides or {}).items():
        if value is not None:
            *parents, key = dotted.split(".")
            target = document
            for parent in parents:
                target = target.setdefault(parent, {})
            target[key] = value
    return Settings.model_validate(document)


def _gpu_resources() -> str:
    """Whole NVIDIA GPUs and MIG instances as kube-state-metrics names them (``nvidia_com_gpu|nvidia_com_mig_.*``)."""
    return f"{presets.ksm_resource(presets.GPU_RESOURCE)}|{presets.ksm_resource(MIG_PREFIX)}.*"


async def _newest(prometheus: PrometheusSource, promql: str, now: datetime) -> bool:
    """Whether ``promql`` has a sample at ``now`` (a one-point range query)."""
    series = await prometheus.query_range(promql, now, now, timedelta(minutes=1))
    return any(len(one.values) and not all(math.isnan(v) for v in one.values) for one in series)


def _first_sample(series: Sequence[RawSeries]) -> pd.Timestamp | None:
    firsts = [float(one.timestamps[0]) for one in series if len(one.timestamps)]
    return pd.Timestamp(min(firsts), unit="s", tz="UTC") if firsts else None


def span_text(span: timedelta) -> str:
    """``36.0 hours``, ``2.5 days``: a span as the errors state it."""
    hours = span.total_seconds() / 3600
    return f"{hours / 24:.1f} days" if hours >= 48 else f"{hours:.1f} hours"
