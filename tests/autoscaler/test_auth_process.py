"""Issue 30's authentication and authorization cases against the real ``gpu-autoscaler serve``
process, with a non-demo configuration whose Kubernetes API is the fake one served in this process
(``tests.fakekube``: TokenReview and SubjectAccessReview checked against the upstream schema):

- ``server.grpc_authorization: subjectaccessreview``: a caller allowed in ``default`` only is
  ``PERMISSION_DENIED`` in ``inference`` with kube-apiserver's message; one review per question; a
  review that cannot be made refuses;
- ``server.http_auth: delegated`` on the ops port: no token or a rejected one is a 401 Status with no
  SubjectAccessReview, a token not allowed for the path a 403, probes open;
- a request-header (front proxy) certificate whose CN is not allowed: 401 each time, counted, one log line.

The values served come from a restored state file (the configured Prometheus is never reachable).
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
import yaml

from autoscaler.keda import externalscaler_pb2 as pb
from autoscaler.keda.externalscaler_pb2_grpc import ExternalScalerStub
from autoscaler.serving import persistence
from autoscaler.web.shared.responses import status
from tests.autoscaler.demo_process import DemoProcess
from tests.fakekube import FakeKube
from tests.pki import PKI, Client
from tests.prometheus_fixture import free_port

pytestmark = [pytest.mark.slow]

SERVICE_ACCOUNTS = ["system:serviceaccounts"]
PROMETHEUS = {"username": "system:serviceaccount:monitoring:prometheus", "uid": "7", "groups": SERVICE_ACCOUNTS}
NOBODY = {"username": "system:serviceaccount:default:nobody", "uid": "8", "groups": SERVICE_ACCOUNTS}
TOKENS = {"prometheus-token": PROMETHEUS, "nobody-token": NOBODY}
TRIGGER = {"metric": "gpu_headroom", "labelSelector": "pool=a100", "targetValue": "1"}
SAVED_VALUE = 3.0
FORBIDDEN = (
    'external.metrics.k8s.io "gpu_headroom" is forbidden: User "alice" cannot get resource "gpu_headroom" in API '
    'group "external.metrics.k8s.io" in the namespace "inference"'
)
UNAUTHORIZED = status(401, "Unauthorized")
EXTERNAL_METRICS = "/apis/external.metrics.k8s.io/v1beta1"


def allowed(spec: dict[str, Any]) -> bool:
    """alice (O=team-a, by certificate) and bob (group team-b, through the front proxy) may read
    external metrics in "default" only; prometheus may get /metrics and /api/v1/forecasts; nobody
    else anything."""
    if "resourceAttributes" in spec:
        return (spec["user"], spec["groups"]) in (("alice", ["team-a"]), ("bob", ["team-b"])) and spec[
            "resourceAttributes"
        ]["namespace"] == "default"
    return spec["user"] == PROMETHEUS["username"] and spec["nonResourceAttributes"]["path"] in (
        "/metrics",
        "/api/v1/forecasts",
    )


def settings(pki: PKI, fake: FakeKube, state: Path) -> dict[str, Any]:
    return {
        "server": {
            "bind_address": "127.0.0.1",
            "grpc_port": 0,
            "grpc_client_ca_file": str(pki.client_ca),
            "grpc_authorization": "subjectaccessreview",
            "http_auth": "delegated",
            "shutdown_delay": "0s",
            "shutdown_grace": "1s",
            "tls": {"cert_file": str(pki.serving_cert), "key_file": str(pki.serving_key)},
        },
        "auth": {
            "mode": "files",
            "client_ca_file": str(pki.client_ca),
            "requestheader_client_ca_file": str(pki.proxy_ca),
            "allowed_names": ["front-proxy-client"],
            "authorization": "kubernetes",
            # Long enough that every verdict of a test is still cached at its end (case 5 counts them).
            "authorization_cache_ttl": "10m",
        },
        "kubernetes": {"kubeconfig": str(fake.kubeconfig_path), "request_timeout": "5s"},
        # Nothing listens there: the served value is the restored one.
        "prometheus": {"url": f"http://127.0.0.1:{free_port()}", "timeout": "1s"},
        "signals": [{"name": "gpus", "query": "gpus", "by": ["pool"]}],
        "metrics": {"gpu_headroom": {"signal": "gpus", "kind": "demand"}},
        "preflight": {"on_start": False},
        "state_dir": str(state),
    }


def saved_values(now: datetime) -> str:
    entry = {"metric": "gpu_headroom", "labels": {"pool": "a100"}, "timestamp": now.isoformat(), "value": SAVED_VALUE}
    return json.dumps({"version": 1, "created_at": now.isoformat(), "series": [entry]})


@pytest.fixture
async def service(pki: PKI, fake_kube: FakeKube, tmp_path: Path) -> AsyncIterator[DemoProcess]:
    fake_kube.tokens = dict(TOKENS)
    fake_kube.sar_rule = allowed
    state = tmp_path / "state"
    state.mkdir()
    (state / persistence.FILE_NAME).write_text(saved_values(datetime.now(UTC) - timedelta(minutes=1)))
    config = tmp_path / "settings.yaml"
    config.write_text(yaml.safe_dump(settings(pki, fake_kube, state)))
    process = DemoProcess(state, config=config)
    # start() reads the log synchronously; the fake API must keep answering meanwhile.
    await asyncio.to_thread(process.start)
    try:
        yield process
    finally:
        code = await asyncio.to_thread(process.stop)
        print(process.log)  # shown when the test failed
        assert code == 0


def grpc_port(service: DemoProcess) -> int:
    found = re.search(r"KEDA external scaler \(gRPC over TLS \(mutual TLS\)\) on 127\.0\.0\.1:(\d+)", service.log)
    assert found, service.log
    return int(found.group(1))


def channel(service: DemoProcess, pki: PKI, client: Client) -> grpc.aio.Channel:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=pki.client_ca.read_bytes(),
        private_key=client.key.read_bytes(),
        certificate_chain=client.cert.read_bytes(),
    )
    return grpc.aio.secure_channel(f"127.0.0.1:{grpc_port(service)}", credentials)


def metrics_request(namespace: str) -> pb.GetMetricsRequest:
    reference = pb.ScaledObjectRef(name="placeholders", namespace=namespace, scalerMetadata=TRIGGER)
    return pb.GetMetricsRequest(scaledObjectRef=reference, metricName="gpu_headroom")


async def refusal(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value


async def get(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        return response.status, await response.text()


async def scrape(service: DemoProcess) -> str:
    code, text = await get(f"{service.http_url}/metrics", "prometheus-token")
    assert code == 200, text
    return text


async def test_grpc_calls_are_authorized_by_a_subject_access_review_of_the_certificate(service, pki, fake_kube):
    async with channel(service, pki, pki.alice) as opened:
        stub = ExternalScalerStub(opened)
        for _ in range(3):  # the same questions again ask nothing more: cached
            answer = await stub.GetMetrics(metrics_request("default"))
            assert [value.metricValueFloat for value in answer.metricValues] == [SAVED_VALUE]
            error = await refusal(stub.GetMetrics(metrics_request("inference")))
            assert (error.code(), error.details()) == (grpc.StatusCode.PERMISSION_DENIED, FORBIDDEN)
        assert fake_kube.sar_requests == [
            {
                "user": "alice",
                "groups": ["team-a"],
                "resourceAttributes": {
                    "verb": "get",
                    "group": "external.metrics.k8s.io",
                    "resource": "gpu_headroom",
                    "namespace": namespace,
                },
            }
            for namespace in ("default", "inference")
        ]
        fake_kube.fail_mode = "500"  # a question not cached yet cannot be reviewed: refused
        error = await refusal(stub.GetMetrics(metrics_request("batch")))
        assert (error.code(), error.details()) == (
            grpc.StatusCode.PERMISSION_DENIED,
            "Forbidden: access could not be reviewed",
        )
        fake_kube.fail_mode = None
    metrics = await scrape(service)
    assert 'gpu_autoscaler_grpc_requests_total{code="PERMISSION_DENIED",method="GetMetrics"} 4.0' in metrics
    assert 'gpu_autoscaler_grpc_requests_total{code="OK",method="GetMetrics"} 3.0' in metrics


async def test_the_ops_port_asks_kubernetes_for_everything_but_the_probes(service, fake_kube):
    for path in ("/healthz", "/readyz"):
        assert await get(service.http_url + path) == (200, "ok"), path
    for token in (None, "forged-token"):
        for path in ("/metrics", "/", "/api/v1/forecasts", "/ui/gpu_headroom"):
            code, body = await get(service.http_url + path, token)
            assert (code, json.loads(body)) == (401, UNAUTHORIZED), (token, path)
    assert fake_kube.sar_requests == []
    # The rejected token was reviewed once (its refusal cached, as kube-apiserver's webhook caches it).
    assert [request["spec"]["token"] for request in fake_kube.token_requests] == ["forged-token"]
    code, body = await get(service.http_url + "/", "prometheus-token")
    assert (code, json.loads(body)) == (
        403,
        status(403, 'Forbidden: User "system:serviceaccount:monitoring:prometheus" cannot get path "/"'),
    )
    code, body = await get(service.http_url + "/metrics", "nobody-token")
    assert (code, json.loads(body)) == (
        403,
        status(403, 'Forbidden: User "system:serviceaccount:default:nobody" cannot get path "/metrics"'),
    )
    code, body = await get(service.http_url + "/api/v1/forecasts", "prometheus-token")
    assert code == 200 and '"gpu_headroom"' in body, body
    metrics = await scrape(service)
    assert [(spec["user"], spec["nonResourceAttributes"]) for spec in fake_kube.sar_requests] == [
        (PROMETHEUS["username"], {"path": "/", "verb": "get"}),
        (NOBODY["username"], {"path": "/metrics", "verb": "get"}),
        (PROMETHEUS["username"], {"path": "/api/v1/forecasts", "verb": "get"}),
        (PROMETHEUS["username"], {"path": "/metrics", "verb": "get"}),
    ]
    assert 'gpu_autoscaler_auth_failures_total{code="401"} 8.0' in metrics
    assert 'gpu_autoscaler_auth_failures_total{code="403"} 2.0' in metrics


async def https_get(service: DemoProcess, pki: PKI, client: Client, headers: dict[str, str]) -> tuple[int, Any]:
    context = ssl.create_default_context(cafile=pki.client_ca)
    context.load_cert_chain(client.cert, client.key)
    url = f"https://127.0.0.1:{service.secure_port}{EXTERNAL_METRICS}/namespaces/default/gpu_headroom"
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers, ssl=context) as response:
        return response.status, await response.json(content_type=None)


async def test_a_front_proxy_name_not_allowed_is_401_counted_each_time_and_logged_once(service, pki):
    as_bob = {"X-Remote-User": "bob", "X-Remote-Group": "team-b"}
    code, body = await https_get(service, pki, pki.proxy, as_bob)  # the allowed proxy: bob is served
    assert code == 200 and [item["value"] for item in body["items"]] == ["3"], body
    for _ in range(5):
        assert await https_get(service, pki, pki.proxy_not_allowed, as_bob) == (401, UNAUTHORIZED)
    logged = r"WARNING\s+autoscaler\.web\.security\.auth: " + re.escape(
        "request-header client certificate CN 'someone-else' is not in the allowed names: its headers are ignored"
    )
    await service.wait_for_log(logged)
    assert len([line for line in service.lines if re.search(logged, line)]) == 1, service.log
    assert 'gpu_autoscaler_auth_failures_total{code="401"} 5.0' in await scrape(service)


def rss_bytes(pid: int) -> int:
    """The process's resident set, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


