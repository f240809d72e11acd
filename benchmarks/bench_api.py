"""Load on the external metrics endpoint over TLS with client-certificate auth, on loopback.

    .venv/bin/python -m benchmarks.bench_api [--series 10,1000,10000] [--connections 1,16,64,256]
                                              [--duration 5] [--adapter] [--rate 2000]

For each series count a server process serves a snapshot of that many series; a load generator (this
process) holds C connections for ``--duration`` seconds per level (bounded: it also stops after
``--max-requests``) and prints requests/s, p50/p99/max latency, errors and the server process's CPU
time (user + system, every thread; Linux) per request over the level, which other processes on the
machine do not change as much as they change latency.

Two ways to load. Closed loop (default): each connection sends its next request as soon as the last
answer arrives, which finds the maximum throughput; at 64 connections its latency is mostly queueing
(Little's law: latency = connections / throughput), and the generator competes with the server for
the same 2 cores. Open loop (``--rate R``): the connections together send R requests per second on a
fixed schedule, and latency is measured from each request's scheduled time, so a server that falls
behind is charged for the wait (no coordinated omission, as wrk2 measures). That is the latency an
HPA fleet sending R requests per second sees. ``--adapter`` adds the
same metric answered the way prometheus-adapter answers it: one instant query to a real Prometheus
(Debian package, backfilled from the Helios trace) per request, through the same TLS and auth stack.
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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

PATH = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/gpu_demand_forecast"
ADAPTER_PATH = "/adapter/namespaces/default/gpu_demand_forecast"
# What prometheus-adapter would run for this metric: the GPUs requested in one node pool, now.
ADAPTER_QUERY = 'sum(kube_pod_container_resource_requests{resource="nvidia_com_gpu", node=~"earth-.*"})'


# ----------------------------------------------------------------------------- the server process


def serve(series_count: int, pki_dir: Path, prometheus_url: str | None) -> None:
    from aiohttp import web

    from autoscaler.app.access import build_access, client_ca_pems
    from autoscaler.app.factory import build_api_app, build_ops_app
    from autoscaler.app.serving import running, settle_heap
    from autoscaler.config.settings import Settings
    from autoscaler.serving.provider import MetricInfo, ServedSeries, Snapshot, SnapshotProvider
    from autoscaler.web.security.tls import ServerTLS, ServingFiles
    from autoscaler.web.shared.readiness import Readiness
    from autoscaler.web.shared.responses import status_response
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
            "server": {"bind_address": "127.0.0.1", "secure_port": 0, "http_port": None},
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
        if prometheus_url is not None:
            # Made on the API's loop (its own thread, autoscaler/app/api_loop.py), where it is used.
            sessions: list[aiohttp.ClientSession] = []

            async def adapter(request: web.Request) -> web.Response:
                # prometheus-adapter's way: an instant query per HPA request, formatted on the spot.
                if not sessions:
                    sessions.append(aiohttp.ClientSession())
                async with sessions[0].get(f"{prometheus_url}/api/v1/query", params={"query": ADAPTER_QUERY}) as answer:
                    body = await answer.json()
                if body.get("status") != "success" or not body["data"]["result"]:
                    return status_response(404, "no data")
                value = float(body["data"]["result"][0]["value"][1])
                item = {
                    "metricName": "gpu_demand_forecast",
                    "metricLabels": {},
                    "timestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "value": f"{int(value)}",
                }
                return web.json_response(
                    {
                        "kind": "ExternalMetricValueList",
                        "apiVersion": "external.metrics.k8s.io/v1beta1",
                        "metadata": {},
                        "items": [item],
                    }
                )

            app.router.add_get("/adapter/namespaces/{namespace}/{metric}", adapter)
        ops = build_ops_app(provider=provider, readiness=readiness, self_metrics=metrics)
        tls = ServerTLS(ServingFiles(pki_dir / "serving.crt", pki_dir / "serving.key"), client_ca_pems(access))
        async with running(settings, api_app=app, ops_app=ops, tls=tls) as listening:
            settle_heap()  # as the service does once it listens
            print(listening.secure_port, flush=True)
            await asyncio.Event().wait()

    import uvloop

    uvloop.run(main())


# ----------------------------------------------------------------------------- the load generator


@dataclass
class Result:
    connections: int
    offered_rate: float | None
    requests: int
    errors: int
    seconds: float
    latencies_ms: np.ndarray
    server_cpu_s: float | None = None  # the server process's CPU time (user + system) over the level

    def row(self) -> dict[str, Any]:
        lat = self.latencies_ms
        return {
            "connections": self.connections,
            "offered_per_s": self.offered_rate,
            "requests_per_s": round(self.requests / self.seconds, 1),
            "p50_ms": round(float(np.percentile(lat, 50)), 2) if len(lat) else None,
            "p99_ms": round(float(np.percentile(lat, 99)), 2) if len(lat) else None,
            "max_ms": round(float(lat.max()), 2) if len(lat) else None,
            "errors": self.errors,
            "requests": self.requests,
            "server_cpu_us_per_request": (
                round(self.server_cpu_s / self.requests * 1e6)
                if self.server_cpu_s is not None and self.requests
                else None
            ),
        }


async def load(
    url: str,
    context: ssl.SSLContext,
    connections: int,
    duration_s: float,
    max_requests: int,
    rate: float | None = None,
    server_cpu: Callable[[], float | None] = lambda: None,
) -> Result:
    """Closed loop when ``rate`` is None, else open loop at ``rate`` requests/s over all connections;
    ``server_cpu`` reads the server's CPU seconds, before the level (its handshakes done) and after."""
    latencies: list[float] = []
    errors = 0
    stop_at = time.perf_counter() + duration_s
    first_at = time.perf_counter()
    connector = aiohttp.TCPConnector(limit=connections, ssl=context, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker(number: int) -> None:
            nonlocal errors
            sent = 0
            while time.perf_counter() < stop_at and len(latencies) + errors < max_requests:
                started = time.perf_counter()
                if rate is not None:
                    # Connection ``number`` owns every ``connections``-th slot of the schedule.
                    scheduled = first_at + (number + sent * connections) / rate
                    sent += 1
                    if scheduled >= stop_at:
                        break
                    if scheduled > started:
                        await asyncio.sleep(scheduled - started)
                    started = scheduled
                try:
                    async with session.get(url, params={"labelSelector": "nodepool=pool-7"}) as response:
                        await response.read()
                        if response.status != 200:
                            errors += 1
                            continue
                except aiohttp.ClientError:
                    errors += 1
                    continue
                latencies.append((time.perf_counter() - started) * 1000)

        # Warm the connections (TLS handshakes) before timing.
        await asyncio.gather(
            *(session.get(url, params={"labelSelector": "nodepool=pool-7"}) for _ in range(connections))
        )
        # The generator's own garbage collection would stall its schedule and be charged to the
        # server; it is put off until the level ends.
        gc.collect()
        gc.disable()
        try:
            cpu_before = server_cpu()
            stop_at = time.perf_counter() + duration_s
            started = first_at = time.perf_counter()
            await asyncio.gather(*(worker(number) for number in range(connections)))
            elapsed = time.perf_counter() - started
            cpu_after = server_cpu()
        finally:
            gc.enable()
    cpu = cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None
    return Result(connections, rate, len(latencies), errors, elapsed, np.array(latencies), cpu)


def process_cpu_s(pid: int) -> float | None:
    """A process's CPU time so far (user + system, all threads): Linux's /proc; ``None`` elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_in_this_process(
    url: str, pki_dir: Path, connections: int, duration_s: float, max_requests: int, rate: float | None
) -> Result:
    """``load`` with alice's client certificate, for running the generator in another process."""
    context = ssl.create_default_context(cafile=str(pki_dir / "client-ca.crt"))
    context.load_cert_chain(pki_dir / "alice.crt", pki_dir / "alice.key")
    return asyncio.run(load(url, context, connections, duration_s, max_requests, rate))


def start_server(series: int, pki_dir: Path, prometheus_url: str | None) -> tuple[subprocess.Popen[str], int]:
    args = [sys.executable, "-m", "benchmarks.bench_api", "--serve", str(series), "--pki", str(pki_dir)]
    if prometheus_url:
        args += ["--prometheus-url", prometheus_url]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    assert process.stdout is not None
    port = int(process.stdout.readline())
    return process, port


def start_prometheus(work: Path) -> Any:
    import pandas as pd

    from tests.prometheus_fixture import PrometheusBlocks, binaries_or_skip, load_trace, trace_series, write_blocks

    prometheus, promtool = binaries_or_skip()
    trace = load_trace(pd.Timestamp.now(tz="UTC").floor("min") - pd.Timedelta(minutes=1))
    blocks = PrometheusBlocks(
        prometheus=prometheus, blocks_dir=write_blocks(trace_series(trace), promtool, work), trace=trace
    )
    server = blocks.server(work / "server")
    server.start()
    return server


def measure_server(
    series: int, pki_dir: Path, context: ssl.SSLContext, prometheus_url: str | None, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Every connection level against one server process of ``series`` series (and the adapter's route)."""
    rows: list[dict[str, Any]] = []
    process, port = start_server(series, pki_dir, prometheus_url)
    modes = [("snapshot", PATH)] + ([("instant query per request", ADAPTER_PATH)] if prometheus_url else [])
    try:
        for connections in [int(c) for c in args.connections.split(",")]:
            for mode, path in modes:
                result = asyncio.run(
                    load(
                        f"https://127.0.0.1:{port}{path}",
                        context,
                        connections,
                        args.duration,
                        args.max_requests,
                        args.rate,
                        server_cpu=lambda: process_cpu_s(process.pid),
                    )
                )
                rows.append({"mode": mode, "series": series, **result.row()})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        process.terminate()
        process.wait(timeout=10)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--series", default="10,1000,10000")
    parser.add_argument("--connections", default="1,16,64,256")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--max-requests", type=int, default=200_000)
    parser.add_argument("--adapter", action="store_true", help="also measure one Prometheus query per request")
    parser.add_argument(
        "--rate", type=float, help="open loop: requests/s over all connections, latency from the scheduled time"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--pki", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--prometheus-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, args.pki, args.prometheus_url)
        return

    from tests.pki import make_pki

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        pki = make_pki(work / "pki")
        context = ssl.create_default_context(cafile=str(pki.client_ca))
        context.load_cert_chain(pki.alice.cert, pki.alice.key)
        prometheus = start_prometheus(work / "prometheus") if args.adapter else None
        try:
            for series in [int(n) for n in args.series.split(",")]:
                url_for_adapter = (
                    prometheus.url if prometheus is not None and series == int(args.series.split(",")[0]) else None
                )
                rows += measure_server(series, pki.directory, context, url_for_adapter, args)
        finally:
            if prometheus is not None:
                prometheus.stop()
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print_table(rows, args)


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    load_kind = f"open loop at {args.rate:g} req/s offered" if args.rate else "closed loop"
    print(
        f"machine: {os.cpu_count()} cores; {load_kind}; {args.duration:g} s per level; "
        "TLS 1.3 with client certificates; loopback; srv us/req: the server process's CPU per request"
    )
    header = f"{'mode':<28}{'series':>7}{'conns':>7}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'errors':>8}"
    print(header + f"{'srv us/req':>12}")
    for row in rows:
        print(
            f"{row['mode']:<28}{row['series']:>7}{row['connections']:>7}{row['requests_per_s']:>10}"
            f"{row['p50_ms']:>9}{row['p99_ms']:>9}{row['max_ms']:>9}{row['errors']:>8}"
            f"{row['server_cpu_us_per_request'] or '-':>12}"
        )
    snapshot = {(r["series"], r["connections"]): r for r in rows if r["mode"] == "snapshot"}
    for row in rows:
        if row["mode"] != "snapshot":
            mine = snapshot[(row["series"], row["connections"])]
            print(
                f"instant-query / snapshot at {row['connections']} connections: "
                f"p50 x{row['p50_ms'] / mine['p50_ms']:.1f}, p99 x{row['p99_ms'] / mine['p99_ms']:.1f}"
            )


if __name__ == "__main__":
    main()
