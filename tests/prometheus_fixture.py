"""A real Prometheus, backfilled with real trace values, for tests; plus a fault-injecting proxy.

The TSDB is filled with series named and labelled like the real exporters (kube-state-metrics,
dcgm-exporter, an application request counter) whose values come from public traces:

- Helios Earth, four virtual clusters (one node each, two per nodepool): ``running_gpu_num`` becomes the
  GPU request of a Running pod, ``pending_gpu_num`` that of a Pending pod, ``total_gpu_num`` the node's
  allocatable GPUs, and ``100 * running / total`` its DCGM utilisation (half the nodes labelled
  ``Hostname``, half ``hostname``, as released and newer dcgm-exporters do).
- Alibaba GenAI LoRA requests per minute, as ``http_requests_total`` counters for two services.

The last ``TRACE_DAYS`` days of each trace are shifted so that they end a minute before the session
starts; queries relative to "now" therefore see them (for about 5 minutes, Prometheus's lookback, past
the end: compare exact values on ranges ending at ``trace.end``). kube-state-metrics (its series,
``kube_node_info`` and ``up``) goes on reporting the cluster as the trace left it for ``KSM_HOLD_S``
past the end, so the service sees a live kube-state-metrics and steady demand while the tests run.
``FixtureTrace`` holds the values written, so tests compare against them. Startup (trace, promtool,
Prometheus) takes about 5 s.

Fixtures: ``prometheus`` (session-wide, never killed), ``prometheus_restartable`` (a private instance
per test, for kill/restart tests) and ``fault_proxy`` (a proxy in front of ``prometheus``).
Without the ``prometheus``/``promtool`` binaries the tests are skipped, except under CI, where that is
an error (``tests/ci.py`` decides). The traces come from ``tests/traces.py``; without them the
session stops before any test runs (``tests/conftest.py``).
"""

from __future__ import annotations

import asyncio
import ctypes
import enum
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np
import pandas as pd
import pytest
from aiohttp import ClientSession, ClientTimeout, web

from tests import ci, traces
from tests.eventually import eventually_sync

TRACE_DAYS = 14
STARTUP_TIMEOUT_S = 15.0
# Helios virtual cluster -> nodepool. The four busiest VCs; each pool mixes both DCGM host labels.
NODEPOOL_OF_VC = {"vc6YE": "a100", "vcLJZ": "a100", "vcvlY": "h100", "vcpDC": "h100"}
HOST_LABEL_OF_VC = {"vc6YE": "Hostname", "vcLJZ": "hostname", "vcvlY": "Hostname", "vcpDC": "hostname"}
FINISHED_POD_GPUS = 8.0  # a Succeeded pod still exports its requests; no preset may count them
REQUEST_SERVICES = {"TXT_2_IMG": "txt2img", "IMG_2_IMG": "img2img"}
EDGE_METRIC = "gpu_autoscaler_fixture_edge_values"

# Constant series (labels, phases, capacity) are written every 4 minutes: under the 5 minute lookback,
# a quarter of the samples.
_CONSTANT_EVERY_S = 240
# kube-state-metrics series go on past the trace's end, at its last values, for this long: the
# service reads relative to now, and a kube-state-metrics that stopped would be (rightly) a failure.
KSM_HOLD_S = 6 * 3600
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


@dataclass(frozen=True)
class FixtureTrace:
    """What was written into the fixture's TSDB (all frames on a 1-minute tz-aware UTC index)."""

    start: pd.Timestamp  # first 1-minute sample
    end: pd.Timestamp  # last 1-minute sample
    nodepool_of_vc: Mapping[str, str]
    host_label_of_vc: Mapping[str, str]
    running: pd.DataFrame  # GPUs requested by the Running pod "<vc>-running" on node "earth-<vc>"
    pending: pd.DataFrame  # GPUs requested by the Pending pod "<vc>-pending" (no node)
    allocatable: pd.Series  # per VC: the node's allocatable GPUs (constant)
    utilization: pd.DataFrame  # DCGM_FI_DEV_GPU_UTIL (percent) of node "earth-<vc>", gap included
    requests_total: pd.DataFrame  # http_requests_total counter per service
    dcgm_gap: tuple[pd.Timestamp, pd.Timestamp]  # [first, last] minute missing from one VC's DCGM series
    dcgm_gap_vc: str
    # EDGE_METRIC over the last 3 hours: real values, NaN at minutes 30-31, +Inf at 60, -Inf at 61, and
    # minutes 100-114 missing from the index (never written).
    edge_values: pd.Series

    @staticmethod
    def node(vc: str) -> str:
        return f"earth-{vc}"


