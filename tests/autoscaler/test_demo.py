"""The README's first command, end to end: `gpu-autoscaler serve` (the demo), then the printed kubectl."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from autoscaler.quantity import parse_quantity
from tests.autoscaler.demo_process import DemoProcess
from tests.autoscaler.test_real_clients import kubectl_raw
from tests.eventually import eventually


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


async def test_the_demo_scores_its_pool_against_its_target_within_two_refreshes(demo):
    """The shop window shows the loop: the target, the pool's live attainment and the budget left, on
    the scorecard API, /metrics and the page, by the second refresh after ready (60 s apart)."""
    await demo.wait_ready()
    async with aiohttp.ClientSession() as session:

        async def scored() -> dict[str, Any] | None:
            async with session.get(f"{demo.http_url}/api/v1/scorecard") as response:
                assert response.status == 200
                body = await response.json()
            if not body["pools"]:  # ready before the first scorecard sample: not scored yet
                return None
            (pool,) = body["pools"]
            return pool if pool["periods"]["1h"]["minutes_scored"] >= 1 else None

        pool = await eventually(scored, message="a scored minute of demo-gpu", timeout=150, interval=1)
        assert pool["pool"] == "demo-gpu"
        hour = pool["periods"]["1h"]
        # The replayed pool holds the trace's hundreds of GPUs on 8-GPU nodes, and some spare for the headroom.
        assert hour["idle_gpu_hours"] > 0 and 0.5 < hour["gpu_allocation"] < 1.0
        target = pool["targets"]["gpu_headroom"]
        assert (target["kind"], target["value"], target["chosen"]) == ("minutes_short_fraction", 0.01, "p95")
        live = target["attained"]["live"]["1h"]
        assert live == hour["minutes_short_fraction"]
        assert target["error_budget_remaining"] == pytest.approx(1.0 - target["attained"]["live"]["tune"] / 0.01)
        async with session.get(f"{demo.http_url}/metrics") as response:
            metrics = await response.text()
        labels = '{metric="gpu_headroom",nodepool="demo-gpu"}'
        assert f"gpu_autoscaler_target_ratio{labels} 0.01" in metrics
        assert f"gpu_autoscaler_error_budget_remaining_ratio{labels}" in metrics
        assert 'gpu_autoscaler_held_gpu_seconds_total{nodepool="demo-gpu"}' in metrics
        async with session.get(f"{demo.http_url}/ui/gpu_headroom") as response:
            page = await response.text()
        assert response.status == 200 and "at most 1 % of minutes with any GPU short" in page
