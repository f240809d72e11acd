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
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
import yaml

from autoscaler import persistence
from autoscaler.keda import externalscaler_pb2 as pb
from autoscaler.keda.externalscaler_pb2_grpc import ExternalScalerStub
from autoscaler.web.responses import status
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


def allowed(spec: dict[str, Any]) -> bool:
    """alice (O=team-a) may read external metrics in "default" only; prometheus may get /metrics and
    /api/v1/forecasts; nobody else anything."""
    if "resourceAttributes" in spec:
        return (
            spec["user"] == "alice"
            and spec["groups"] == ["team-a"]
            and spec["resourceAttributes"]["namespace"] == "default"
        )
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
            "authorization": "allow-authenticated",
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
