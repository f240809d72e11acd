"""The README's first command, end to end: `gpu-autoscaler serve` (the demo), then the printed kubectl."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from autoscaler.quantity import parse_quantity

START_TIMEOUT_S = 180


@pytest.fixture
def demo_process(tmp_path: Path):
    state = tmp_path / "state"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "autoscaler",
            "serve",
            "--state-dir",
            str(state),
            "--secure-port",
            "0",
            "--http-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log_lines: list[str] = []
    http_url = None
    deadline = time.monotonic() + 60
    assert process.stdout is not None
    while http_url is None and time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        log_lines.append(line)
        found = re.search(r"probes and /metrics on (http://127\.0\.0\.1:\d+)", line)
        http_url = found.group(1) if found else None
    assert http_url, "".join(log_lines)
    # The kubectl hint is logged right after the URLs.
    log_lines += [process.stdout.readline() for _ in range(2)]
    yield process, state, http_url, "".join(log_lines)
    process.send_signal(signal.SIGTERM)
    try:
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()


def test_demo_serves_forecasts_to_kubectl(demo_process):
    _process, state, http_url, log_text = demo_process
    command = re.search(r"(kubectl --kubeconfig \S+ get --raw \S+)", log_text)
    assert command, log_text
    assert command.group(1) == (
        f"kubectl --kubeconfig {state / 'kubeconfig'} get --raw "
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/gpu_demand_forecast"
    )
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is required"
    base_args = command.group(1).split()[1:-1]
    # Discovery answers at once, before any forecast exists, and is never empty.
    discovery = subprocess.run(
        [kubectl, *base_args, "/apis/external.metrics.k8s.io/v1beta1"], capture_output=True, text=True, timeout=60
    )
    assert discovery.returncode == 0, discovery.stderr
    assert [r["name"] for r in json.loads(discovery.stdout)["resources"]] == [
        "gpu_demand_forecast",
        "gpu_headroom",
        "request_rate_forecast",
    ]
    # Not ready until the first forecast is in; readiness says so honestly.
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{http_url}/readyz", timeout=5) as response:  # noqa: S310 - loopback
                assert response.status == 200
                break
        except urllib.error.HTTPError as error:
            assert error.code == 503 and "warming up" in error.read().decode()
        time.sleep(0.5)
    else:
        pytest.fail("the demo did not become ready")
    for metric, labels in (
        ("gpu_demand_forecast", {"pool": "demo-gpu"}),
        ("gpu_headroom", {"pool": "demo-gpu"}),
        ("request_rate_forecast", {"service": "sd-lora"}),
    ):
        path = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/default/{metric}"
        completed = subprocess.run([kubectl, *base_args, path], capture_output=True, text=True, timeout=60)
        assert completed.returncode == 0, completed.stderr
        body = json.loads(completed.stdout)
        assert body["kind"] == "ExternalMetricValueList"
        (item,) = body["items"]
        assert item["metricName"] == metric and item["metricLabels"] == labels
        assert re.fullmatch(r"\d+(m)?", item["value"]), item
        if metric == "gpu_demand_forecast":
            # Helios Earth runs hundreds of GPUs at every hour of the trace.
            assert parse_quantity(item["value"]) > 100
