"""Issue 38 item 7 on loopback: keep-alive clients that read every answer are never reset by the
secure port's write-stall guard, idle or beside a gRPC flood; a client that stops reading is.

    .venv/bin/python -m benchmarks.bench_write_stall [--idle-timeout 5] [--duration 30] [--readers 4] [--pause 0.01]

Starts ``gpu-autoscaler serve`` (the demo, free ports, ``server.idle_timeout`` as given) and runs,
each for ``--duration`` seconds:

1. ``--readers`` threads, each one keep-alive TLS connection with the demo's client certificate,
   sending a GET of the external metrics API and reading the whole answer, then pausing ``--pause``
   seconds (as a poller; its TCP then acknowledges each answer with the next request, so one answer
   of the same size is in flight at almost every moment), again and again;
2. the same beside two threads sending minimal valid ``GetMetrics`` calls as fast as they are answered.

Then one client that pipelines requests and never reads, timed until the server cuts it off. Prints
the answers read, the connections the server reset (client side: a reset, an EOF, a broken pipe)
and its "aborted: … unread" log lines in each phase. Bounded by time; the generator shares the
machine's cores with the server.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from benchmarks.bench_hostile import GET_METRICS, channel, request_bytes, wait_ready
from tests.hostile_clients import pipeline_without_reading

API_PATH = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/gpu_headroom"
ABORTED = re.compile(r"aborted: \d+ bytes of answers unread")


class Demo:
    """The demo as a child process, every log line kept."""

    def __init__(self, state: Path, idle_timeout_s: float) -> None:
        command = [sys.executable, "-m", "autoscaler", "serve", "--state-dir", str(state)]
        command += ["--secure-port", "0", "--http-port", "0", "--grpc-port", "0"]
        environment = {**os.environ, "GPU_AUTOSCALER_SERVER__IDLE_TIMEOUT": f"{idle_timeout_s:g}s"}
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment
        )
        self.lines: list[str] = []
        self.ports: dict[str, str] = {}
        patterns = {
            "https": r"external metrics API on https://127\.0\.0\.1:(\d+)",
            "grpc": r"KEDA external scaler .* on 127\.0\.0\.1:(\d+)",
            "http": r"probes and /metrics on http://127\.0\.0\.1:(\d+)",
        }
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            self.ports |= {name: m.group(1) for name, p in patterns.items() if (m := re.search(p, line))}
            if len(self.ports) == len(patterns):
                break
        threading.Thread(target=self._read_rest, daemon=True).start()

    def _read_rest(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def aborted(self) -> int:
        return sum(1 for line in list(self.lines) if ABORTED.search(line))


def client_context(state: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(state / "ca.crt"))
    context.load_cert_chain(state / "client.crt", state / "client.key")
    return context


def read_continuously(state: Path, port: int, pause_s: float, stop: threading.Event, counts: dict[str, int]) -> None:
    """One keep-alive connection reading every answer; a new one after each reset."""
    context = client_context(state)
    while not stop.is_set():
        connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
        try:
            while not stop.is_set():
                connection.request("GET", API_PATH)
                response = connection.getresponse()
                response.read()
                assert response.status == 200, response.status
                counts["answers"] = counts.get("answers", 0) + 1
                time.sleep(pause_s)
        except (OSError, ssl.SSLError, http.client.HTTPException) as error:
            counts[type(error).__name__] = counts.get(type(error).__name__, 0) + 1
        finally:
            connection.close()


def grpc_flood(state: Path, port: str, stop: threading.Event, counts: dict[str, int]) -> None:
    payload = request_bytes(0)
    with channel(state, port) as open_channel:
        send: grpc.UnaryUnaryMultiCallable[bytes, bytes] = open_channel.unary_unary(GET_METRICS)
        while not stop.is_set():
            send(payload, timeout=30)
            counts["grpc"] = counts.get("grpc", 0) + 1


def phase(demo: Demo, state: Path, *, readers: int, pause_s: float, duration_s: float, flood: bool) -> str:
    stop, counts = threading.Event(), dict[str, int]()
    aborted_before = demo.aborted()
    targets: list[tuple[Callable[..., None], tuple[object, ...]]] = [
        (read_continuously, (state, int(demo.ports["https"]), pause_s, stop, counts)) for _ in range(readers)
    ]
    if flood:
        targets += [(grpc_flood, (state, demo.ports["grpc"], stop, counts)) for _ in range(2)]
    threads = [threading.Thread(target=target, args=args) for target, args in targets]
    for thread in threads:
        thread.start()
    time.sleep(duration_s)
    stop.set()
    for thread in threads:
        thread.join()
    time.sleep(1.0)  # a last sweep's log line
    resets = sum(count for name, count in counts.items() if name not in ("answers", "grpc"))
    return (
        f"{readers} readers for {duration_s:.0f} s{' beside a gRPC flood' if flood else ''}: "
        f"{counts.get('answers', 0):,} answers read, {counts.get('grpc', 0):,} gRPC calls answered, "
        f"{resets} connections ended by the server {sorted(counts.items())}, "
        f"{demo.aborted() - aborted_before} 'aborted' log lines"
    )


def never_reading(state: Path, port: int, limit_s: float) -> str:
    elapsed, how = pipeline_without_reading(port, client_context(state), API_PATH, limit_s)
    if how == "never":
        return f"a client that never reads: still connected after {limit_s:.0f} s"
    return f"a client that never reads: cut off after {elapsed:.1f} s ({how})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--idle-timeout", type=float, default=5.0, help="server.idle_timeout in seconds")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of each readers phase")
    parser.add_argument("--readers", type=int, default=4, help="keep-alive clients reading every answer")
    parser.add_argument("--pause", type=float, default=0.01, help="seconds each reader waits after an answer")
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}, load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"server.idle_timeout {args.idle_timeout:g} s, readers pause {args.pause:g} s after each answer")
    with tempfile.TemporaryDirectory() as directory:
        state = Path(directory) / "state"
        demo = Demo(state, args.idle_timeout)
        try:
            wait_ready(demo.ports["http"])
            for flood in (False, True):
                print(
                    phase(demo, state, readers=args.readers, pause_s=args.pause, duration_s=args.duration, flood=flood),
                    flush=True,
                )
            aborted_before = demo.aborted()
            print(never_reading(state, int(demo.ports["https"]), 4 * args.idle_timeout + 10))
            time.sleep(1.0)
            print(f"  'aborted' log lines: {demo.aborted() - aborted_before}")
        finally:
            demo.process.terminate()
            demo.process.wait(timeout=60)


if __name__ == "__main__":
    main()
