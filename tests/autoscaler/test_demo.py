"""The README's first command, end to end: `gpu-autoscaler serve` (the demo), then the printed kubectl."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autoscaler.quantity import parse_quantity
from tests.autoscaler.demo_process import DemoProcess
from tests.autoscaler.test_real_clients import kubectl_raw


@pytest.fixture
def demo(tmp_path: Path):
    process = DemoProcess(tmp_path / "state")
    process.start()
    yield process
    assert process.stop() == 0


async def test_demo_serves_forecasts_to_kubectl(demo):
    state, log_text = demo.state, demo.start_log
    command = re.search(r"(kubectl --kubeconfig \S+ get --raw \S+)", log_text)
    assert command, log_text
    assert command.group(1) == (
        f"kubectl --kubeconfig {state / 'kubeconfig'} get --raw "
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/gpu_demand_forecast"
    )
    kubeconfig = state / "kubeconfig"
    # Discovery answers at once, before any forecast exists, and is never empty.
    code, stdout, stderr = await kubectl_raw(kubeconfig, "/apis/external.metrics.k8s.io/v1beta1")
    assert code == 0, stderr
    assert [r["name"] for r in json.loads(stdout)["resources"]] == [
        "gpu_demand_forecast",
        "gpu_headroom",
        "request_rate_forecast",
    ]
    # Not ready until the first forecast is in; readiness says so honestly.
    await demo.wait_ready()
    for metric, labels in (
        ("gpu_demand_forecast", {"nodepool": "demo-gpu"}),
        ("gpu_headroom", {"nodepool": "demo-gpu"}),
        ("request_rate_forecast", {"service": "sd-lora"}),
    ):
        path = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/default/{metric}"
        code, stdout, stderr = await kubectl_raw(kubeconfig, path)
        assert code == 0, stderr
        body = json.loads(stdout)
        assert body["kind"] == "ExternalMetricValueList"
        (item,) = body["items"]
        assert item["metricName"] == metric and item["metricLabels"] == labels
        assert re.fullmatch(r"\d+(m)?", item["value"]), item
        if metric == "gpu_demand_forecast":
            # Helios Earth runs hundreds of GPUs at every hour of the trace.
            assert parse_quantity(item["value"]) > 100
