"""Sharded ``gpu-autoscaler serve`` replicas as real processes, against the fake API (``tests.fakekube``,
in the caller's process) and a real Prometheus backfilled with real per-VC demand (issue #16).

Shared by ``tests/autoscaler/test_failover_processes.py`` and ``benchmarks/bench_failover.py``: each
replica has its own state dir, ports and ``POD_NAME``; auth is off and everything is on loopback. A
replica runs in its own session (process group), so that a SIGKILL takes its forecast workers too.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pandas as pd

from tests.data_helpers import helios_paths
from tests.fakekube import FakeKube, RecordedRequest
from tests.prometheus_fixture import BackfillSeries, die_with_parent, free_port, write_blocks

NAMESPACE = "gpu-autoscaler"  # publication.namespace: the Leases and GPUForecasts
LEASE_PREFIX = "gpu-autoscaler"  # publication.sharding.lease_prefix (its default)
FAMILY = "bench_gpus"  # the backfilled series, one per label pool=pool-<i>
EXTERNAL_METRICS = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default"
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# "gpu-autoscaler/<version> (<Lease identity>)": autoscaler/app/serving.py user_agent.
_IDENTITY_IN_AGENT = re.compile(r"^gpu-autoscaler/\S+ \((?P<identity>[^()]+)\)$")


def real_series(count: int, days: int) -> list[pd.Series]:
    """``count`` series of Helios Earth per-VC running GPUs at 5-minute means, ``days`` long, ending now
    (floored to 5 minutes); copies of one VC are different slices of it."""
    frames = [
        pd.read_csv(path, usecols=["time", "running_gpu_num"], parse_dates=["time"]).set_index("time")[
            "running_gpu_num"
        ]
        for path in helios_paths()
    ]
    per_vc = [frame.resample("5min").mean().astype(float) for frame in frames]
    points = days * 288
    series = []
    for index in range(count):
        source = per_vc[index % len(per_vc)]
        offset = (index // len(per_vc)) * 37 % max(1, len(source) - points)  # a different slice per copy
        values = source.to_numpy()[offset : offset + points]
        series.append(values)
    end = pd.Timestamp.now(tz="UTC").floor("5min")
    index = pd.date_range(end=end, periods=points, freq="5min")
    return [pd.Series(values, index=index) for values in series]


def backfill(series: list[pd.Series], work: Path, promtool: str) -> Path:
    """TSDB blocks holding ``bench_gpus{pool="pool-<i>"}`` (each value plus 1, so that no real value is 0)."""
    stamps = pd.DatetimeIndex(series[0].index).as_unit("s").asi8
    out = [
        BackfillSeries(FAMILY, {"pool": f"pool-{i}"}, stamps, [f"{v + 1:g}" for v in np.nan_to_num(s.to_numpy())])
        for i, s in enumerate(series)
    ]
    # PrometheusServer's readiness probe asks for count(kube_node_labels).
    out.append(BackfillSeries("kube_node_labels", {"node": "bench"}, stamps, ["1"] * len(stamps)))
    return write_blocks(out, promtool, work / "blocks")


@dataclass
class Replica:
    """One ``gpu-autoscaler serve`` process (started again by ``start`` after a kill: a new member)."""

    index: int
    workdir: Path
    config: Path
    secure_port: int = field(default_factory=free_port)
    http_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    peak_rss_mb: float = 0.0
    # The same peak split: the service process's own, and its forecast workers' (summed).
    service_peak_rss_mb: float = 0.0
    workers_peak_rss_mb: float = 0.0

    @property
    def name(self) -> str:
        return f"replica-{self.index}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "serve.log"

    def start(self) -> None:
        command = [sys.executable, "-m", "autoscaler", "serve", "--config", str(self.config), "--skip-preflight"]
        command += ["--secure-port", str(self.secure_port), "--http-port", str(self.http_port)]
        command += ["--bind-address", "127.0.0.1", "--state-dir", str(self.workdir / "state")]
        env = os.environ | {"POD_NAME": self.name}
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            # Its own process group (a kill takes the forecast workers too); and it dies with the caller,
            # so a test run killed outright leaves no replica behind.
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    def kill(self) -> None:
        """SIGKILL the whole process group (service and forecast workers), as a node failure would."""
        if self.process is not None and self.process.poll() is None:
            self.sample_rss()
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def user_agent(self, fake: FakeKube) -> str | None:
        """The User-Agent of this replica's newest request to the fake API (None: none seen)."""
        for request in reversed(fake.requests):
            agent = request.headers.get("User-Agent", "")
            if f"({self.name}_" in agent:
                return agent
        return None

    def sample_rss(self) -> None:
        """Peak RSS of the process tree (service plus forecast workers), in MB, kept across restarts."""
        if not self.alive():
            return
        assert self.process is not None
        service, workers = peak_rss_mb(self.process.pid), sum(map(peak_rss_mb, children(self.process.pid)))
        self.service_peak_rss_mb = max(self.service_peak_rss_mb, service)
        self.workers_peak_rss_mb = max(self.workers_peak_rss_mb, workers)
        self.peak_rss_mb = max(self.peak_rss_mb, service + workers)


