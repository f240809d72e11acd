"""The embedded demo: no cluster and no Prometheus, real numbers from replayed public traces.

Traces (see README, "Demo data"): running GPUs summed over 16 virtual clusters of SenseTime's Helios
"Earth" cluster (Hu et al., SC'21; CC-BY 4.0), and image-generation requests per second of Alibaba's
Stable-Diffusion LoRA serving trace (Lin et al., SoCC'25), both averaged to 5 minutes.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path

import yaml

from adapters.replay import ReplaySource, read_trace
from adapters.types import Signal
from autoscaler.certificates import KeyPair, generate_ca, issue_certificate, load_key_pair, write_private
from autoscaler.provider import MetricInfo
from autoscaler.refresher import MetricPlan

DEMO_USER = "demo-admin"
GPU_SIGNAL = "gpus_requested"
RATE_SIGNAL = "request_rate"
LOOKBACK = timedelta(days=14)

METRICS = (
    MetricInfo("gpu_demand_forecast", "GPUs expected to be requested within the lead time (upper quantile)", "GPUs"),
    MetricInfo("gpu_headroom", "Placeholder GPUs to hold: forecast demand minus GPUs requested now", "GPUs"),
    MetricInfo("request_rate_forecast", "Requests per second expected within the lead time (upper quantile)", "1/s"),
)

PLANS = (
    MetricPlan("gpu_demand_forecast", GPU_SIGNAL, "demand", 0.9),
    # Placeholders step down gently after the nightly window closes instead of vanishing at once.
    MetricPlan("gpu_headroom", GPU_SIGNAL, "headroom", 0.9, max_decrease_per_minute=8.0),
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
            ReplaySource(GPU_SIGNAL, helios, {"pool": "demo-gpu"}, anchor=helios.index[0].to_pydatetime()),
            ReplaySource(RATE_SIGNAL, lora, {"service": "sd-lora"}, anchor=lora.index[0].to_pydatetime()),
        )

    async def pull(self, now: datetime) -> list[Signal]:
        return [source.history(now, LOOKBACK) for source in self.sources]


@dataclass(frozen=True)
class DemoFiles:
    ca_file: Path
    serving_cert: Path
    serving_key: Path
    client_cert: Path
    client_key: Path
    kubeconfig: Path


def _ensure_pair(authority: KeyPair, cert: Path, key: Path, **kwargs: object) -> None:
    if cert.exists() and key.exists():
        return
    issue_certificate(authority, **kwargs).write(cert, key)  # type: ignore[arg-type]


def demo_files(state_dir: Path) -> DemoFiles:
    return DemoFiles(
        ca_file=state_dir / "ca.crt",
        serving_cert=state_dir / "serving.crt",
        serving_key=state_dir / "serving.key",
        client_cert=state_dir / "client.crt",
        client_key=state_dir / "client.key",
        kubeconfig=state_dir / "kubeconfig",
    )


def prepare_state_dir(state_dir: Path) -> DemoFiles:
    """Create (once) the demo CA and its serving and client certificates."""
    state_dir.mkdir(parents=True, exist_ok=True)
    files = demo_files(state_dir)
    ca_key = state_dir / "ca.key"
    if files.ca_file.exists() and ca_key.exists():
        authority = load_key_pair(files.ca_file, ca_key)
    else:
        authority = generate_ca("gpu-autoscaler demo CA")
        authority.write(files.ca_file, ca_key)
    _ensure_pair(
        authority,
        files.serving_cert,
        files.serving_key,
        common_name="gpu-autoscaler",
        hosts=("127.0.0.1", "localhost", "::1"),
        server=True,
    )
    _ensure_pair(
        authority,
        files.client_cert,
        files.client_key,
        common_name=DEMO_USER,
        organizations=("system:masters",),
        client=True,
    )
    return files


def write_kubeconfig(files: DemoFiles, server: str) -> None:
    def encoded(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode("ascii")

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "gpu-autoscaler-demo",
                "cluster": {"server": server, "certificate-authority-data": encoded(files.ca_file)},
            }
        ],
        "users": [
            {
                "name": DEMO_USER,
                "user": {
                    "client-certificate-data": encoded(files.client_cert),
                    "client-key-data": encoded(files.client_key),
                },
            }
        ],
        "contexts": [{"name": "gpu-autoscaler-demo", "context": {"cluster": "gpu-autoscaler-demo", "user": DEMO_USER}}],
        "current-context": "gpu-autoscaler-demo",
    }
    # The kubeconfig embeds the client key: owner-only, like the key files.
    write_private(files.kubeconfig, yaml.safe_dump(config, sort_keys=False).encode())
