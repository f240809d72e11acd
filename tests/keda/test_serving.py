"""The gRPC port in the serving process: beside the HTTPS API in ``running``, and in the demo as the
documentation (docs/keda.md) tells a user to try it, stopped by SIGTERM."""

from __future__ import annotations

import asyncio
import re
import signal
import ssl
import subprocess
import sys
from datetime import timedelta

import aiohttp
import grpc

from autoscaler.app.access import build_access
from autoscaler.app.factory import create_app
from autoscaler.app.serving import running
from autoscaler.keda import externalscaler_pb2 as pb
from autoscaler.keda.externalscaler_pb2_grpc import ExternalScalerStub
from autoscaler.quantity import parse_quantity
from autoscaler.refresh.pipeline import Pipeline
from autoscaler.serving.provider import SnapshotProvider
from autoscaler.targets.plans import RefreshSettings
from autoscaler.web.security.tls import ServerTLS, ServingFiles
from tests.autoscaler.conftest import METRICS, NOW, SettableClock, fixed_snapshot, server_settings
from tests.autoscaler.demo_process import DemoProcess
from tests.test_repository import ROOT


async def test_running_serves_grpc_beside_https_from_the_same_snapshot(pki, tmp_path):
    settings = server_settings(pki, tmp_path)
    settings = settings.model_copy(
        update={"server": settings.server.model_copy(update={"grpc_port": 0, "grpc_client_ca_file": pki.client_ca})}
    )
    access = await build_access(settings)
    provider = SnapshotProvider(fixed_snapshot(), clock=SettableClock(NOW + timedelta(seconds=30)))
    pipeline = Pipeline(
        metrics=METRICS, plans=(), sources=(), refresh=RefreshSettings(timedelta(minutes=1), timedelta(minutes=5))
    )
    api_app, ops_app = create_app(settings, pipeline=pipeline, access=access, provider=provider)
    tls = ServerTLS(ServingFiles(pki.serving_cert, pki.serving_key), [pki.client_ca.read_bytes()])
    async with running(settings, api_app=api_app, ops_app=ops_app, tls=tls) as listening:
        assert listening.grpc_port not in (None, 0, listening.secure_port, listening.http_port)
        credentials = grpc.ssl_channel_credentials(
            pki.client_ca.read_bytes(), pki.alice.key.read_bytes(), pki.alice.cert.read_bytes()
        )
        trigger = pb.ScaledObjectRef(
            name="so", namespace="default", scalerMetadata={"metric": "gpu_demand_forecast", "targetValue": "4"}
        )
        async with grpc.aio.secure_channel(f"127.0.0.1:{listening.grpc_port}", credentials) as channel:
            request = pb.GetMetricsRequest(scaledObjectRef=trigger, metricName="gpu_demand_forecast")
            value = (await ExternalScalerStub(channel).GetMetrics(request)).metricValues[0].metricValueFloat
        url = f"https://127.0.0.1:{listening.secure_port}/apis/external.metrics.k8s.io/v1beta1/namespaces/default/"
        context = ssl.create_default_context(cafile=str(pki.client_ca))
        context.load_cert_chain(pki.alice.cert, pki.alice.key)
        async with aiohttp.ClientSession() as session, session.get(url + "gpu_demand_forecast", ssl=context) as r:
            items = (await r.json())["items"]
        # What an HPA computes from the HTTPS list is what KEDA gets in one value.
        assert value == sum(parse_quantity(item["value"]) for item in items) == 15.25
        ops = f"http://127.0.0.1:{listening.http_port}/metrics"
        async with aiohttp.ClientSession() as session, session.get(ops) as r:
            text = await r.text()
        assert 'gpu_autoscaler_grpc_requests_total{code="OK",method="GetMetrics"} 1.0' in text


def documented_client() -> str:
    text = (ROOT / "docs" / "keda.md").read_text()
    block = re.search(r"<!-- keda-demo-client -->\n```sh\n\.venv/bin/python - <<'EOF'\n(.*?)EOF\n```", text, re.S)
    assert block, "docs/keda.md lacks the KEDA demo client"
    return block.group(1)


async def test_the_demo_serves_grpc_to_the_documented_client_and_stops_on_sigterm(tmp_path):
    demo = DemoProcess(tmp_path / "state")  # the demo, on free ports
    demo.start()
    try:
        announced = r"KEDA external scaler \(gRPC over TLS \(mutual TLS\)\) on 127\.0\.0\.1:(\d+)"
        found = re.search(announced, demo.start_log)
        assert found, demo.start_log
        port = int(found.group(1))
        await demo.wait_ready()
        script = documented_client().replace('".gpu-autoscaler"', repr(str(demo.state))).replace(":9443", f":{port}")
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", script, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
        )
        stdout, stderr = await process.communicate()
        assert process.returncode == 0, stderr.decode()
        output = stdout.decode()
        assert 'metricName: "gpu_demand_forecast"' in output and "targetSizeFloat: 8" in output
        assert "result: true" in output  # Helios Earth runs hundreds of GPUs: well above 0
        served = float(re.search(r"metricValueFloat: ([0-9.e+]+)", output).group(1))
        assert served > 100
        # An open push stream ends with OK when the demo is stopped, and the demo exits 0.
        files = {name: (demo.state / name).read_bytes() for name in ("ca.crt", "client.key", "client.crt")}
        credentials = grpc.ssl_channel_credentials(files["ca.crt"], files["client.key"], files["client.crt"])
        async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
            trigger = pb.ScaledObjectRef(
                name="demo", namespace="default", scalerMetadata={"metric": "gpu_headroom", "targetValue": "1"}
            )
            stream = ExternalScalerStub(channel).StreamIsActive(trigger)
            assert isinstance((await stream.read()).result, bool)
            assert demo.process is not None
            demo.process.send_signal(signal.SIGTERM)
            assert await stream.read() is grpc.aio.EOF
            assert await stream.code() == grpc.StatusCode.OK
    finally:
        assert demo.stop() == 0
