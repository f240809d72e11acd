"""The read-only trial on a real Prometheus, as a new user runs it: ``serve --prometheus-url`` and
``report``, each a real process with no kubeconfig anywhere (KUBECONFIG names a missing file, HOME
is empty).

The shared ``prometheus`` fixture holds 14 days of kube-state-metrics and dcgm-exporter history in
two node pools (a100, h100) and Pending pods (no pool). Two small instances stand for what goes wrong:
one scrapes an application but no kube-state-metrics, the other has one hour of kube-state-metrics.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from html import unescape
from pathlib import Path

import aiohttp
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from autoscaler.commands.cli import main
from autoscaler.simulation import what_if
from tests.cli_helpers import assert_runtime_failure, assert_usage_error
from tests.eventually import eventually
from tests.prometheus_fixture import (
    BackfillSeries,
    PrometheusServer,
    binaries_or_skip,
    free_port,
    write_blocks,
)

NOT_SERVED = "Nothing is served to the cluster"
SHORT_MINUTES = 60


def _no_kubeconfig(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {**os.environ, "KUBECONFIG": str(tmp_path / "no-such-kubeconfig"), "HOME": str(home)}


def _small_prometheus(work: Path, series: list[BackfillSeries], end: pd.Timestamp, probe: str) -> PrometheusServer:
    prometheus, promtool = binaries_or_skip()
    blocks = write_blocks(series, promtool, work)
    server = PrometheusServer(binary=prometheus, data_dir=blocks, trace=None, probe_at=end, probe_query=probe)
    server.start()
    return server


def _minutes(end: pd.Timestamp, count: int) -> np.ndarray:
    return np.arange(int(end.timestamp()) - 60 * (count - 1), int(end.timestamp()) + 1, 60)


@pytest.fixture(scope="module")
def without_ksm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """A Prometheus that scrapes an application's counter for a day, and no kube-state-metrics."""
    end = pd.Timestamp.now(tz="UTC").floor("min")
    times = _minutes(end, 1440)
    counter = BackfillSeries("http_requests_total", {"service": "web"}, times, [str(i) for i in range(len(times))])
    server = _small_prometheus(tmp_path_factory.mktemp("no-ksm"), [counter], end, "count(http_requests_total)")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def short_history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """kube-state-metrics for the last hour only: one pod requesting 4 GPUs on a node of pool a100."""
    end = pd.Timestamp.now(tz="UTC").floor("min")
    times = _minutes(end, SHORT_MINUTES)

    def constant(family: str, labels: Mapping[str, str], value: float) -> BackfillSeries:
        return BackfillSeries(family, labels, times, [str(value)] * len(times))

    pod = {"namespace": "train", "pod": "job-0", "container": "main", "node": "node-a"}
    series = [
        constant("kube_pod_container_resource_requests", pod | {"resource": "nvidia_com_gpu", "unit": "integer"}, 4),
        constant("kube_pod_status_phase", {"namespace": "train", "pod": "job-0", "phase": "Running"}, 1),
        constant("kube_node_labels", {"node": "node-a", "label_karpenter_sh_nodepool": "a100"}, 1),
        constant("kube_node_info", {"node": "node-a"}, 1),
    ]
    server = _small_prometheus(tmp_path_factory.mktemp("short"), series, end, "count(kube_node_labels)")
    yield server
    server.stop()


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (Linux: its socket inodes in /proc/net/tcp*)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            if (target := os.readlink(fd)).startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class TrialProcess:
    """``gpu-autoscaler serve --prometheus-url`` as a child process, its log read by the test."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        command = [sys.executable, "-m", "autoscaler", "serve", "--prometheus-url", url, "--http-port", "0"]
        command += ["--state-dir", str(tmp_path / "state")]
        # A session of its own: stop() sends SIGINT to its whole group, as Ctrl-C in a terminal does.
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_no_kubeconfig(tmp_path),
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.started = time.monotonic()

    def page_url(self, timeout_s: float = 90) -> str:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            if found := re.search(r"forecasts on (http://127\.0\.0\.1:\d+)/", line):
                return found.group(1)
        raise AssertionError("the trial did not start:\n" + "".join(self.lines))

    def stop(self) -> tuple[int, str]:
        """Ctrl-C: SIGINT to the process and its workers; the exit code and the whole log."""
        os.killpg(self.process.pid, signal.SIGINT)
        rest, _ = self.process.communicate(timeout=30)
        return self.process.returncode, "".join(self.lines) + rest


async def test_serve_read_only_shows_forecasts_per_pool_and_serves_nothing_to_the_cluster(prometheus, tmp_path):
    dcgm_fresh = pd.Timestamp.now(tz="UTC") - prometheus.trace.end < pd.Timedelta(minutes=3)
    trial = TrialProcess(prometheus.url, tmp_path)
    try:
        url = trial.page_url()
        started = time.monotonic()
        async with aiohttp.ClientSession() as session:

            async def pools_forecast() -> dict[str, dict[str, float]] | None:
                async with session.get(f"{url}/api/v1/forecasts") as response:
                    document = await response.json()
                values = {
                    metric["metric"]: {series["labels"]["nodepool"]: series["value"] for series in metric["series"]}
                    for metric in document["metrics"]
                }
                return values if values.get("gpu_demand_forecast") else None

            # The bound allows for a loaded machine; docs/try-it.md quotes this print (`-rP`) on an idle one.
            served = await eventually(pools_forecast, message="forecasts per pool", timeout=120, interval=0.5)
            took = time.monotonic() - started
            since_start = time.monotonic() - trial.started
            print(f"first forecast for every pool: {since_start:.1f} s after start, {took:.1f} s after the page")
            async with session.get(f"{url}/") as response:
                page = await response.text()
            async with session.get(f"{url}/readyz") as response:
                ready = response.status
        listening = listening_ports(trial.process.pid)
    finally:
        code, log = trial.stop()
    assert set(served["gpu_demand_forecast"]) == {"", "a100", "h100"}, served
    assert set(served["gpu_headroom"]) == {"", "a100", "h100"}, served
    # dcgm-exporter's series end with the trace (kube-state-metrics' go on): forecast while they are fresh.
    assert "gpu_utilization_forecast" in served, served
    if dcgm_fresh:
        assert set(served["gpu_utilization_forecast"]) == {"a100", "h100"}, served  # nodes only: no Pending pool
    assert all(value >= 0 for value in served["gpu_demand_forecast"].values()), served
    assert served["gpu_demand_forecast"]["a100"] > 0, served
    assert ready == 200
    assert listening == {int(url.rsplit(":", 1)[1])}  # the page's port alone: no secure port, no gRPC
    assert NOT_SERVED in page and "a100" in page and "h100" in page
    assert f"Read-only trial on {prometheus.url}" in log and NOT_SERVED in log
    assert "external metrics API on" not in log and "KEDA external scaler" not in log
    assert "Traceback" not in log and "kubeconfig" not in log.lower() and "Kubernetes client" not in log, log
    assert code == 0, log  # Ctrl-C ends it quietly
    assert took < 120


@pytest.mark.parametrize("case", ["unreachable", "without_ksm", "short_history"])
@pytest.mark.parametrize("command", ["serve", "report"])
def test_a_prometheus_that_cannot_serve_the_trial_is_one_line_and_exit_1(request, tmp_path, case, command):
    if case == "unreachable":
        url, expected = f"http://127.0.0.1:{free_port()}", "cannot query Prometheus at"
    elif case == "without_ksm":
        url, expected = request.getfixturevalue(case).url, "has no kube-state-metrics series"
    else:
        url, expected = request.getfixturevalue(case).url, "too short to fit"
    arguments = ["--prometheus-url", url, "--state-dir", str(tmp_path / "state"), "--http-port", "0"]
    if command == "report":
        arguments = ["--prometheus-url", url, "--since", "7d", "--output", str(tmp_path / "report.html")]
    finished = subprocess.run(
        [sys.executable, "-m", "autoscaler", command, *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=_no_kubeconfig(tmp_path),
    )
    assert_runtime_failure(finished, expected)
    assert url in finished.stderr.splitlines()[-1]
    assert "Traceback" not in finished.stderr
    assert not (tmp_path / "report.html").exists()


def test_report_writes_a_self_contained_html_report_per_pool(prometheus, tmp_path):
    output = tmp_path / "report.html"
    command = [sys.executable, "-m", "autoscaler", "report", "--prometheus-url", prometheus.url]
    saved = tmp_path / "series"
    saved.mkdir()
    command += ["--since", "3d", "--output", str(output), "--save-series", str(saved)]
    finished = subprocess.run(
        command, capture_output=True, text=True, timeout=600, check=False, env=_no_kubeconfig(tmp_path)
    )
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.startswith(f"{output}: 3 node pools"), finished.stdout
    html = output.read_text(encoding="utf-8")
    assert html.count('<table class="figures') == 4  # the summary and one per pool
    for heading in ("short GPU-minutes", "capacity wait p50 s", "capacity wait p95 s", "coverage", "idle GPU-hours"):
        assert f"<th>{heading}</th>" in html
    # Each pool's auto:0.9 row: the coverage column (after the time demand waited) near what 0.9 asks.
    for row in re.findall(r'<tr class="service"><td>auto:0.9</td>(.*?)</tr>', html):
        cells = re.findall(r'<td class="num">([^<]*)</td>', row)
        coverage = float(cells[4].rstrip("%")) / 100
        assert 0.6 <= coverage <= 1.0, cells
    assert "short GPU-minutes" in html.split("Against reactive")[1]  # the lines beside reactive name it
    for pool in ("a100", "h100"):
        assert f"<h2>Node pool {pool}</h2>" in html
    for policy in ("reactive", "static_buffer:8", "reactive_max:60m", "holt_winters", "auto:0.9"):
        assert f"<td>{policy}</td>" in html
    assert "against reactive" in html and "capacity wait p95" in html
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(images) == 9  # three per pool: what auto:0.9 served, capacity per policy, the trade-off
    assert all(base64.b64decode(image).startswith(b"\x89PNG\r\n\x1a\n") for image in images)
    assert "http://" not in html.replace(prometheus.url, "")  # nothing fetched from elsewhere
    assert_simulate_reproduces_the_rows(html, "a100", tmp_path)


def assert_simulate_reproduces_the_rows(html: str, pool: str, tmp_path: Path) -> None:
    """The command the report prints for ``pool`` gives its rows (the heuristics': no fit to wait for)."""
    section = html.split(f"<h2>Node pool {pool}</h2>")[1].split("<h2>")[0]
    printed = re.search(r"<code>(gpu-autoscaler simulate [^<]+)</code>", section)
    assert printed is not None, section[:2000]
    arguments = shlex.split(unescape(printed.group(1)))[2:]
    assert Path(arguments[arguments.index("--input") + 1]).is_file()
    arguments[arguments.index("--policies") + 1] = "reactive,static_buffer:8"
    arguments[arguments.index("--format") + 1] = "json"
    simulated = subprocess.run(
        [sys.executable, "-m", "autoscaler", "simulate", *arguments],
        capture_output=True, text=True, timeout=300, check=False, env=_no_kubeconfig(tmp_path),
    )  # fmt: skip
    assert simulated.returncode == 0, simulated.stderr[-2000:]
    figures = json.loads(simulated.stdout)["policies"]
    for policy in ("reactive", "static_buffer:8"):
        row = re.search(rf"<tr><td>{re.escape(policy)}</td>(.*?)</tr>", section)
        assert row is not None
        shown = re.findall(r'<td class="num">([^<]*)</td>', row.group(1))
        expected = [what_if._cell(key, figures[policy].get(key)) for key, _ in what_if.COLUMNS if key != "coverage"]
        del shown[[key for key, _ in what_if.COLUMNS].index("coverage")]
        assert shown == expected, (policy, shown, expected)


def test_the_trial_refuses_flags_that_serve_the_cluster_and_bad_input(tmp_path):
    runner = CliRunner()
    config = tmp_path / "settings.yaml"
    config.write_text("{}\n")
    for flags, named in (
        (["--config", str(config)], "--config"),
        (["--grpc-port", "9443"], "--grpc-port"),
        (["--take-over"], "--take-over"),
    ):
        result = runner.invoke(main, ["serve", "--prometheus-url", "http://127.0.0.1:9", *flags])
        assert_usage_error(result, f"{named}: --prometheus-url runs the read-only trial")
    assert_usage_error(runner.invoke(main, ["serve", "--prometheus-url", "prometheus:9090"]), "http:// or https://")
    bind = ["serve", "--prometheus-url", "http://127.0.0.1:9", "--bind-address", "0.0.0.0"]  # noqa: S104
    assert_usage_error(runner.invoke(main, bind), "loopback address only")
    report = ["report", "--prometheus-url", "http://127.0.0.1:9", "--output", str(tmp_path / "missing" / "r.html")]
    assert_usage_error(runner.invoke(main, report), "does not exist")
    no_service = [*report[:-1], str(tmp_path / "r.html"), "--policies", "reactive,static_buffer:4"]
    assert_usage_error(runner.invoke(main, no_service), "auto:0.9")
    written = [*report[:-1], str(tmp_path / "r.html")]
    assert_usage_error(runner.invoke(main, [*written, "--since", "soon"]), "--since")
    assert_usage_error(
        runner.invoke(main, [*written, "--since", "1d"]),
        "--since: 24.0 hours is shorter than the 2.0 days the report needs",
    )
