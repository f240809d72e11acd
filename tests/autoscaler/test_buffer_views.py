"""What the writer shows, through the apps ``create_app`` builds: the inspection API's exact JSON, the
page's desired vs reported, ``gpu_autoscaler_buffer_replicas`` and the /readyz?verbose line."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from autoscaler.actuation.writer import BufferActuator
from autoscaler.app.access import needs_kubernetes_api
from autoscaler.app.factory import buffer_actuator, create_app
from autoscaler.config.actuator_settings import ActuatorSettings
from autoscaler.config.settings import Settings
from autoscaler.refresh.pipeline import Pipeline
from autoscaler.targets.plans import RefreshSettings
from autoscaler.web.security.auth import AccessControl
from tests import fakekube
from tests.autoscaler.buffer_helpers import HEADROOM, PLURAL, WATCH, buffer_settings, headroom, show
from tests.eventually import eventually

fake_kube = fakekube.fake_kube
kube_api = fakekube.kube_api

NOW = datetime(2026, 11, 23, 22, 0, tzinfo=UTC)
CONDITIONS = [
    {"type": "ReadyForProvisioning", "status": "True", "reason": "AttributesSetSuccessfully", "message": "ok",
     "lastTransitionTime": "2026-11-23T22:00:00Z"},
    {"type": "Provisioning", "status": "False", "reason": "Provisioning", "message": "1 of 2 chunks pending",
     "lastTransitionTime": "2026-11-23T22:00:00Z"},
    # Cluster Autoscaler's condition and message (capacitybuffer/common.MarkBufferAsLimitedByQuota).
    {"type": "LimitedByQuotas", "status": "True", "reason": "ResourceQuotasAllocated",
     "message": "Buffer replicas limited from 2 to 1 due to quotas: gpu-quota",
     "lastTransitionTime": "2026-11-23T22:00:00Z", "observedGeneration": 2},
]  # fmt: skip


def apps(actuator: BufferActuator) -> tuple[web.Application, web.Application]:
    pipeline = Pipeline(
        metrics=(HEADROOM,), plans=(), sources=(), refresh=RefreshSettings(timedelta(minutes=1), timedelta(minutes=5))
    )
    return create_app(Settings(), pipeline=pipeline, access=AccessControl(None, None), actuator=actuator)


@pytest.mark.looptime
async def test_inspection_page_metrics_and_readiness_show_desired_and_reported(fake_kube, kube_api):
    actuator = BufferActuator(buffer_settings(), kube_api, watch=WATCH, identity="replica-a", clock=lambda: NOW)
    api_app, ops_app = apps(actuator)
    runner = web.AppRunner(api_app)
    await runner.setup()  # starts the writer (the API app's cleanup_ctx)
    try:
        await eventually(lambda: actuator.mode == "writing", message="the writer holds the Lease")
        await show(actuator, headroom(12.0, at=NOW))
        buffer = fake_kube.get(PLURAL, "a100-buffer", "gpu")
        # Someone caps the buffer at 16 GPUs (two 8-GPU chunks fit) and a quota holds it at 1.
        spec = {**buffer["spec"], "limits": {"nvidia.com/gpu": "16"}}
        fake_kube.modify(PLURAL, {**buffer, "spec": spec, "status": {"replicas": 1, "conditions": CONDITIONS}})
        await eventually(lambda: actuator.states["a100"].reported == 1, message="status read back")
        async with TestClient(TestServer(ops_app)) as client:
            response = await client.get("/api/v1/capacity-buffers")
            assert response.status == 200
            assert await response.json() == {
                "mode": "writing",
                "dryRun": False,
                "apiVersion": "autoscaling.x-k8s.io/v1beta1",
                "lease": {
                    "namespace": "gpu-autoscaler",
                    "name": "gpu-autoscaler-actuator",
                    "holder": "replica-a",
                    "held": True,
                },
                "buffers": [
                    {
                        "pool": "a100",
                        "namespace": "gpu",
                        "name": "a100-buffer",
                        "podTemplate": "a100-buffer-chunk",
                        "gpusPerChunk": 8,
                        "metric": "gpu_headroom",
                        "labels": {"nodepool": "a100"},
                        "servedValue": 12.0,
                        "desired": 2,
                        "reason": "ceil(12 GPUs / 8 per chunk)",
                        "written": 2,
                        "writtenAt": "2026-11-23T22:00:00Z",
                        "writes": 1,
                        "reported": 1,
                        "expected": 2,
                        "expectedReason": "spec.replicas 2",
                        "limitedByQuotas": {
                            "status": "True",
                            "reason": "ResourceQuotasAllocated",
                            "message": "Buffer replicas limited from 2 to 1 due to quotas: gpu-quota",
                        },
                        "conditions": [{k: c[k] for k in ("type", "status", "reason", "message")} for c in CONDITIONS],
                        "lastError": None,
                    }
                ],
            }
            metrics = await (await client.get("/metrics")).text()
            assert 'gpu_autoscaler_buffer_replicas{pool="a100",state="desired"} 2.0' in metrics
            assert 'gpu_autoscaler_buffer_replicas{pool="a100",state="reported"} 1.0' in metrics
            assert 'gpu_autoscaler_buffer_replicas{pool="a100",state="expected"} 2.0' in metrics
            assert 'gpu_autoscaler_buffer_limited_by_quotas{pool="a100"} 1.0' in metrics
            page = await (await client.get("/")).text()
            assert "<h2>CapacityBuffers</h2><p>writing</p>" in page
            assert (
                '<td>gpu/a100-buffer</td><td class="num">2</td><td class="num">2</td><td class="num">1</td>'
                '<td class="num">2</td><td><span class="warn">yes: Buffer replicas limited from 2 to 1 due to '
                "quotas: gpu-quota</span></td>"
            ) in page
            assert "ReadyForProvisioning=True (AttributesSetSuccessfully), Provisioning=False (Provisioning)" in page
            assert "expected: spec.replicas 2" in page

            # Limits below spec.replicas: the autoscaler caps it (floor(8 / 8) = 1 chunk); the quota lifts.
            buffer = fake_kube.get(PLURAL, "a100-buffer", "gpu")
            lifted = [
                {**c, "status": "False", "message": ""} if c["type"] == "LimitedByQuotas" else c for c in CONDITIONS
            ]
            spec = {**buffer["spec"], "limits": {"nvidia.com/gpu": "8"}}
            fake_kube.modify(PLURAL, {**buffer, "spec": spec, "status": {"replicas": 1, "conditions": lifted}})
            state = actuator.states["a100"]
            await eventually(lambda: state.sizing is not None and state.sizing.replicas == 1, message="limits read")
            entry = (await (await client.get("/api/v1/capacity-buffers")).json())["buffers"][0]
            assert (entry["desired"], entry["written"], entry["expected"]) == (2, 2, 1)
            assert entry["expectedReason"] == "spec.replicas 2, capped by spec.limits nvidia.com/gpu=8"
            assert entry["limitedByQuotas"] == {"status": "False", "reason": "ResourceQuotasAllocated", "message": ""}
            metrics = await (await client.get("/metrics")).text()
            assert 'gpu_autoscaler_buffer_replicas{pool="a100",state="expected"} 1.0' in metrics
            assert 'gpu_autoscaler_buffer_limited_by_quotas{pool="a100"} 0.0' in metrics
            assert "<td>no</td>" in await (await client.get("/")).text()
            verbose = await (await client.get("/readyz?verbose")).text()
            assert (
                "[+]capacity buffers: writing autoscaling.x-k8s.io/v1beta1 "
                "(this replica holds lease gpu-autoscaler/gpu-autoscaler-actuator)\n"
            ) in verbose
    finally:
        await runner.cleanup()


@pytest.mark.looptime
async def test_a_dry_run_exports_what_it_would_write(fake_kube, kube_api):
    actuator = BufferActuator(buffer_settings(dry_run=True), kube_api, watch=WATCH, clock=lambda: NOW)
    api_app, ops_app = apps(actuator)
    runner = web.AppRunner(api_app)
    await runner.setup()
    try:
        await eventually(lambda: actuator.discovered, message="discovery answered")
        await show(actuator, headroom(30.0, at=NOW))
        async with TestClient(TestServer(ops_app)) as client:
            document = await (await client.get("/api/v1/capacity-buffers")).json()
            assert (document["mode"], document["dryRun"], document["lease"]) == ("dry-run", True, None)
            assert (document["buffers"][0]["desired"], document["buffers"][0]["written"]) == (4, None)
            metrics = await (await client.get("/metrics")).text()
            assert 'gpu_autoscaler_buffer_replicas{pool="a100",state="desired"} 4.0' in metrics
            assert 'state="reported"' not in metrics  # no buffer, nothing reported
            assert 'state="expected"' not in metrics and "gpu_autoscaler_buffer_limited_by_quotas{" not in metrics
            assert "<p>dry run: nothing is written</p>" in await (await client.get("/")).text()
            verbose = await (await client.get("/readyz?verbose")).text()
            assert (
                "[+]capacity buffers: dry run: computed and shown, nothing written (autoscaling.x-k8s.io/v1beta1)"
                in verbose
            )
    finally:
        await runner.cleanup()
    assert {r.method for r in fake_kube.requests_for(PLURAL)} == {"GET"}


async def test_without_a_writer_the_inspection_api_says_so():
    _, ops_app = create_app(
        Settings(),
        pipeline=Pipeline(
            metrics=(), plans=(), sources=(), refresh=RefreshSettings(timedelta(minutes=1), timedelta(minutes=5))
        ),
        access=AccessControl(None, None),
    )
    async with TestClient(TestServer(ops_app)) as client:
        response = await client.get("/api/v1/capacity-buffers")
        assert response.status == 404
        body = await response.json()
        assert body["message"] == "no CapacityBuffer writer is configured (settings actuators.capacity_buffers)"
        assert (body["kind"], body["code"], body["reason"]) == ("Status", 404, "NotFound")


def test_the_composition_root_builds_the_writer_the_settings_ask_for():
    settings = Settings.model_validate(
        {"auth": {"mode": "files", "client_ca_file": "/x", "authorization": "allow-authenticated"}}
    )
    assert not needs_kubernetes_api(settings) and buffer_actuator(settings, None) is None
    with_buffers = settings.model_copy(update={"actuators": ActuatorSettings(capacity_buffers=buffer_settings())})
    assert needs_kubernetes_api(with_buffers)  # the writer talks to the cluster
    actuator = buffer_actuator(with_buffers, None)
    assert actuator is not None and list(actuator.states) == ["a100"]
    assert actuator.mode == "unavailable"  # no cluster: nothing to write to
