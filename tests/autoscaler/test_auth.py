"""Authentication over real TLS: client certificates, request-header proxies, forged headers."""

from __future__ import annotations

import ssl

import aiohttp
import pytest

from autoscaler.web.security.auth import AccessDenied, User
from tests.autoscaler.conftest import RunningServer

METRIC_PATH = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/gpu_demand_forecast"


class RecordingAuthorizer:
    """Allows only user 'bob' (via the proxy) and 'alice'; records who asked for what."""

    def __init__(self) -> None:
        self.calls: list[tuple[User, str, str]] = []

    async def authorize(self, user: User, *, namespace: str, metric: str) -> None:
        self.calls.append((user, namespace, metric))
        if user.username not in {"alice", "bob"}:
            raise AccessDenied(403, f"user {user.username} may not get {metric}")


@pytest.fixture
def authorizer_override():
    return RecordingAuthorizer()


async def request(server: RunningServer, client_name: str | None, headers: dict | None = None) -> tuple[int, dict]:
    client = getattr(server.pki, client_name) if client_name else None
    async with (
        aiohttp.ClientSession() as session,
        session.get(server.base_url + METRIC_PATH, ssl=server.ssl_context(client), headers=headers) as response,
    ):
        return response.status, await response.json(content_type=None)


async def test_client_certificate_from_the_client_ca_authenticates(api_server, authorizer_override):
    code, _ = await request(api_server, "alice")
    assert code == 200
    user, namespace, metric = authorizer_override.calls[-1]
    assert (user.username, user.groups, namespace, metric) == ("alice", ("team-a",), "default", "gpu_demand_forecast")


async def test_no_certificate_is_401(api_server):
    code, body = await request(api_server, None)
    assert code == 401
    assert body["reason"] == "Unauthorized" and body["kind"] == "Status"


async def test_headers_without_a_verified_proxy_certificate_are_ignored(api_server, authorizer_override):
    forged = {"X-Remote-User": "bob", "X-Remote-Group": "system:masters"}
    code, _ = await request(api_server, None, forged)
    assert code == 401
    # alice's own (non-proxy) certificate does not make her headers trusted either
    code, _ = await request(api_server, "alice", forged)
    assert code == 200
    assert authorizer_override.calls[-1][0].username == "alice"


async def test_front_proxy_certificate_asserts_the_user_from_headers(api_server, authorizer_override):
    headers = [
        ("X-Remote-User", "bob"),
        ("X-Remote-Group", "devs"),
        ("X-Remote-Group", "ops"),
        ("X-Remote-Extra-Scopes", "view"),
    ]
    client = api_server.pki.proxy
    async with (
        aiohttp.ClientSession() as session,
        session.get(api_server.base_url + METRIC_PATH, ssl=api_server.ssl_context(client), headers=headers) as response,
    ):
        assert response.status == 200
    user = authorizer_override.calls[-1][0]
    assert (user.username, user.groups, dict(user.extra)) == ("bob", ("devs", "ops"), {"scopes": ("view",)})


async def test_front_proxy_with_a_cn_not_allowed_is_401(api_server):
    code, body = await request(api_server, "proxy_not_allowed", {"X-Remote-User": "bob"})
    assert code == 401
    assert body["reason"] == "Unauthorized"


async def test_front_proxy_without_user_header_is_401(api_server):
    code, _ = await request(api_server, "proxy")
    assert code == 401


async def test_authorizer_denial_is_403(api_server):
    code, body = await request(api_server, "proxy", {"X-Remote-User": "eve"})
    assert code == 403
    assert body["reason"] == "Forbidden" and "eve" in body["message"]
    assert body["details"] == {
        "group": "external.metrics.k8s.io",
        "name": "gpu_demand_forecast",
        "kind": "ExternalMetricValueList",
    }


@pytest.mark.parametrize("client_name", ["stranger", "expired"])
async def test_certificates_tls_cannot_verify_are_refused_at_the_handshake(api_server, client_name):
    # Python's ssl module verifies a presented client certificate during the handshake and has no
    # hook to defer the verdict to HTTP, so these never reach a handler: the connection is refused
    # with a TLS alert instead of a 401. Either way no request is served.
    with pytest.raises((aiohttp.ClientConnectionError, ssl.SSLError)):
        await request(api_server, client_name)


async def test_bearer_token_without_token_review_is_401(api_server):
    code, _ = await request(api_server, None, {"Authorization": "Bearer abc"})
    assert code == 401


async def test_auth_failures_are_counted(api_server):
    await request(api_server, None)
    async with aiohttp.ClientSession() as session, session.get(api_server.ops_url + "/metrics") as response:
        text = await response.text()
    assert 'gpu_autoscaler_auth_failures_total{code="401"} 1.0' in text
