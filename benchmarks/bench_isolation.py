"""Issue 38 item 1: does load on the ops port or the gRPC scaler slow the external metrics API?

    .venv/bin/python -m benchmarks.bench_isolation [--requests 300] [--duration 15] [--clients 200]
                                                    [--cases ops,histories,grpc,grpc-under-ops]

Starts ``gpu-autoscaler serve`` (the demo, free ports) and, once it is ready, measures the HTTPS API's
latency (p50, p99 over ``--requests`` GETs on one keep-alive connection with the demo's client
certificate, as the aggregator's proxy holds one, sent every 40 ms and timed from that schedule, so a
stall counts for every request it delays) idle, then under each load:

1. ``--clients`` concurrent ops clients on the plain port, each looping over ``/``, ``/metrics``,
   ``/api/v1/forecasts`` and ``/api/v1/forecasts/gpu_demand_forecast?history=14d``;
2. 8 clients asking for the page with a distinct ``history`` each time (no two charts alike);
3. 4 gRPC callers sending ``GetMetrics`` with a distinct 14 KiB ``labelSelector`` (matching the demo's
   pool) each time.

With ``grpc-under-ops`` in ``--cases`` it also measures KEDA's ``GetMetrics`` (minimal valid calls,
paced alike, one channel) idle and under load 1 (it runs on a thread and loop of its own, as the API).

Each load runs in its own process (so the generator's own work is not charged to this one's clock),
starts a second before the measurement and stops after it or after ``--duration`` seconds. Every
figure is printed with the load's own answer count. The generators share the machine's cores with
the server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.bench_hostile import (
    API_PATH,
    GET_METRICS,
    channel,
    request_bytes,
    send_counted,
    start_demo,
    wait_ready,
)

# Requests are sent on a fixed schedule and timed from their scheduled moment, as wrk2 does: a stall
# is charged to every request it delays, not to the one caught in it only (coordinated omission).
INTERVAL_S = 0.04


def paced_ms(send_once: Callable[[], object], count: int, seconds: float) -> np.ndarray:
    """``count`` calls of ``send_once`` every ``INTERVAL_S``, fewer if ``seconds`` pass; latency from each schedule."""
    times: list[float] = []
    first = time.perf_counter()
    stop_at = first + seconds
    for number in range(count):
        scheduled = first + number * INTERVAL_S
        if scheduled >= stop_at:
            break
        if scheduled > time.perf_counter():
            time.sleep(scheduled - time.perf_counter())
        send_once()
        times.append((time.perf_counter() - scheduled) * 1000)
    return np.array(times)


def https_latencies_ms(state: Path, port: str, count: int, seconds: float = 600.0) -> np.ndarray:
    """Paced GETs of the metric on one keep-alive connection with the demo's client certificate."""
    import http.client
    import ssl

    context = ssl.create_default_context(cafile=str(state / "ca.crt"))
    context.load_cert_chain(state / "client.crt", state / "client.key")
    connection = http.client.HTTPSConnection("127.0.0.1", int(port), context=context, timeout=60)

    def get() -> None:
        connection.request("GET", API_PATH)
        response = connection.getresponse()
        response.read()
        assert response.status == 200, response.status

    get()  # connect
    try:
        return paced_ms(get, count, seconds)
    finally:
        connection.close()


def grpc_latencies_ms(state: Path, port: str, count: int, seconds: float = 600.0) -> np.ndarray:
    """Paced minimal ``GetMetrics`` calls on one channel."""
    payload = request_bytes(0)
    with channel(state, port) as open_channel:
        send: Callable[..., object] = open_channel.unary_unary(GET_METRICS)
        send(payload, timeout=30)  # connect
        return paced_ms(lambda: send(payload, timeout=60), count, seconds)


OPS_PATHS = ("/", "/metrics", "/api/v1/forecasts", "/api/v1/forecasts/gpu_demand_forecast?history=14d")


async def _ops_clients(port: str, clients: int, duration_s: float, paths: list[str] | None) -> int:
    import aiohttp

    answered = 0
    stop_at = time.monotonic() + duration_s
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def client(number: int) -> None:
            nonlocal answered
            index = number
            while time.monotonic() < stop_at:
                # Distinct histories: a new chart span on every request; else the mix, round-robin.
                path = f"/ui/gpu_demand_forecast?history={600 + index}m" if paths is None else paths[index % len(paths)]
                index += clients
                try:
                    async with session.get(f"http://127.0.0.1:{port}{path}") as response:
                        await response.read()
                        answered += 1
                except (aiohttp.ClientError, TimeoutError):
                    pass

        await asyncio.gather(*(client(number) for number in range(clients)))
    return answered


