"""The authentication ConfigMap followed live, end to end: ``serve`` against the fake Kubernetes API,
real TLS on the secure port. A request-header CA rotated in kube-system/extension-apiserver-
authentication takes effect without a restart (the new CA's client certificates accepted, the old
one's refused in the handshake); a ConfigMap that becomes unusable keeps the last good configuration
serving and says so in /readyz?verbose."""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path

import aiohttp
import pytest

from autoscaler.app.serving import serve
from autoscaler.config.settings import Settings
from autoscaler.web.security.certificates import generate_ca, issue_certificate
from tests.eventually import eventually
from tests.fakekube import FakeKube
from tests.pki import PKI, Client, make_pki

DISCOVERY = "/apis/external.metrics.k8s.io/v1beta1"
FOLLOWING = "authentication: following ConfigMap kube-system/extension-apiserver-authentication"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Served:
    def __init__(self, pki: PKI, secure_port: int, http_port: int) -> None:
        self.pki = pki
        self.secure = f"https://127.0.0.1:{secure_port}"
        self.http = f"http://127.0.0.1:{http_port}"

    async def as_proxy(self, client: Client) -> int | str:
        """The status of an aggregated request made with ``client``'s certificate, or "refused" when the
        TLS handshake refused the certificate."""
        context = ssl.create_default_context(cafile=str(self.pki.client_ca))  # the serving cert's CA
        context.load_cert_chain(client.cert, client.key)
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(self.secure + DISCOVERY, ssl=context, headers={"X-Remote-User": "bob"}) as response,
            ):
                return response.status
        except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError, ssl.SSLError):
            return "refused"

    async def get(self, path: str) -> tuple[int, str]:
        async with aiohttp.ClientSession() as session, session.get(self.http + path) as response:
            return response.status, await response.text()

    async def tls_refusals(self) -> float:
        _, text = await self.get("/metrics")
        counter = 'gpu_autoscaler_auth_failures_total{code="tls"}'
        return float(next(line for line in text.splitlines() if line.startswith(counter)).split()[-1])


@pytest.fixture
async def served(fake_kube: FakeKube, tmp_path: Path):
    pki = make_pki(tmp_path / "pki")
    fake_kube.set_request_header_config(
        requestheader_client_ca=pki.proxy_ca.read_text(), allowed_names=["front-proxy-client"]
    )
    secure_port, http_port = free_port(), free_port()
    settings = Settings.model_validate(
        {
            "server": {
                "bind_address": "127.0.0.1",
                "secure_port": secure_port,
                "http_port": http_port,
                "shutdown_delay": "0s",
                "shutdown_grace": "1s",
                "tls": {"cert_file": str(pki.serving_cert), "key_file": str(pki.serving_key)},
            },
            "auth": {"mode": "kubernetes", "authorization": "allow-authenticated"},
            "kubernetes": {"kubeconfig": str(fake_kube.kubeconfig_path)},
            "state_dir": str(tmp_path / "state"),
        }
    )
    stop = asyncio.Event()
    task = asyncio.create_task(serve(settings, stop=stop))
    server = Served(pki, secure_port, http_port)

    async def serving() -> bool:
        if task.done():
            task.result()  # serve ended: its error ends the wait
        assert await server.as_proxy(pki.proxy) == 200
        return True

    try:
        await eventually(serving, message="the service to serve the proxy CA's client", timeout=30)
        yield server
    finally:
        stop.set()
        await task


def rotated_ca(directory: Path) -> tuple[str, Client]:
    """A new front-proxy CA (PEM) and a front-proxy-client certificate it issued."""
    authority = generate_ca("rotated front-proxy CA")
    cert, key = directory / "proxy2.crt", directory / "proxy2.key"
    issue_certificate(authority, "front-proxy-client", client=True).write(cert, key)
    authority.write(directory / "proxy-ca2.crt", directory / "proxy-ca2.key")
    return (directory / "proxy-ca2.crt").read_text(), Client(cert, key)


async def test_rotated_request_header_ca_takes_effect_without_a_restart(served, fake_kube, tmp_path):
    new_ca, new_proxy = rotated_ca(tmp_path / "pki")
    assert await served.as_proxy(served.pki.proxy) == 200
    assert await served.as_proxy(new_proxy) == "refused"
    watching = fake_kube.watchers("configmaps")
    assert watching == 1

    fake_kube.set_request_header_config(requestheader_client_ca=new_ca, allowed_names=["front-proxy-client"])

    async def new_ca_accepted() -> bool:
        assert await served.as_proxy(new_proxy) == 200
        return True

    await eventually(new_ca_accepted, message="the rotated CA's client certificate to be accepted")
    refusals = await served.tls_refusals()
    assert await served.as_proxy(served.pki.proxy) == "refused"
    assert await served.tls_refusals() > refusals  # refused in the handshake (and counted), no 401 answer
    status, verbose = await served.get("/readyz?verbose")
    shown = next(line for line in verbose.splitlines() if "authentication" in line)
    assert (status, shown) == (200, f"[+]{FOLLOWING} (1 updates)")


async def test_allowed_names_follow_the_configmap_too(served, fake_kube):
    fake_kube.set_request_header_config(
        requestheader_client_ca=served.pki.proxy_ca.read_text(), allowed_names=["someone-else"]
    )

    async def name_refused() -> bool:
        assert await served.as_proxy(served.pki.proxy) == 401
        return True

    await eventually(name_refused, message="the proxy's CN to be refused once no longer allowed")
    assert await served.as_proxy(served.pki.proxy_not_allowed) == 200  # its CN is "someone-else"


@pytest.mark.parametrize(
    ("break_it", "problem"),
    [
        (
            lambda fake: fake.set_request_header_config(requestheader_client_ca="not a certificate"),
            "failing: extension-apiserver-authentication: requestheader-client-ca-file is not a PEM certificate bundle",
        ),
        (
            lambda fake: fake.delete("configmaps", "extension-apiserver-authentication", "kube-system"),
            "failing: ConfigMap kube-system/extension-apiserver-authentication is gone; keeping the last good",
        ),
    ],
    ids=["not-pem", "deleted"],
)
async def test_an_unusable_configmap_keeps_the_last_good_and_says_so(served, fake_kube, break_it, problem):
    break_it(fake_kube)

    async def reported() -> str:
        status, verbose = await served.get("/readyz?verbose")
        line = next(line for line in verbose.splitlines() if "authentication" in line)
        assert line.startswith(f"[-]authentication: {problem}"), line
        return str(status)

    assert await eventually(reported, message="/readyz?verbose to show the unusable ConfigMap") == "200"
    assert await served.as_proxy(served.pki.proxy) == 200  # still the last good configuration
