"""A gRPC external scaler on a free loopback port, and a real grpcio client for it (the generated stub)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from autoscaler.app.api_loop import on_own_loop
from autoscaler.app.serving import GRPC_THREAD
from autoscaler.config.server_settings import ServerSettings
from autoscaler.keda import externalscaler_pb2 as pb
from autoscaler.keda.externalscaler_pb2_grpc import ExternalScalerStub
from autoscaler.keda.server import GrpcListening, serving_grpc
from autoscaler.serving.provider import SnapshotProvider
from autoscaler.web.security.tls import ServingFiles
from autoscaler.web.shared.self_metrics import SelfMetrics
from tests.autoscaler.conftest import NOW, SettableClock, fixed_snapshot
from tests.pki import PKI, Client, make_pki

# What KEDA sends: the ScaledObject's name and namespace, and its trigger's metadata map as written.
TRIGGER = {
    "scalerAddress": "gpu-autoscaler.gpu-autoscaler:9443",
    "metric": "gpu_headroom",
    "labelSelector": "pool=a100",
    "targetValue": "1",
}


def ref(namespace: str = "default", **metadata: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name="placeholders", namespace=namespace, scalerMetadata={**TRIGGER, **metadata})


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


@dataclass
class Scaler:
    listening: GrpcListening
    provider: SnapshotProvider
    clock: SettableClock
    metrics: SelfMetrics
    pki: PKI

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.listening.port}"

    def channel(self, client: Client | None = None, *, ca: Path | None = None) -> grpc.aio.Channel:
        """A TLS channel as KEDA opens one: ``caCert`` (``ca``), ``tlsClientCert`` and ``tlsClientKey``."""
        credentials = grpc.ssl_channel_credentials(
            root_certificates=(ca or self.pki.client_ca).read_bytes(),
            private_key=client.key.read_bytes() if client else None,
            certificate_chain=client.cert.read_bytes() if client else None,
        )
        return grpc.aio.secure_channel(self.address, credentials)

    def sample(self, name: str, labels: dict[str, str]) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)


def grpc_settings(pki: PKI, *, mutual: bool = True, **server: object) -> ServerSettings:
    return ServerSettings.model_validate(
        {
            "bind_address": "127.0.0.1",
            "secure_port": 0,
            "http_port": None,
            "grpc_port": 0,
            "grpc_client_ca_file": str(pki.client_ca) if mutual else None,
            "shutdown_grace": "1s",
            **server,
        }
    )


@pytest.fixture
async def scaler(pki: PKI) -> AsyncIterator[Scaler]:
    clock = SettableClock(NOW + timedelta(seconds=30))
    provider = SnapshotProvider(fixed_snapshot(), clock=clock)
    metrics = SelfMetrics()
    served = serving_grpc(
        grpc_settings(pki),
        provider=provider,
        self_metrics=metrics,
        serving=ServingFiles(pki.serving_cert, pki.serving_key),
        recheck_interval_s=0.2,
    )
    # As ``serve`` runs it: on a thread and loop of its own; the test's loop swaps snapshots, as the
    # refresher does on the main loop.
    async with on_own_loop(GRPC_THREAD, served) as listening:
        yield Scaler(listening, provider, clock, metrics, pki)


@pytest.fixture
async def stub(scaler: Scaler) -> AsyncIterator[ExternalScalerStub]:
    async with scaler.channel(scaler.pki.alice) as channel:
        yield ExternalScalerStub(channel)


# The HTTPS API beside it, to compare answers (same PKI fixture).
from tests.autoscaler.conftest import api_server, authorizer_override  # noqa: E402

__all__ = ["api_server", "authorizer_override"]
