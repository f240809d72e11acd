"""KEDA's ``GetMetrics`` over gRPC against the external metrics API over HTTPS, in one run, on loopback.

    .venv/bin/python -m benchmarks.bench_keda [--series 1000] [--callers 16,64] [--duration 5]
                                              [--max-requests 100000]

A server process (uvloop, the start-up heap frozen as ``serve`` does) serves one snapshot of N series
on both ports: HTTPS with client-certificate authentication (as the aggregator calls it) and gRPC with
mutual TLS (as KEDA calls it, ``caCert`` + ``tlsClientCert``). This process then drives each, closed
loop, with C concurrent callers for ``--duration`` seconds (and at most ``--max-requests``): each
caller asks again as soon as it is answered. Both ask for the same thing, one pool's series of
``gpu_demand_forecast`` (``nodepool=pool-7``). HTTPS callers use C keep-alive connections; gRPC
callers share one channel (one HTTP/2 connection), as KEDA keeps one connection per scaler address.
Closed-loop latency at 64 callers is mostly queueing (Little's law), and the generator shares the
cores with the server: the last column is the server process's CPU (1.0 = one core busy), so a level
the generator limits can be told from one the server limits.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from benchmarks.bench_api import PATH, Result, load

SELECTOR = "nodepool=pool-7"


def serve(series_count: int, pki_dir: Path) -> None:
    from autoscaler.app.access import build_access, client_ca_pems
    from autoscaler.app.factory import build_api_app, build_ops_app
    from autoscaler.app.serving import running, settle_heap
    from autoscaler.config.settings import Settings
    from autoscaler.serving.provider import MetricInfo, ServedSeries, Snapshot, SnapshotProvider
    from autoscaler.web.security.tls import ServerTLS, ServingFiles
    from autoscaler.web.shared.keys import PROVIDER
    from autoscaler.web.shared.readiness import Readiness
    from autoscaler.web.shared.self_metrics import SelfMetrics

    now = datetime.now(UTC)
    info = MetricInfo("gpu_demand_forecast", "bench")
    series = tuple(
        ServedSeries("gpu_demand_forecast", {"nodepool": f"pool-{i}", "zone": f"z{i % 7}"}, 10.0 + i % 50, now)
        for i in range(series_count)
    )
    provider = SnapshotProvider(Snapshot(now, {info.name: info}, {info.name: series}))
    settings = Settings.model_validate(
        {
            "server": {
                "bind_address": "127.0.0.1",
                "secure_port": 0,
                "http_port": None,
                "grpc_port": 0,
                "grpc_client_ca_file": str(pki_dir / "client-ca.crt"),
            },
            "auth": {
                "mode": "files",
                "client_ca_file": str(pki_dir / "client-ca.crt"),
                "authorization": "allow-authenticated",
            },
        }
    )

    async def main() -> None:
        access = await build_access(settings)
        metrics = SelfMetrics()
        readiness = Readiness(ready=True)
        app = build_api_app(provider=provider, access=access, readiness=readiness, self_metrics=metrics)
        app[PROVIDER] = provider
        ops = build_ops_app(provider=provider, readiness=readiness, self_metrics=metrics)
        tls = ServerTLS(ServingFiles(pki_dir / "serving.crt", pki_dir / "serving.key"), client_ca_pems(access))
        async with running(settings, api_app=app, ops_app=ops, tls=tls) as listening:
            settle_heap()
            print(listening.secure_port, listening.grpc_port, flush=True)
            await asyncio.Event().wait()

    import uvloop

    uvloop.run(main())


async def load_grpc(address: str, pki_dir: Path, callers: int, duration_s: float, max_requests: int) -> Result:
    """``callers`` concurrent GetMetrics loops over one mutual-TLS channel, closed loop."""
    from autoscaler.keda import externalscaler_pb2 as pb
    from autoscaler.keda.externalscaler_pb2_grpc import ExternalScalerStub

    files = [(pki_dir / name).read_bytes() for name in ("client-ca.crt", "alice.key", "alice.crt")]
    credentials = grpc.ssl_channel_credentials(*files)
    metadata = {"scalerAddress": address, "metric": "gpu_demand_forecast", "targetValue": "1"}
    metadata["labelSelector"] = SELECTOR
    request = pb.GetMetricsRequest(
        scaledObjectRef=pb.ScaledObjectRef(name="bench", namespace="default", scalerMetadata=metadata),
        metricName="gpu_demand_forecast",
    )
    latencies: list[float] = []
    errors = 0
    async with grpc.aio.secure_channel(address, credentials) as channel:
        stub = ExternalScalerStub(channel)
        expected = (await stub.GetMetrics(request)).metricValues[0].metricValueFloat  # warm: the handshake
        assert expected == 17.0, expected  # pool-7: 10 + 7

        async def caller(stop_at: float) -> None:
            nonlocal errors
            while time.perf_counter() < stop_at and len(latencies) + errors < max_requests:
                started = time.perf_counter()
                try:
                    await stub.GetMetrics(request, timeout=3)  # KEDA's own scaler timeout
                except grpc.aio.AioRpcError:
                    errors += 1
                    continue
                latencies.append((time.perf_counter() - started) * 1000)

        gc.collect()
        gc.disable()  # the generator's collections would be charged to the server
        try:
            started = time.perf_counter()
            await asyncio.gather(*(caller(started + duration_s) for _ in range(callers)))
            elapsed = time.perf_counter() - started
        finally:
            gc.enable()
    return Result(callers, None, len(latencies), errors, elapsed, np.array(latencies))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc), to tell which side saturates."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--series", type=int, default=1000)
    parser.add_argument("--callers", default="16,64")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--max-requests", type=int, default=100_000)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--pki", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, args.pki)
        return

    from tests.pki import make_pki

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as temporary:
        pki = make_pki(Path(temporary) / "pki")
        context = ssl.create_default_context(cafile=str(pki.client_ca))
        context.load_cert_chain(pki.alice.cert, pki.alice.key)
        command = [sys.executable, "-m", "benchmarks.bench_keda", "--serve", str(args.series)]
        command += ["--pki", str(pki.directory)]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
        assert process.stdout is not None
        secure_port, grpc_port = (int(port) for port in process.stdout.readline().split())
        try:
            for callers in [int(c) for c in args.callers.split(",")]:
                url = f"https://127.0.0.1:{secure_port}{PATH}"
                address = f"127.0.0.1:{grpc_port}"
                for protocol, run in (
                    ("HTTPS external metrics", partial(load, url, context)),
                    ("gRPC GetMetrics", partial(load_grpc, address, pki.directory)),
                ):
                    before = cpu_seconds(process.pid)
                    result = asyncio.run(run(callers, args.duration, args.max_requests))
                    server_cpu = (cpu_seconds(process.pid) - before) / result.seconds
                    rows.append({"protocol": protocol, **result.row(), "server_cpu": round(server_cpu, 2)})
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        finally:
            process.terminate()
            process.wait(timeout=10)
    print(
        f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the end; closed loop; "
        f"{args.series} series; {args.duration:g} s per level; mutual TLS; loopback"
    )
    header = f"{'protocol':<26}{'callers':>8}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'errors':>8}"
    print(header + f"{'server CPU':>12}")
    for row in rows:
        print(
            f"{row['protocol']:<26}{row['connections']:>8}{row['requests_per_s']:>10}"
            f"{row['p50_ms']:>9}{row['p99_ms']:>9}{row['max_ms']:>9}{row['errors']:>8}{row['server_cpu']:>12}"
        )


if __name__ == "__main__":
    main()
