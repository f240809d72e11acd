"""auth.mode kubernetes against a fake Kubernetes API driven through kubernetes-asyncio:
the ConfigMap says whom to trust, TokenReview checks tokens, SubjectAccessReview decides."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest

from autoscaler.app.access import build_access, client_ca_pems
from autoscaler.app.factory import create_app
from autoscaler.app.serving import running
from autoscaler.config.settings import Settings
from autoscaler.refresh.pipeline import Pipeline
from autoscaler.serving.provider import SnapshotProvider
from autoscaler.targets.plans import RefreshSettings
from autoscaler.web.security.tls import ServerTLS, ServingFiles
from autoscaler.web.shared.readiness import Readiness
from tests.autoscaler.conftest import METRICS, NOW, fixed_snapshot
from tests.fakekube import FakeKube
from tests.pki import PKI

METRIC_PATH = "/apis/external.metrics.k8s.io/v1beta1/namespaces/team-a/gpu_headroom"


@pytest.fixture
async def kube_mode_server(pki: PKI, tmp_path: Path, fake_kube: FakeKube, kube_api):
    fake_kube.set_request_header_config(
        requestheader_client_ca=pki.proxy_ca.read_text(),
        allowed_names=["front-proxy-client"],
        client_ca=pki.client_ca.read_text(),
    )
    fake_kube.tokens = {
        "good-token": {
            "username": "system:serviceaccount:kube-system:hpa",
            "uid": "1",
            "groups": ["system:serviceaccounts"],
        }
    }
    fake_kube.sar_rule = lambda spec: spec["user"] in {"system:serviceaccount:kube-system:hpa", "bob"}
    settings = Settings.model_validate(
        {
            "server": {"bind_address": "127.0.0.1", "secure_port": 0, "http_port": 0, "shutdown_grace": "1s"},
            "auth": {"mode": "kubernetes", "authorization_cache_ttl": "10s"},
            "state_dir": str(tmp_path / "state"),
        }
    )
    access = await build_access(settings, kube_api)
    provider = SnapshotProvider(fixed_snapshot(), clock=lambda: NOW)
    pipeline = Pipeline(
        metrics=METRICS, plans=(), sources=(), refresh=RefreshSettings(timedelta(minutes=1), timedelta(minutes=5))
    )
    api_app, ops_app = create_app(
        settings, pipeline=pipeline, access=access, provider=provider, readiness=Readiness(ready=True)
    )
    tls = ServerTLS(ServingFiles(pki.serving_cert, pki.serving_key), client_ca_pems(access))
    async with running(settings, api_app=api_app, ops_app=ops_app, tls=tls) as listening:
        yield f"https://127.0.0.1:{listening.secure_port}"


def context(pki: PKI, client=None):
    import ssl

    ssl_context = ssl.create_default_context(cafile=str(pki.client_ca))
    if client is not None:
        ssl_context.load_cert_chain(client.cert, client.key)
    return ssl_context


async def fetch(url: str, pki: PKI, client=None, headers=None) -> tuple[int, dict]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url + METRIC_PATH, ssl=context(pki, client), headers=headers) as response,
    ):
        return response.status, await response.json(content_type=None)


async def test_bearer_token_reviewed_then_authorised(kube_mode_server, pki, fake_kube):
    code, body = await fetch(kube_mode_server, pki, headers={"Authorization": "Bearer good-token"})
    assert code == 200, body
    assert fake_kube.sar_requests[-1]["resourceAttributes"] == {
        "verb": "get",
        "group": "external.metrics.k8s.io",
        "resource": "gpu_headroom",
        "namespace": "team-a",
    }
    assert fake_kube.sar_requests[-1]["user"] == "system:serviceaccount:kube-system:hpa"


async def test_unknown_token_is_401(kube_mode_server, pki):
    code, body = await fetch(kube_mode_server, pki, headers={"Authorization": "Bearer forged"})
    assert code == 401
    assert body["reason"] == "Unauthorized"


async def test_subject_access_review_deny_is_403(kube_mode_server, pki, fake_kube):
    code, body = await fetch(
        kube_mode_server, pki, pki.proxy, headers={"X-Remote-User": "eve", "X-Remote-Group": "devs"}
    )
    assert code == 403
    assert body["reason"] == "Forbidden"
    assert fake_kube.sar_requests[-1]["user"] == "eve"
    assert fake_kube.sar_requests[-1]["groups"] == ["devs"]


async def test_proxy_from_the_configmap_ca_is_trusted(kube_mode_server, pki):
    code, _ = await fetch(kube_mode_server, pki, pki.proxy, headers={"X-Remote-User": "bob"})
    assert code == 200


async def test_allow_and_deny_answers_are_cached(kube_mode_server, pki, fake_kube):
    for _ in range(3):
        await fetch(kube_mode_server, pki, pki.proxy, headers={"X-Remote-User": "bob"})
        await fetch(kube_mode_server, pki, pki.proxy, headers={"X-Remote-User": "eve"})
    assert [spec["user"] for spec in fake_kube.sar_requests] == ["bob", "eve"]


@pytest.mark.parametrize("mode", ["unreachable", "500"])
async def test_reviews_unavailable_fail_closed(kube_mode_server, pki, fake_kube, mode):
    fake_kube.fail_mode = mode
    code, _ = await fetch(kube_mode_server, pki, headers={"Authorization": "Bearer good-token"})
    assert code == 401
    code, _ = await fetch(kube_mode_server, pki, pki.proxy, headers={"X-Remote-User": "bob"})
    assert code == 403


async def test_missing_configmap_stops_start_up(fake_kube, kube_api, tmp_path):
    from adapters.kubernetes.client import KubeError

    settings = Settings.model_validate({"auth": {"mode": "kubernetes"}, "state_dir": str(tmp_path)})
    with pytest.raises(KubeError, match="extension-apiserver-authentication"):
        await build_access(settings, kube_api)


async def test_allow_authenticated_asks_no_review_though_kubernetes_serves_other_checks(pki, kube_api, tmp_path):
    """auth.authorization: allow-authenticated with the Kubernetes API in use for the gRPC port's
    reviews: the HTTPS API still asks no SubjectAccessReview (docs/configuration.md)."""
    from autoscaler.web.security.auth import AllowAuthenticated

    def settings(authorization: str) -> Settings:
        return Settings.model_validate(
            {
                "server": {"grpc_authorization": "subjectaccessreview", "grpc_client_ca_file": str(pki.client_ca)},
                "auth": {"mode": "files", "client_ca_file": str(pki.client_ca), "authorization": authorization},
                "state_dir": str(tmp_path / "state"),
            }
        )

    assert isinstance((await build_access(settings("allow-authenticated"), kube_api)).authorizer, AllowAuthenticated)
    assert not isinstance((await build_access(settings("kubernetes"), kube_api)).authorizer, AllowAuthenticated)
