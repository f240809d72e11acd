"""The embedded demo: no cluster and no Prometheus, real numbers from replayed public traces.

Traces (see README, "Demo data"): running GPUs summed over 16 virtual clusters of SenseTime's Helios
"Earth" cluster (Hu et al., SC'21; CC-BY 4.0), and image-generation requests per second of Alibaba's
Stable-Diffusion LoRA serving trace (Lin et al., SoCC'25), both averaged to 5 minutes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path

from adapters.traces.replay import ReplaySource, read_trace
from adapters.types import NODEPOOL_LABEL, Signal
from autoscaler.scorecard.figures import parse_fraction_target
from autoscaler.serving.provider import MetricInfo
from autoscaler.targets.plans import MetricPlan

GPU_SIGNAL = "gpus_requested"
RATE_SIGNAL = "request_rate"
LOOKBACK = timedelta(days=14)
# The demo's node pool: its GPU series carry it as HPAs in a cluster ask for it (gpu_headroom{nodepool=...}).
POOL = "demo-gpu"
# The service level the demo's headroom is served to, as the shipped configuration states it
# (manifests/base/configmap.yaml; why 1 %: docs/service-levels.md, "Which target").
TARGET = "1%"

METRICS = (
    MetricInfo("gpu_demand_forecast", "GPUs expected to be requested within the lead time (upper quantile)", "GPUs"),
    MetricInfo("gpu_headroom", "Placeholder GPUs to hold: forecast demand minus GPUs requested now", "GPUs"),
    MetricInfo("request_rate_forecast", "Requests per second expected within the lead time (upper quantile)", "1/s"),
)

PLANS = (
    MetricPlan("gpu_demand_forecast", GPU_SIGNAL, "demand", 0.9),
    # Placeholders step down gently after the nightly window closes instead of vanishing at once.
    MetricPlan(
        "gpu_headroom",
        GPU_SIGNAL,
        "headroom",
        0.9,
        max_decrease_per_minute=8.0,
        target=parse_fraction_target(TARGET),
    ),
    MetricPlan("request_rate_forecast", RATE_SIGNAL, "rate", 0.9),
)


def _trace(name: str) -> Path:
    return Path(str(resources.files("autoscaler") / "demo_data" / name))


class DemoSignals:
    """Both demo traces, replayed against the wall clock."""

    name = "demo"

    def __init__(self) -> None:
        helios = read_trace(_trace("helios_earth_running_gpus_5m.csv.gz"))
        lora = read_trace(_trace("alibaba_genai_lora_requests_per_second_5m.csv.gz"))
        # Helios starts on Friday 2020-05-01 00:00 UTC and the file holds 4 whole weeks: anchoring the
        # replay there keeps weekdays and hours of the day where they were.
        self.sources = (
            ReplaySource(GPU_SIGNAL, helios, {NODEPOOL_LABEL: POOL}, anchor=helios.index[0].to_pydatetime()),
            ReplaySource(RATE_SIGNAL, lora, {"service": "sd-lora"}, anchor=lora.index[0].to_pydatetime()),
        )

    async def pull(self, now: datetime) -> list[Signal]:
        return [source.history(now, LOOKBACK) for source in self.sources]