@dataclass
class BackfillSeries:
    family: str
    labels: Mapping[str, str]
    timestamps: np.ndarray  # int seconds, increasing
    values: Sequence[str]  # already formatted


def binaries_or_skip() -> tuple[str, str]:
    """Paths of ``prometheus`` and ``promtool``; skips (or fails under CI) when they are missing."""
    found = [shutil.which(name) for name in ("prometheus", "promtool")]
    if None in found:
        _skip_or_fail("prometheus and promtool are not installed (Debian: apt-get install prometheus)")
    return str(found[0]), str(found[1])


def load_trace(end: pd.Timestamp, days: int = TRACE_DAYS) -> FixtureTrace:
    """Read the real traces and shift their last ``days`` days to end at ``end`` (a whole minute)."""
    minutes = days * 1440
    index = pd.date_range(end=end, periods=minutes, freq="1min", tz="UTC")
    columns: dict[str, dict[str, np.ndarray]] = {"running": {}, "pending": {}}
    allocatable: dict[str, float] = {}
    for vc in NODEPOOL_OF_VC:
        frame = pd.read_csv(
            traces.path(f"helios_earth_2020/earth_{vc}_cluster_sequence_vc.csv.gz"),
            usecols=["running_gpu_num", "pending_gpu_num", "total_gpu_num"],
        ).tail(minutes)
        columns["running"][vc] = frame["running_gpu_num"].to_numpy(np.float64)
        columns["pending"][vc] = frame["pending_gpu_num"].to_numpy(np.float64)
        allocatable[vc] = float(frame["total_gpu_num"].max())
    running = pd.DataFrame(columns["running"], index=index)
    pending = pd.DataFrame(columns["pending"], index=index)
    utilization = running * 100.0 / pd.Series(allocatable)

    gap_vc = "vcpDC"
    gap = (end - pd.Timedelta(minutes=139), end - pd.Timedelta(minutes=120))  # 20 minutes, 2h ago
    utilization.loc[gap[0] : gap[1], gap_vc] = np.nan

    requests = pd.read_csv(
        traces.path("alibaba_genai_v2026/lora_request_trace.csv.gz"), usecols=["gmt_create", "predict_type"]
    )
    created = pd.to_datetime(requests["gmt_create"]).dt.floor("min")
    counters = {}
    for predict_type, service in REQUEST_SERVICES.items():
        per_minute = created[requests["predict_type"] == predict_type].value_counts().sort_index()
        full = per_minute.reindex(pd.date_range(created.min(), created.max(), freq="1min"), fill_value=0)
        counters[service] = full.cumsum().to_numpy(np.float64)[-minutes:]
    requests_total = pd.DataFrame(counters, index=index)

    edge = running["vc6YE"].iloc[-180:].copy()
    edge.iloc[[30, 31]] = np.nan
    edge.iloc[60] = np.inf
    edge.iloc[61] = -np.inf
    edge = edge.drop(edge.index[100:115])  # minutes 100-114 are not written at all: a real gap
    return FixtureTrace(
        start=index[0],
        end=index[-1],
        nodepool_of_vc=dict(NODEPOOL_OF_VC),
        host_label_of_vc=dict(HOST_LABEL_OF_VC),
        running=running,
        pending=pending,
        allocatable=pd.Series(allocatable),
        utilization=utilization,
        requests_total=requests_total,
        dcgm_gap=gap,
        dcgm_gap_vc=gap_vc,
        edge_values=edge,
    )


