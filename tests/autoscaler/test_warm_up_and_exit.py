"""The demo as a new user meets it: during warm-up the API says when the first forecast is due, a
metric it does not serve says so, and Ctrl-C ends it quietly with exit 0."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import ssl
import time
from pathlib import Path

import aiohttp

from tests.autoscaler.demo_process import DemoProcess

PREFIX = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default"
SERVED = "gpu_demand_forecast, gpu_headroom, request_rate_forecast"


def client_context(state: Path) -> ssl.SSLContext:
    """What the demo's kubeconfig holds: its CA, and the client certificate it issued."""
    context = ssl.create_default_context(cafile=str(state / "ca.crt"))
    context.load_cert_chain(state / "client.crt", state / "client.key")
    return context


async def get(demo: DemoProcess, metric: str) -> tuple[int, str | None, dict]:
    url = f"https://127.0.0.1:{demo.secure_port}{PREFIX}/{metric}"
    async with aiohttp.ClientSession() as session, session.get(url, ssl=client_context(demo.state)) as response:
        return response.status, response.headers.get("Retry-After"), await response.json()


async def test_warm_up_is_a_503_saying_when_the_first_forecast_is_due_then_values(tmp_path):
    demo = DemoProcess(tmp_path / "state")
    demo.start()
    try:
        code, retry_after, body = await get(demo, "gpu_demand_forecast")
        assert (code, body["kind"], body["status"], body["reason"], body["code"]) == (
            503, "Status", "Failure", "ServiceUnavailable", 503,
        ), body  # fmt: skip
        assert re.fullmatch(
            r"gpu-autoscaler is warming up: the first forecast is due by \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ "
            r"\(in \d+ s\); no value of 'gpu_demand_forecast' yet",
            body["message"],
        ), body["message"]
        assert retry_after is not None and 1 <= int(retry_after) <= 10
        assert body["details"]["retryAfterSeconds"] == int(retry_after)
        code, _, body = await get(demo, "replicas_forecast")  # in the README's table, not in the demo's config
        message = f"external metric 'replicas_forecast' is not served by this configuration; served: {SERVED}"
        assert (code, body["reason"], body["message"]) == (404, "NotFound", message)
        await demo.wait_ready()
        code, retry_after, body = await get(demo, "gpu_demand_forecast")
        assert (code, retry_after, body["kind"]) == (200, None, "ExternalMetricValueList")
    finally:
        assert demo.stop() == 0


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(child) for child in text.split()]


def _gone(pid: int) -> bool:
    try:
        return "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


async def test_ctrl_c_ends_quietly_with_exit_0(tmp_path):
    """A terminal's Ctrl-C signals the whole foreground process group: the server and its forecast workers."""
    demo = DemoProcess(tmp_path / "state", session=True)
    demo.start()
    await demo.wait_ready()  # the workers exist now, idle between refreshes
    assert demo.process is not None
    workers = _children(demo.process.pid)
    assert workers, "the demo forecasts in worker processes"
    os.killpg(demo.process.pid, signal.SIGINT)
    started = time.monotonic()
    code = await asyncio.to_thread(demo.process.wait, 30)
    assert code == 0
    assert time.monotonic() - started < 10
    await asyncio.sleep(0.5)  # the reader thread takes the last lines
    assert "Traceback" not in demo.log and "KeyboardInterrupt" not in demo.log, demo.log
    assert all(_gone(pid) for pid in workers)
