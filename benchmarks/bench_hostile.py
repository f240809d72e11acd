"""Issue 30's load cases against the running demo, on loopback: what one hostile gRPC caller costs others.

    .venv/bin/python -m benchmarks.bench_hostile [--duration 10] [--requests 300]

Starts ``gpu-autoscaler serve`` (the demo, free ports) and, once it is ready, measures:

1. the HTTPS API's latency (p50, p90 over ``--requests`` sequential GETs with the demo's client
   certificate), idle, then while two threads send ``GetMetrics`` with a ``scalerMetadata`` of 180,000
   keys (2.5 MB, under gRPC's 4 MiB limit) as fast as they are answered (the probe's case 1);
2. the server's RSS before and after 40 distinct triggers of 150,000 extra keys each (the probe's
   case 2), then after 5,000 distinct valid triggers at the metadata limit (24 KiB each: what the
   trigger cache could hold if it were not bounded in bytes).

Prints one line per figure, and what the server counted (``gpu_autoscaler_grpc_requests_total`` for
the refused messages, ``gpu_autoscaler_grpc_trigger_cache_bytes``). The generator shares the
machine's cores with the server.
"""

from __future__ import annotations

import argparse
import os
import re
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
import numpy as np

from autoscaler.keda import externalscaler_pb2 as pb

GET_METRICS = "/externalscaler.ExternalScaler/GetMetrics"
API_PATH = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/gpu_demand_forecast"