def trace_series(trace: FixtureTrace) -> list[BackfillSeries]:
    """Every series to backfill, named and labelled like the real exporters."""
    minute_ts = pd.DatetimeIndex(trace.running.index).as_unit("s").asi8
    constant_ts = np.arange(int(minute_ts[-1]), int(minute_ts[0]) - 2 * _CONSTANT_EVERY_S, -_CONSTANT_EVERY_S)[::-1]
    # kube-state-metrics goes on reporting the cluster as the trace left it (future samples).
    held_ts = np.arange(int(minute_ts[-1]) + 60, int(minute_ts[-1]) + KSM_HOLD_S + 1, 60)
    ksm_minute_ts = np.concatenate([minute_ts, held_ts])
    ksm_constant_ts = np.concatenate([constant_ts, held_ts[(held_ts - minute_ts[-1]) % _CONSTANT_EVERY_S == 0]])
    out: list[BackfillSeries] = []

    def add(family: str, labels: Mapping[str, str], timestamps: np.ndarray, values: np.ndarray) -> None:
        keep = ~np.isnan(values) if family != EDGE_METRIC else np.ones(len(values), dtype=bool)
        out.append(BackfillSeries(family, labels, timestamps[keep], _om_values(values[keep])))

    def constant(family: str, labels: Mapping[str, str], value: float) -> None:
        add(family, labels, ksm_constant_ts, np.full(len(ksm_constant_ts), value))

    def held(family: str, labels: Mapping[str, str], values: np.ndarray) -> None:
        add(family, labels, ksm_minute_ts, np.concatenate([values, np.full(len(held_ts), values[-1])]))

    constant("up", {"job": "kube-state-metrics", "instance": "10.0.0.2:8080"}, 1.0)
    for vc, pool in trace.nodepool_of_vc.items():
        node = trace.node(vc)
        gpu = {"resource": "nvidia_com_gpu", "unit": "integer"}
        running_pod = {"namespace": vc, "pod": f"{vc}-running", "container": "main", "node": node}
        pending_pod = {"namespace": vc, "pod": f"{vc}-pending", "container": "main"}  # not scheduled
        finished_pod = {"namespace": vc, "pod": f"{vc}-finished", "container": "main", "node": node}
        requests = "kube_pod_container_resource_requests"
        held(requests, running_pod | gpu, trace.running[vc].to_numpy())
        held(requests, pending_pod | gpu, trace.pending[vc].to_numpy())
        constant(requests, finished_pod | gpu, FINISHED_POD_GPUS)
        constant(requests, running_pod | {"resource": "cpu", "unit": "core"}, 32.0)
        for pod, phase in ((running_pod, "Running"), (pending_pod, "Pending"), (finished_pod, "Succeeded")):
            for candidate in ("Pending", "Running", "Succeeded"):
                identity = {"namespace": vc, "pod": pod["pod"], "phase": candidate}
                constant("kube_pod_status_phase", identity, 1.0 if candidate == phase else 0.0)
        constant("kube_node_status_allocatable", {"node": node} | gpu, float(trace.allocatable[vc]))
        constant("kube_node_labels", {"node": node, "label_karpenter_sh_nodepool": pool}, 1.0)
        constant("kube_node_info", {"node": node, "kubelet_version": "v1.32.1"}, 1.0)
        host = {trace.host_label_of_vc[vc]: node, "gpu": "0", "UUID": f"GPU-{vc}", "modelName": "NVIDIA A100"}
        add("DCGM_FI_DEV_GPU_UTIL", host, minute_ts, trace.utilization[vc].to_numpy())
        mig = host | {"GPU_I_ID": "1", "GPU_I_PROFILE": "7g.80gb"}
        add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", mig, minute_ts, trace.utilization[vc].to_numpy() / 100.0)
    for service in trace.requests_total.columns:
        labels = {"namespace": "inference", "service": str(service), "code": "200"}
        add("http_requests_total", labels, minute_ts, trace.requests_total[service].to_numpy())
    edge_ts = pd.DatetimeIndex(trace.edge_values.index).as_unit("s").asi8
    add(EDGE_METRIC, {"case": "nan_inf_gap"}, edge_ts, trace.edge_values.to_numpy())
    return out


def write_blocks(series: Sequence[BackfillSeries], promtool: str, work_dir: Path) -> Path:
    """Write one OpenMetrics file and turn it into TSDB blocks; returns the blocks directory."""
    work_dir.mkdir(parents=True, exist_ok=True)
    openmetrics, blocks_dir = work_dir / "trace.om", work_dir / "blocks"
    with openmetrics.open("w", encoding="utf-8") as out:
        _write_openmetrics(out, series)
    # promtool re-reads the whole input once per block it writes: ask for a few large blocks, not one
    # per 2 hours (which makes the import quadratic and took ~30 s for this data).
    span_hours = (max(s.timestamps[-1] for s in series) - min(s.timestamps[0] for s in series)) // 3600
    command = [
        promtool,
        "tsdb",
        "create-blocks-from",
        "openmetrics",
        f"--max-block-duration={int(span_hours) + 2}h",
        "-q",
        str(openmetrics),
        str(blocks_dir),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"promtool create-blocks-from failed: {result.stderr[-2000:]}")
    return blocks_dir


def _write_openmetrics(out: IO[str], series: Sequence[BackfillSeries]) -> None:
    families: dict[str, list[BackfillSeries]] = {}
    for one in series:
        families.setdefault(one.family, []).append(one)
    for family, members in families.items():
        # OpenMetrics names a counter family without its _total suffix.
        counter = family.endswith("_total")
        out.write(f"# TYPE {family.removesuffix('_total')} {'counter' if counter else 'gauge'}\n")
        for one in members:
            prefix = family + "{" + ",".join(f'{k}="{v}"' for k, v in one.labels.items()) + "}"
            lines = zip(one.values, one.timestamps, strict=True)
            out.writelines(f"{prefix} {value} {ts}\n" for value, ts in lines)
    out.write("# EOF\n")