LONG = 60_000


def quoted(text: str) -> str:
    """What a refusal quotes of a long ASCII input: its first 1 KiB and how much was left out."""
    return f"{text[:1024]}... ({len(text) - 1024} more bytes)"


async def test_distinct_long_paths_and_metric_names_leave_memory_bounded(service, pki, fake_kube):
    """Issue 38, case 5: the probe's 4,000 distinct 60 KB paths on the ops port with an allowed token,
    and 1,000 distinct 60 KB metric names over HTTPS, each a SubjectAccessReview whose verdict is
    cached. The caches are bounded by bytes: RSS grows by less than 100 MB (each verdict kept about
    71 KB before, up to 16,384 of them), and every refusal quotes 1 KiB of the path or name."""
    headers = {"Authorization": "Bearer prometheus-token"}
    assert (await get(f"{service.http_url}/metrics", "prometheus-token"))[0] == 200
    before = rss_bytes(service.process.pid)
    context = ssl.create_default_context(cafile=pki.client_ca)
    context.load_cert_chain(pki.alice.cert, pki.alice.key)
    parallel = asyncio.Semaphore(8)

    async def refused(session: aiohttp.ClientSession, url: str, **options: Any) -> dict[str, Any]:
        async with parallel, session.get(url, **options) as response:
            body = await response.read()
            assert (response.status, len(body) < 4096) == (403, True), (response.status, len(body))
            document: dict[str, Any] = json.loads(body)
            return document

    async with aiohttp.ClientSession(headers=headers) as session:
        pages = [f"{service.http_url}/ui/{index:05d}{'p' * LONG}" for index in range(4_000)]
        answers = await asyncio.gather(*(refused(session, url) for url in pages))
    user = PROMETHEUS["username"]
    path = f"/ui/00000{'p' * LONG}"
    assert answers[0] == status(403, f'Forbidden: User "{user}" cannot get path "{quoted(path)}"')
    async with aiohttp.ClientSession() as session:
        names = [f"{index:05d}{'m' * LONG}" for index in range(1_000)]
        base = f"https://127.0.0.1:{service.secure_port}{EXTERNAL_METRICS}/namespaces/inference/"
        answers = await asyncio.gather(*(refused(session, base + name, ssl=context) for name in names))
    assert answers[0]["details"]["name"] == quoted(names[0])
    grown = rss_bytes(service.process.pid) - before
    assert len(fake_kube.sar_requests) >= 5_000
    print(f"RSS grew {grown / 2**20:.1f} MiB")
    assert grown < 100 * 1024 * 1024, f"RSS grew {grown / 2**20:.0f} MiB"