def start_demo(state: Path) -> tuple[subprocess.Popen[str], dict[str, str]]:
    command = [sys.executable, "-m", "autoscaler", "serve", "--state-dir", str(state)]
    command += ["--secure-port", "0", "--http-port", "0", "--grpc-port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    found: dict[str, str] = {}
    patterns = {
        "https": r"external metrics API on https://127\.0\.0\.1:(\d+)",
        "grpc": r"KEDA external scaler .* on 127\.0\.0\.1:(\d+)",
        "http": r"probes and /metrics on http://127\.0\.0\.1:(\d+)",
    }
    for line in process.stdout:
        for name, pattern in patterns.items():
            if match := re.search(pattern, line):
                found[name] = match.group(1)
        if len(found) == len(patterns):
            break
    # Keep reading so the pipe never fills.
    threading.Thread(target=lambda: [None for _ in process.stdout or ()], daemon=True).start()
    return process, found


def wait_ready(http_port: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("the demo did not become ready")


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"VmRSS:\s+(\d+) kB", status)
    assert found
    return int(found.group(1)) / 1024


def exported(http_port: str, sample: str) -> float:
    """A sample's value on the ops port's /metrics (0 when not exported yet)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(sample + " "):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


REFUSED = 'gpu_autoscaler_grpc_requests_total{code="RESOURCE_EXHAUSTED",method="GetMetrics"}'
CACHE = "gpu_autoscaler_grpc_trigger_cache_bytes"


def https_latencies_ms(state: Path, port: str, count: int) -> np.ndarray:
    context = ssl.create_default_context(cafile=str(state / "ca.crt"))
    context.load_cert_chain(state / "client.crt", state / "client.key")
    import http.client

    connection = http.client.HTTPSConnection("127.0.0.1", int(port), context=context, timeout=30)
    times = []
    for _ in range(count):
        started = time.perf_counter()
        connection.request("GET", API_PATH)
        response = connection.getresponse()
        response.read()
        assert response.status == 200, response.status
        times.append((time.perf_counter() - started) * 1000)
    connection.close()
    return np.array(times)


def channel(state: Path, port: str) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(
        (state / "ca.crt").read_bytes(), (state / "client.key").read_bytes(), (state / "client.crt").read_bytes()
    )
    return grpc.secure_channel(f"127.0.0.1:{port}", credentials)


def request_bytes(extra_keys: int, tag: str = "", **metadata: str) -> bytes:
    keys = {f"{tag}k{index:06d}": "v" for index in range(extra_keys)}
    trigger = {"metric": "gpu_demand_forecast", "targetValue": "1", **metadata, **keys}
    ref = pb.ScaledObjectRef(name="bench", namespace="default", scalerMetadata=trigger)
    return pb.GetMetricsRequest(scaledObjectRef=ref, metricName="gpu_demand_forecast").SerializeToString()


def send_counted(send: Callable[..., object], payload: bytes, codes: dict[str, int]) -> None:
    """One call; its status code counted in ``codes``."""
    try:
        send(payload, timeout=30)
        code = "OK"
    except grpc.RpcError as error:
        code = error.code().name
    codes[code] = codes.get(code, 0) + 1


def flood(state: Path, port: str, payload: bytes, stop: threading.Event, codes: dict[str, int]) -> None:
    with channel(state, port) as open_channel:
        # Bytes in, bytes out: no client-side protobuf work.
        send: grpc.UnaryUnaryMultiCallable[bytes, bytes] = open_channel.unary_unary(GET_METRICS)
        while not stop.is_set():
            send_counted(send, payload, codes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of the case-1 flood at most")
    parser.add_argument("--requests", type=int, default=300, help="HTTPS requests per latency measurement")
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}, load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as directory:
        state = Path(directory) / "state"
        process, ports = start_demo(state)
        try:
            wait_ready(ports["http"])
            https_latencies_ms(state, ports["https"], 50)  # warm up
            idle = https_latencies_ms(state, ports["https"], args.requests)
            print(f"HTTPS idle: p50 {np.median(idle):.2f} ms, p90 {np.percentile(idle, 90):.2f} ms")

            payload = request_bytes(180_000)
            stop, codes = threading.Event(), {}  # type: ignore[var-annotated]
            threads = [
                threading.Thread(target=flood, args=(state, ports["grpc"], payload, stop, codes)) for _ in range(2)
            ]
            for thread in threads:
                thread.start()
            time.sleep(1.0)
            started = time.monotonic()
            loaded = https_latencies_ms(state, ports["https"], args.requests)
            while time.monotonic() - started < min(args.duration, 3.0):
                time.sleep(0.1)
            stop.set()
            for thread in threads:
                thread.join()
            ratio = np.median(loaded) / np.median(idle)
            print(
                f"HTTPS under case 1 ({len(payload) / 1e6:.1f} MB GetMetrics from 2 threads, answers {codes}): "
                f"p50 {np.median(loaded):.2f} ms, p90 {np.percentile(loaded, 90):.2f} ms, p50 {ratio:.2f}x idle"
            )
            print(f"counted by the server: {REFUSED} {exported(ports['http'], REFUSED):.0f}")

            before = rss_mb(process.pid)
            codes = {}
            with channel(state, ports["grpc"]) as open_channel:
                send: grpc.UnaryUnaryMultiCallable[bytes, bytes] = open_channel.unary_unary(GET_METRICS)
                for index in range(40):
                    try:
                        send(request_bytes(150_000, tag=f"t{index}-"), timeout=30)
                    except grpc.RpcError as error:
                        codes[error.code().name] = codes.get(error.code().name, 0) + 1
                after_case2 = rss_mb(process.pid)
                print(f"RSS case 2 (40 triggers x 150,000 keys, answers {codes}): {before:.0f} -> {after_case2:.0f} MB")
                codes = {}
                selector = "nodepool in (" + ",".join(f"p{index:04d}" for index in range(2_400)) + ")"
                for index in range(5_000):
                    note = "x" * (24 * 1024 - len(selector) - 200)
                    payload = request_bytes(0, labelSelector=f"{selector},n!=n{index}", note=note)
                    send_counted(send, payload, codes)
            after_cache = rss_mb(process.pid)
            print(f"RSS after 5,000 distinct triggers at the 24 KiB limit (answers {codes}): {after_cache:.0f} MB")
            print(f"{CACHE} {exported(ports['http'], CACHE):.0f}")
        finally:
            process.terminate()
            process.wait(timeout=60)


if __name__ == "__main__":
    main()
