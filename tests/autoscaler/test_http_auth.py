"""``server.http_auth: delegated`` on the plain port against the fake Kubernetes API (reviews checked
against the upstream schema): a bearer token reviewed by TokenReview, then a SubjectAccessReview of the
path and verb, as controller-runtime's secure metrics serving and kube-rbac-proxy ask; probes open."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient

from autoscaler.app.access import build_access, client_ca_pems
from autoscaler.app.factory import create_app
from autoscaler.app.serving import guard_plain_port, running
from autoscaler.config.settings import Settings
from autoscaler.refresh.pipeline import Pipeline
from autoscaler.serving.provider import SnapshotProvider
from autoscaler.targets.plans import RefreshSettings
from autoscaler.web.security.tls import ServerTLS, ServingFiles
from autoscaler.web.shared.readiness import Readiness
from autoscaler.web.shared.responses import status
from tests.autoscaler.conftest import METRICS, NOW, fixed_snapshot
from tests.fakekube import FakeKube
from tests.pki import PKI

PROMETHEUS = {
    "username": "system:serviceaccount:monitoring:prometheus",
    "uid": "7",
    "groups": ["system:serviceaccounts"],
}
NOBODY = {"username": "system:serviceaccount:default:nobody", "uid": "8", "groups": ["system:serviceaccounts"]}


@pytest.fixture
async def plain_port(pki: PKI, tmp_path: Path, fake_kube: FakeKube, kube_api: ApiClient) -> AsyncIterator[str]:
    fake_kube.tokens = {"prometheus-token": PROMETHEUS, "nobody-token": NOBODY}
    # prometheus may get /metrics and the inspection API, nothing else; nobody may get nothing.
    fake_kube.sar_rule = lambda spec: (
        spec["user"] == PROMETHEUS["username"]
        and (spec["nonResourceAttributes"]["path"] in ("/metrics", "/api/v1/forecasts"))
    )
    settings = Settings.model_validate(
        {
            "server": {
                "bind_address": "127.0.0.1",
                "secure_port": 0,
                "http_port": 0,
                "shutdown_grace": "1s",
                "http_auth": "delegated",
                "tls": {"cert_file": str(pki.serving_cert), "key_file": str(pki.serving_key)},
            },
            "auth": {"mode": "files", "client_ca_file": str(pki.client_ca), "authorization": "allow-authenticated"},
            "state_dir": str(tmp_path / "state"),
        }
    )
    access = await build_access(settings, kube_api)
    pipeline = Pipeline(
        metrics=METRICS, plans=(), sources=(), refresh=RefreshSettings(timedelta(minutes=1), timedelta(minutes=5))
    )
    provider = SnapshotProvider(fixed_snapshot(), clock=lambda: NOW)
    api_app, ops_app = create_app(
        settings, pipeline=pipeline, access=access, provider=provider, readiness=Readiness(ready=True), kube=kube_api
    )
    guard_plain_port(settings, ops_app, kube_api)  # as serve does
    tls = ServerTLS(ServingFiles(pki.serving_cert, pki.serving_key), client_ca_pems(access))
    async with running(settings, api_app=api_app, ops_app=ops_app, tls=tls) as listening:
        yield f"http://127.0.0.1:{listening.http_port}"


async def get(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        return response.status, await response.text()


async def test_probes_stay_open(plain_port):
    for path in ("/healthz", "/livez", "/readyz"):
        assert await get(plain_port + path) == (200, "ok")


async def test_no_token_or_a_rejected_one_is_401(plain_port, fake_kube):
    unauthorized = status(401, "Unauthorized")
    for token in (None, "forged-token"):
        for path in ("/metrics", "/", "/api/v1/forecasts", "/ui/gpu_headroom"):
            code, body = await get(plain_port + path, token)
            assert (code, json.loads(body)) == (401, unauthorized), path
    assert fake_kube.sar_requests == []


async def test_an_allowed_token_reads_and_a_forbidden_one_is_403(plain_port, fake_kube):
    code, body = await get(plain_port + "/metrics", "prometheus-token")
    assert code == 200 and "gpu_autoscaler_served_value" in body
    assert (await get(plain_port + "/api/v1/forecasts", "prometheus-token"))[0] == 200
    code, body = await get(plain_port + "/", "prometheus-token")
    assert (code, json.loads(body)) == (
        403,
        status(403, 'Forbidden: User "system:serviceaccount:monitoring:prometheus" cannot get path "/"'),
    )
    code, _ = await get(plain_port + "/metrics", "nobody-token")
    assert code == 403
    # Cached: asking again sends no review.
    await get(plain_port + "/metrics", "prometheus-token")
    assert [request["spec"]["token"] for request in fake_kube.token_requests] == ["prometheus-token", "nobody-token"]
    assert fake_kube.sar_requests == [
        {
            "user": user["username"],
            "uid": user["uid"],
            "groups": user["groups"],
            "nonResourceAttributes": {"path": path, "verb": "get"},
        }
        for user, path in [
            (PROMETHEUS, "/metrics"),
            (PROMETHEUS, "/api/v1/forecasts"),
            (PROMETHEUS, "/"),
            (NOBODY, "/metrics"),
        ]
    ]
    code, metrics = await get(plain_port + "/metrics", "prometheus-token")
    assert 'gpu_autoscaler_auth_failures_total{code="403"} 2.0' in metrics


async def test_reviews_that_cannot_be_made_refuse(plain_port, fake_kube):
    fake_kube.fail_mode = "500"
    code, body = await get(plain_port + "/metrics", "prometheus-token")
    assert (code, json.loads(body)) == (
        401,
        status(401, "Unauthorized: the token could not be reviewed"),
    )
