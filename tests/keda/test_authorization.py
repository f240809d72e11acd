"""``server.grpc_authorization: subjectaccessreview`` against the fake Kubernetes API (its reviews are
checked against the upstream schema): the client certificate's CN and O ask to get the external metric
in the trigger's namespace, as the HTTPS API asks; answers are cached as kube-apiserver's webhook
authorizer caches them (allowed 5 min, denied 30 s)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import grpc
import pytest
from kubernetes_asyncio.client import ApiClient

from autoscaler.app.api_loop import on_own_loop, reviews_on
from autoscaler.app.serving import GRPC_THREAD
from autoscaler.config.server_settings import ServerSettings
from autoscaler.keda.externalscaler_pb2_grpc import ExternalScalerStub
from autoscaler.keda.server import serving_grpc
from autoscaler.serving.provider import SnapshotProvider
from autoscaler.web.security import kubernetes_auth
from autoscaler.web.security.auth import AccessControl
from autoscaler.web.security.tls import ServingFiles
from autoscaler.web.shared.self_metrics import SelfMetrics
from tests.autoscaler.conftest import NOW, SettableClock, fixed_snapshot
from tests.eventually import eventually
from tests.fakekube import FakeKube
from tests.keda.conftest import Scaler, grpc_settings, ref
from tests.keda.test_rpcs import metrics_request, refusal
from tests.pki import PKI

FORBIDDEN = (
    'external.metrics.k8s.io "gpu_headroom" is forbidden: User "alice" cannot get resource "gpu_headroom" in API '
    'group "external.metrics.k8s.io" in the namespace "inference"'
)


@pytest.fixture
async def authorized_scaler(pki: PKI, fake_kube: FakeKube, kube_api: ApiClient) -> AsyncIterator[Scaler]:
    # alice (O=team-a) may read metrics in "default" only.
    fake_kube.sar_rule = lambda spec: (
        spec["user"] == "alice"
        and spec["groups"] == ["team-a"]
        and spec["resourceAttributes"]["namespace"] == "default"
    )
    clock = SettableClock(NOW + timedelta(seconds=30))
    provider = SnapshotProvider(fixed_snapshot(), clock=clock)
    metrics = SelfMetrics()
    # As ``serve`` runs it: the server on a loop thread of its own, its reviews on this (the main)
    # loop, where the API client's session lives.
    access = AccessControl(None, None, grpc_authorizer=kubernetes_auth.grpc_authorizer(kube_api))
    served = serving_grpc(
        grpc_settings(pki, grpc_authorization="subjectaccessreview"),
        provider=provider,
        self_metrics=metrics,
        serving=ServingFiles(pki.serving_cert, pki.serving_key),
        authorizer=reviews_on(access, asyncio.get_running_loop()).grpc_authorizer,
    )
    async with on_own_loop(GRPC_THREAD, served) as listening:
        yield Scaler(listening, provider, clock, metrics, pki)


async def test_each_call_is_allowed_by_a_subject_access_review_of_its_certificate(authorized_scaler, fake_kube):
    async with authorized_scaler.channel(authorized_scaler.pki.alice) as channel:
        stub = ExternalScalerStub(channel)
        assert (await stub.GetMetrics(metrics_request())).metricValues[0].metricValueFloat == 0.5
        error = await refusal(stub.GetMetrics(metrics_request(namespace="inference")))
        assert (error.code(), error.details()) == (grpc.StatusCode.PERMISSION_DENIED, FORBIDDEN)
        stream = stub.StreamIsActive(ref(namespace="inference"))
        error = await refusal(stream.read())
        assert (error.code(), error.details()) == (grpc.StatusCode.PERMISSION_DENIED, FORBIDDEN)
        # Cached: the same questions again ask nothing more (allowed for 5 min, denied for 30 s).
        for _ in range(3):
            await stub.IsActive(ref())
            await refusal(stub.IsActive(ref(namespace="inference")))
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
    await eventually(
        lambda: (
            authorized_scaler.sample(
                "gpu_autoscaler_grpc_requests_total", {"method": "IsActive", "code": "PERMISSION_DENIED"}
            )
            == 3
        ),
        message="three PERMISSION_DENIED IsActive calls counted",
    )


async def test_an_unreachable_review_refuses_the_call(authorized_scaler, fake_kube):
    fake_kube.fail_mode = "500"
    async with authorized_scaler.channel(authorized_scaler.pki.alice) as channel:
        error = await refusal(ExternalScalerStub(channel).GetMetricSpec(ref()))
    assert (error.code(), error.details()) == (
        grpc.StatusCode.PERMISSION_DENIED,
        "Forbidden: access could not be reviewed",
    )


def test_subject_access_review_needs_the_client_ca_that_names_the_caller(pki):
    with pytest.raises(ValueError, match="grpc_authorization subjectaccessreview needs grpc_client_ca_file"):
        ServerSettings.model_validate({"grpc_port": 9443, "grpc_authorization": "subjectaccessreview"})