def peak_rss_mb(pid: int) -> float:
    """A process's peak resident size (VmHWM) in MiB; 0 when it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
    return int(found.group(1)) / 1024 if found else 0.0


def children(pid: int) -> list[int]:
    found = []
    for entry in Path(f"/proc/{pid}/task").iterdir():
        text = (entry / "children").read_text().split()
        found += [int(child) for child in text]
    return found + [grandchild for child in found for grandchild in children_safe(child)]


def children_safe(pid: int) -> list[int]:
    try:
        return children(pid)
    except OSError:
        return []


def identity_of(user_agent: str) -> str:
    """The Lease identity a service's User-Agent names."""
    found = _IDENTITY_IN_AGENT.match(user_agent)
    if found is None:
        raise ValueError(f"not a gpu-autoscaler User-Agent: {user_agent!r}")
    return found.group("identity")


async def served_items(session: aiohttp.ClientSession, replica: Replica, metric: str) -> list[dict[str, Any]] | None:
    """The items this replica's external metrics API serves for ``metric`` ([] on a non-200 answer,
    None when it does not answer at all)."""
    try:
        url = f"https://127.0.0.1:{replica.secure_port}{EXTERNAL_METRICS}/{metric}"
        async with session.get(url, ssl=False, timeout=aiohttp.ClientTimeout(total=2)) as response:
            if response.status != 200:
                return []
            items: list[dict[str, Any]] = (await response.json())["items"]
            return items
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None


async def served(session: aiohttp.ClientSession, replica: Replica, metric: str) -> dict[str, float] | None:
    """pool -> value served by this replica for ``metric`` (None: no answer)."""
    items = await served_items(session, replica, metric)
    if items is None:
        return None
    return {item["metricLabels"]["pool"]: quantity(item["value"]) for item in items}


def quantity(text: str) -> float:
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


async def self_metric(session: aiohttp.ClientSession, replica: Replica, name: str) -> float | None:
    """One unlabelled sample of the replica's /metrics (None: absent, or no answer)."""
    try:
        async with session.get(f"http://127.0.0.1:{replica.http_port}/metrics") as response:
            text = await response.text()
    except (aiohttp.ClientError, OSError):
        return None
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else None


def lease_holders(fake: FakeKube, shards: int) -> dict[int, str]:
    """shard -> the identity holding its Lease ('' if none)."""
    out = {}
    for shard in range(shards):
        lease = fake.get("leases", f"{LEASE_PREFIX}-shard-{shard}-of-{shards}", NAMESPACE) or {}
        out[shard] = (lease.get("spec") or {}).get("holderIdentity") or ""
    return out


def holders(fake: FakeKube, shards: int) -> dict[int, str]:
    """shard -> the replica name (POD_NAME) holding its Lease ('' if none)."""
    return {shard: identity.rsplit("_", 1)[0] for shard, identity in lease_holders(fake, shards).items()}


def balanced(held: list[str], names: list[str], shards: int) -> bool:
    """Every shard held by one of ``names``, each holding its share: at most ceil(shards / N) each, so
    the last may hold fewer (16 on 3: 6, 6, 4)."""
    least = shards - (len(names) - 1) * -(-shards // len(names))
    return all(held.count(name) >= least for name in names) and sum(held.count(name) for name in names) == shards


def object_version(fake: FakeKube, shard: int, shards: int) -> str:
    found = fake.get("gpuforecasts", f"shard-{shard}-of-{shards}", NAMESPACE) or {}
    return str(found.get("metadata", {}).get("resourceVersion", ""))


def writes_of(
    fake: FakeKube, user_agent: str, *, since: float = 0.0, plural: str | None = None
) -> list[RecordedRequest]:
    """Writes (of ``plural``, None: of anything) one client tried from loop time ``since``: every
    request that reached the fake, whether it was answered, refused or dropped."""
    return [
        request
        for request in fake.requests
        if plural in (None, request.plural)
        and request.method in WRITES
        and request.at >= since
        and request.headers.get("User-Agent") == user_agent
    ]