def _om_values(values: np.ndarray) -> list[str]:
    text = values.astype(str)
    text = np.where(np.isnan(values), "NaN", text)
    text = np.where(np.isposinf(values), "+Inf", text)
    return list(np.where(np.isneginf(values), "-Inf", text))


def _skip_or_fail(reason: str) -> None:
    ci.missing_tool(reason)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class PrometheusServer:
    """One Prometheus process on a fixed loopback port; ``stop``/``kill`` and ``start`` again at will.

    It is ready once ``probe_query`` (``count(kube_node_labels)``) answers at ``probe_at`` (default: the
    trace's end).
    """

    binary: str
    data_dir: Path
    trace: FixtureTrace | None
    port: int = field(default_factory=free_port)
    _process: subprocess.Popen[bytes] | None = None
    probe_at: pd.Timestamp | None = None
    probe_query: str = "count(kube_node_labels)"  # an instance without kube-state-metrics needs another
    extra_args: Sequence[str] = ()  # more flags (benchmarks: --query.timeout, as a user's Prometheus has it)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"prometheus-{self.port}.log"

    def start(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Start (or restart) and wait until the backfilled data answers queries."""
        if self._process is not None and self._process.poll() is None:
            return
        config = self.data_dir.parent / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1m\n", encoding="utf-8")  # scrapes nothing
        command = [
            self.binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=60d",
            # No compaction of the backfilled 2h blocks: it would only burn the CI machine's CPU.
            "--storage.tsdb.max-block-duration=2h",
            "--log.level=warn",
            *self.extra_args,
        ]
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        self._wait_until_ready(timeout_s)

    def stop(self) -> None:
        """Graceful shutdown (SIGTERM)."""
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        """Crash it (SIGKILL): connections are refused until ``start``."""
        self._end(signal.SIGKILL)

    def _end(self, how: signal.Signals) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(how)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def _wait_until_ready(self, timeout_s: float) -> None:
        process = self._process
        assert process is not None
        # Readiness alone is not enough: the backfilled blocks must be queryable too.
        probe = "/api/v1/query?" + urllib.parse.urlencode(
            {"query": self.probe_query, "time": self._probe_time().timestamp()}
        )

        def answers_over_the_backfill() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"prometheus exited at startup:\n{self._log_tail()}")
            with urllib.request.urlopen(self.url + probe, timeout=1) as answer:  # noqa: S310 (loopback)
                return bool(json.load(answer)["data"]["result"])

        try:
            eventually_sync(
                answers_over_the_backfill,
                message="prometheus to answer a query over the backfilled blocks",
                timeout=timeout_s,
                interval=0.05,
                # Not listening yet, or answering before its blocks are loaded.
                retrying_on=(OSError, ValueError, KeyError),
            )
        except AssertionError as error:
            raise RuntimeError(f"{error}\n{self._log_tail()}") from None

    def instant(self, promql: str, at: pd.Timestamp) -> list[tuple[dict[str, str], float]]:
        """An instant query's answer at ``at``: each sample's labels and value."""
        query = urllib.parse.urlencode({"query": promql, "time": at.timestamp()})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{query}", timeout=10) as answer:  # noqa: S310
            result = json.load(answer)["data"]["result"]
        return [(sample["metric"], float(sample["value"][1])) for sample in result]

    def _probe_time(self) -> pd.Timestamp:
        if self.probe_at is not None:
            return self.probe_at
        if self.trace is None:
            raise ValueError("a PrometheusServer needs a trace or probe_at")
        return self.trace.end

    def _log_tail(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-3000:]


def die_with_parent() -> None:
    """In the child before exec: a killed test run must not leave Prometheus running (Linux only)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass(frozen=True)
class PrometheusBlocks:
    """Backfilled TSDB blocks, built once per session, from which every instance gets its own copy."""

    prometheus: str
    blocks_dir: Path
    trace: FixtureTrace

    def server(self, work_dir: Path) -> PrometheusServer:
        data_dir = work_dir / "data"
        # Blocks are immutable, so hard links are a safe, instant copy.
        shutil.copytree(self.blocks_dir, data_dir, copy_function=_link_or_copy)
        return PrometheusServer(binary=self.prometheus, data_dir=data_dir, trace=self.trace)


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


class ProxyMode(enum.Enum):
    PASS_THROUGH = "pass-through"
    DELAY = "delay"  # wait ``delay_s``, then pass through
    HTTP_500 = "http-500"
    INVALID_JSON = "invalid-json"  # 200 with an HTML body
    TRUNCATED = "truncated"  # a well-formed HTTP answer whose JSON body is cut in half
    CONNECTION_DROP = "connection-drop"  # announces the whole body, sends half, closes the connection


class FaultProxy:
    """A loopback HTTP proxy in front of Prometheus whose failure mode can be switched at any time.

    It runs its own event loop in a thread so that sync and async tests (whatever their loop) can use it.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.mode = ProxyMode.PASS_THROUGH
        self.delay_s = 0.0
        self.requests_seen = 0
        self._times_left: int | None = None
        self._matching: str | None = None
        self._lock = threading.Lock()
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set_mode(
        self, mode: ProxyMode, delay_s: float = 0.0, times: int | None = None, matching: str | None = None
    ) -> None:
        """Inject ``mode`` into every following request, or only into the next ``times`` of them; with
        ``matching``, only into requests whose query string holds it (one signal's PromQL)."""
        with self._lock:
            self.mode, self.delay_s, self._times_left, self._matching = mode, delay_s, times, matching

    def _next_mode(self, query: str) -> ProxyMode:
        with self._lock:
            self.requests_seen += 1
            if self._matching is not None and self._matching not in query:
                return ProxyMode.PASS_THROUGH
            mode = self.mode
            if self._times_left is not None:
                self._times_left -= 1
                if self._times_left <= 0:
                    self.mode, self._times_left = ProxyMode.PASS_THROUGH, None
            return mode

    def start(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=10)

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def _serve(self) -> None:
        self._session = ClientSession(timeout=ClientTimeout(total=60))
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.05)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
        # Handlers still sleeping in DELAY mode would otherwise die with the loop, noisily.
        stragglers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in stragglers:
            task.cancel()
        await asyncio.gather(*stragglers, return_exceptions=True)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        mode = self._next_mode(urllib.parse.unquote_plus(request.query_string))
        if mode is ProxyMode.HTTP_500:
            return web.Response(status=500, text="fault proxy: injected failure")
        if mode is ProxyMode.INVALID_JSON:
            return web.Response(status=200, text="<html>not JSON</html>", content_type="application/json")
        if mode is ProxyMode.DELAY:
            await asyncio.sleep(self.delay_s)  # the slow Prometheus is the fault under test
        status, body, content_type = await self._forward(request)
        if mode is ProxyMode.TRUNCATED:
            return web.Response(status=status, body=body[: len(body) // 2], content_type=content_type)
        if mode is ProxyMode.CONNECTION_DROP:
            response = web.StreamResponse(status=status, headers={"Content-Type": content_type})
            response.content_length = len(body)
            await response.prepare(request)
            await response.write(body[: len(body) // 2])
            if request.transport is not None:
                request.transport.abort()
            return response
        return web.Response(status=status, body=body, content_type=content_type)

    async def _forward(self, request: web.Request) -> tuple[int, bytes, str]:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "content-type")}
        async with self._session.request(
            request.method, self.upstream + request.path_qs, data=await request.read(), headers=headers
        ) as upstream:
            return upstream.status, await upstream.read(), upstream.content_type


@pytest.fixture(scope="session")
def prometheus_blocks(tmp_path_factory: pytest.TempPathFactory) -> PrometheusBlocks:
    prometheus, promtool = binaries_or_skip()
    end = pd.Timestamp.now(tz="UTC").floor("min") - pd.Timedelta(minutes=1)
    trace = load_trace(end)
    blocks_dir = write_blocks(trace_series(trace), promtool, tmp_path_factory.mktemp("prometheus-blocks"))
    return PrometheusBlocks(prometheus=prometheus, blocks_dir=blocks_dir, trace=trace)


@pytest.fixture(scope="session")
def prometheus(
    prometheus_blocks: PrometheusBlocks, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusServer]:
    """The shared instance. Never stop or kill it in a test: use ``prometheus_restartable``."""
    server = prometheus_blocks.server(tmp_path_factory.mktemp("prometheus"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def prometheus_restartable(prometheus_blocks: PrometheusBlocks, tmp_path: Path) -> Iterator[PrometheusServer]:
    """A private instance (own data copy and port) that a test may stop, kill and start again."""
    server = prometheus_blocks.server(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fault_proxy(prometheus: PrometheusServer) -> Iterator[FaultProxy]:
    """A FaultProxy in pass-through mode in front of the shared instance."""
    with FaultProxy(prometheus.url) as proxy:
        yield proxy
