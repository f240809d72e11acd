from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from autoscaler.app.access import build_access, client_ca_pems
from autoscaler.app.factory import create_app
from autoscaler.app.serving import Listening, running
from autoscaler.config.settings import Settings
from autoscaler.refresh.pipeline import Pipeline
from autoscaler.serving.provider import MetricInfo, ServedSeries, Snapshot, SnapshotProvider
from autoscaler.targets.plans import RefreshSettings
from autoscaler.web.security.auth import AccessControl, Authorizer
from autoscaler.web.security.tls import ServerTLS, ServingFiles
from autoscaler.web.shared.readiness import Readiness
from tests.pki import PKI, Client, make_pki

NOW = datetime(2026, 11, 22, 8, 0, tzinfo=UTC)

METRICS = (
    MetricInfo("gpu_demand_forecast", "GPUs expected within the lead time"),
    MetricInfo("gpu_headroom", "placeholder GPUs"),
    MetricInfo("request_rate_forecast", "requests per second"),
)


def fixed_snapshot(now: datetime = NOW) -> Snapshot:
    series = {
        "gpu_demand_forecast": (
            ServedSeries("gpu_demand_forecast", {"pool": "a100", "region": "eu"}, 12.0, now),
            ServedSeries("gpu_demand_forecast", {"pool": "h100", "region": "us"}, 3.25, now, window_seconds=300),
        ),
        "gpu_headroom": (ServedSeries("gpu_headroom", {"pool": "a100"}, 0.5, now),),
        "request_rate_forecast": (
            ServedSeries("request_rate_forecast", {"service": "llm"}, 41.0, now, namespace="inference"),
        ),
    }
    return Snapshot(created_at=now, metrics={m.name: m for m in METRICS}, series=series)


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


@dataclass
class SettableClock:
    """What the server's provider reads as now; a test moves it (past a staleness TTL, say)."""

    now: datetime

    def __call__(self) -> datetime:
        return self.now


@dataclass
class RunningServer:
    listening: Listening
    provider: SnapshotProvider
    readiness: Readiness
    pki: PKI
    tls: ServerTLS
    settings: Settings
    access: AccessControl
    clock: SettableClock
    kubeconfigs: dict[str, Path] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.listening.secure_port}"

    @property
    def ops_url(self) -> str:
        return f"http://127.0.0.1:{self.listening.http_port}"

    def ssl_context(self, client: Client | None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.client_ca))
        if client is not None:
            context.load_cert_chain(client.cert, client.key)
        return context


def server_settings(pki: PKI, tmp_path: Path, **auth: object) -> Settings:
    return Settings.model_validate(
        {
            "server": {
                "bind_address": "127.0.0.1",
                "secure_port": 0,
                "http_port": 0,
                "tls": {
                    "cert_file": str(pki.serving_cert),
                    "key_file": str(pki.serving_key),
                    "reload_interval": "100ms",
                },
                "shutdown_grace": "2s",
                "idle_timeout": "1s",
            },
            "auth": {
                "mode": "files",
                "requestheader_client_ca_file": str(pki.proxy_ca),
                "allowed_names": ["front-proxy-client"],
                "client_ca_file": str(pki.client_ca),
                "authorization": "allow-authenticated",
                **auth,
            },
            "state_dir": str(tmp_path / "state"),
        }
    )


@pytest.fixture
def authorizer_override() -> Authorizer | None:
    """Tests that need another authorizer (SubjectAccessReview) override this fixture."""
    return None


@pytest.fixture
async def api_server(pki: PKI, tmp_path: Path, authorizer_override: Authorizer | None) -> AsyncIterator[RunningServer]:
    settings = server_settings(pki, tmp_path)
    access = await build_access(settings)
    if authorizer_override is not None:
        access = AccessControl(authenticator=access.authenticator, authorizer=authorizer_override)
    clock = SettableClock(NOW + timedelta(seconds=30))
    provider = SnapshotProvider(fixed_snapshot(), clock=clock)
    readiness = Readiness(ready=True, reason="test snapshot")
    pipeline = Pipeline(
        metrics=METRICS, plans=(), sources=(), refresh=RefreshSettings(timedelta(minutes=1), timedelta(minutes=5))
    )
    api_app, ops_app = create_app(settings, pipeline=pipeline, access=access, provider=provider, readiness=readiness)
    tls = ServerTLS(ServingFiles(pki.serving_cert, pki.serving_key), client_ca_pems(access))
    async with running(settings, api_app=api_app, ops_app=ops_app, tls=tls) as listening:
        yield RunningServer(listening, provider, readiness, pki, tls, settings, access, clock)