def _grpc_callers(state: Path, port: str, callers: int, duration_s: float) -> dict[str, int]:
    # 14 KiB that match the demo's pool: parsed, then matched against its series, and answered.
    selector = "nodepool in (demo-gpu," + ",".join(f"p{index:04d}" for index in range(2_400)) + ")"
    codes: dict[str, int] = {}
    stop_at = time.monotonic() + duration_s

    def caller(number: int) -> None:
        with channel(state, port) as open_channel:
            send: Callable[..., object] = open_channel.unary_unary(GET_METRICS)
            index = number
            while time.monotonic() < stop_at:
                payload = request_bytes(0, labelSelector=f"{selector},n!=n{index}")
                index += callers
                send_counted(send, payload, codes)

    threads = [threading.Thread(target=caller, args=(number,)) for number in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return codes


def run_load(kind: str, state: Path, ports: dict[str, str], clients: int, duration_s: float) -> None:
    """The load generator's process: prints how many answers it got."""
    if kind == "ops":
        answered = asyncio.run(_ops_clients(ports["http"], clients, duration_s, list(OPS_PATHS)))
    elif kind == "histories":
        answered = asyncio.run(_ops_clients(ports["http"], clients, duration_s, None))
    else:
        codes = _grpc_callers(state, ports["grpc"], clients, duration_s)
        answered = sum(codes.values())
        assert set(codes) == {"OK"}, codes  # distinct selectors within the limits, each answered
    print(answered, flush=True)


def measure_under(
    kind: str, clients: int, state: Path, ports: dict[str, str], requests: int, duration_s: float, grpc: bool = False
) -> tuple[np.ndarray, str]:
    command = [sys.executable, "-m", "benchmarks.bench_isolation", "--load", kind, "--state", str(state)]
    command += ["--ports", f"{ports['https']},{ports['http']},{ports['grpc']}"]
    command += ["--clients", str(clients), "--duration", str(duration_s)]
    load = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    try:
        time.sleep(1.0)  # the clients connect and the server's queue fills
        measure = grpc_latencies_ms if grpc else https_latencies_ms
        latencies = measure(state, ports["grpc" if grpc else "https"], requests, duration_s - 2.0)
        answered = load.communicate(timeout=duration_s + 180)[0].strip()
    finally:
        load.kill()
    return latencies, answered


def _row(name: str, latencies: np.ndarray, idle_p50: float, answered: str = "") -> str:
    p50, p99 = np.median(latencies), np.percentile(latencies, 99)
    note = f", {len(latencies)} requests" + (f", load answered {answered}" if answered else "")
    return f"{name:<44} p50 {p50:8.2f} ms  p99 {p99:8.2f} ms  p50 {p50 / idle_p50:6.2f}x idle{note}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300, help="HTTPS requests per latency measurement")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds each load runs at most")
    parser.add_argument("--clients", type=int, default=200, help="concurrent ops clients in case 1")
    parser.add_argument("--cases", default="ops,histories,grpc", help="which loads, in order (comma-separated)")
    parser.add_argument("--load", choices=("ops", "histories", "grpc"), help=argparse.SUPPRESS)
    parser.add_argument("--state", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--ports", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load is not None:
        https, http, grpc = args.ports.split(",")
        run_load(args.load, args.state, {"https": https, "http": http, "grpc": grpc}, args.clients, args.duration)
        return
    print(f"cores: {os.cpu_count()}, load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as directory:
        state = Path(directory) / "state"
        process, ports = start_demo(state)
        try:
            wait_ready(ports["http"])
            https_latencies_ms(state, ports["https"], 50)  # warm up
            idle = https_latencies_ms(state, ports["https"], args.requests)
            idle_p50 = float(np.median(idle))
            print(_row("idle", idle, idle_p50), flush=True)
            cases = (
                ("ops", args.clients, f"{args.clients} ops clients (page, /metrics, forecasts, 14d)"),
                ("histories", 8, "8 clients, page with distinct histories"),
                ("grpc", 4, "4 gRPC callers, distinct 14 KiB selectors"),
            )
            for kind, clients, name in (case for case in cases if case[0] in args.cases.split(",")):
                latencies, answered = measure_under(kind, clients, state, ports, args.requests, args.duration)
                print(_row(name, latencies, idle_p50, answered), flush=True)
            again = https_latencies_ms(state, ports["https"], args.requests)
            print(_row("idle again", again, idle_p50), flush=True)
            if "grpc-under-ops" in args.cases.split(","):
                idle_grpc = grpc_latencies_ms(state, ports["grpc"], args.requests)
                idle_grpc_p50 = float(np.median(idle_grpc))
                print(_row("KEDA GetMetrics idle", idle_grpc, idle_grpc_p50), flush=True)
                latencies, answered = measure_under(
                    "ops", args.clients, state, ports, args.requests, args.duration, grpc=True
                )
                name = f"KEDA GetMetrics, {args.clients} ops clients"
                print(_row(name, latencies, idle_grpc_p50, answered), flush=True)
        finally:
            process.terminate()
            process.wait(timeout=60)
        print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
