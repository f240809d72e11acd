"""A month of one GPU node pool as kube-state-metrics and dcgm-exporter expose it, backfilled into TSDB
blocks for a real Prometheus (issue 37's large Prometheus; docs/benchmarks/query-cost.md).

    PYTHONPATH=. .venv/bin/python -m benchmarks.cluster_history --out DIR [--days 32] [--seed 37]
        [--nodes 40] [--pods 220] [--end-after 4h]

Writes ``DIR/blocks`` (point ``prometheus --storage.tsdb.path`` at it), one OpenMetrics file per UTC day
turned into a block by ``promtool tsdb create-blocks-from openmetrics`` and deleted, and prints the time
and disk it took and the live series. Every series is at 1-minute samples (the recording rule's at its
30 s interval), up to ``--end-after`` past now so that queries relative to now see it while they run.

What is written, for ``--nodes`` nodes of 8 GPUs in node pool ``gpu-a100``:

- kube-state-metrics: ``up``, each node's ``kube_node_info``, ``kube_node_labels`` (with
  ``label_karpenter_sh_nodepool``) and ``kube_node_status_allocatable`` (GPUs, CPU, memory); each pod's
  ``kube_pod_info``, ``kube_pod_container_resource_requests`` (``nvidia_com_gpu``, CPU, memory) and
  ``kube_pod_status_phase`` (all five phases, as kube-state-metrics exports them).
- Pods churn: they arrive as a Poisson process whose rate follows a daily cycle (weekends lower), so
  that about ``--pods`` live on average; 1, 2 or 4 GPUs each; a third wait unscheduled (no ``node``
  label, Pending) for 2-10 minutes, every pod is Pending on its node for 1-4 minutes, runs for a
  log-normal time (median 3 h), then stays Succeeded (5 % Failed) for 5-30 minutes until deleted.
- The recording rule's series (``namespace_pod_node:gpu_autoscaler_gpus_requested:sum``,
  manifests/monitoring/prometheusrule.yaml) as if the rule had run all along.
- dcgm-exporter, per GPU: utilisation, engine activity, framebuffer used, power and temperature; the
  busy GPUs' share follows the GPUs running pods request.

A scrape ends a vanished series with a staleness marker, which OpenMetrics text cannot carry: a series
that ends because a pod was bound (or, for the rule, stopped counting) gets a last sample of 0 instead,
so no query counts a pod twice (or a finished pod) during Prometheus's 5-minute lookback.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import pandas as pd

from adapters.prometheus.presets import RECORDED_GPUS_REQUESTED
from forecast.durations import parse_positive_duration

POOL = "gpu-a100"
GPUS_PER_NODE = 8
NAMESPACES = tuple(f"team-{name}" for name in ("vision", "speech", "llm", "rec", "search", "ads", "robotics", "infra"))
GPU_CHOICES, GPU_WEIGHTS = np.array([1, 2, 4]), np.array([0.75, 0.18, 0.07])
MEDIAN_LIFE_MIN, LIFE_SIGMA = 180.0, 1.0
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
DCGM = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED")
DCGM_MORE = ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP")
BURN_IN_MIN = 3 * 1440  # pods arrive from 3 days before the first minute: the month starts in steady state


@dataclass(frozen=True)
class Pods:
    """Every pod of the month, minutes counted from the first minute written (burn-in ones negative)."""

    arrive: np.ndarray  # created (Pending, unscheduled while bind > arrive)
    bind: np.ndarray  # bound to its node (Pending there)
    run: np.ndarray  # Running
    end: np.ndarray  # Succeeded or Failed
    gone: np.ndarray  # deleted: its series end
    gpus: np.ndarray
    node: np.ndarray
    namespace: np.ndarray
    failed: np.ndarray


def make_pods(rng: np.random.Generator, minutes: int, start: pd.Timestamp, mean_pods: float, nodes: int) -> Pods:
    """Poisson arrivals at a rate whose live count follows a daily cycle (peak 14:00 UTC), weekends 0.8."""
    moments = np.arange(-BURN_IN_MIN, minutes)
    clock = start + pd.to_timedelta(moments, unit="min")
    hour = clock.hour.to_numpy() + clock.minute.to_numpy() / 60
    level = mean_pods * (1 + 0.3 * np.sin(2 * np.pi * (hour - 8) / 24)) * np.where(clock.day_of_week >= 5, 0.8, 1.0)
    mean_life = MEDIAN_LIFE_MIN * np.exp(LIFE_SIGMA**2 / 2)
    arrivals = rng.poisson(level / mean_life)
    arrive = np.repeat(moments, arrivals)
    count = len(arrive)
    waits = np.where(rng.random(count) < 1 / 3, rng.integers(2, 11, count), 0)
    bind = arrive + waits
    run = bind + rng.integers(1, 5, count)
    end = run + np.maximum(1, rng.lognormal(np.log(MEDIAN_LIFE_MIN), LIFE_SIGMA, count).astype(np.int64))
    gone = end + rng.integers(5, 31, count)
    return Pods(
        arrive=arrive, bind=bind, run=run, end=end, gone=gone,
        gpus=rng.choice(GPU_CHOICES, count, p=GPU_WEIGHTS), node=rng.integers(0, nodes, count),
        namespace=rng.integers(0, len(NAMESPACES), count), failed=rng.random(count) < 0.05,
    )  # fmt: skip


class DayWriter:
    """One day's OpenMetrics text: piecewise-constant series joined in C (``str.join``), not line by line."""

    def __init__(self, out: IO[str], first_s: int, minutes: int) -> None:
        self.out = out
        self.minute_ts = [f" {first_s + 60 * i}\n" for i in range(minutes)]
        self.half_ts = [f" {first_s + 30 * i}\n" for i in range(2 * minutes)]
        self.families: set[str] = set()

    def family(self, name: str) -> None:
        if name in self.families:
            raise ValueError(f"family {name} written twice: OpenMetrics wants each family in one block")
        self.families.add(name)
        self.out.write(f"# TYPE {name} gauge\n")

    def constant(self, prefix: str, value: str, a: int, b: int, half: bool = False) -> None:
        """``value`` at every sample of minutes ``[a, b)`` of the day (every 30 s with ``half``)."""
        stamps = self.half_ts[2 * a : 2 * b] if half else self.minute_ts[a:b]
        if stamps:
            head = f"{prefix} {value}"
            self.out.write(head + head.join(stamps))

    def varying(self, prefix: str, values: list[str]) -> None:
        """One value per minute, each already formatted with a leading space."""
        self.out.write(prefix + prefix.join(map(str.__add__, values, self.minute_ts[: len(values)])))


def labels(metric: str, **pairs: str) -> str:
    return metric + "{" + ",".join(f'{key}="{value}"' for key, value in pairs.items()) + "}"


def node_name(index: int) -> str:
    return f"ip-10-0-{index // 200}-{index % 200 + 10}.ec2.internal"


def write_nodes(writer: DayWriter, nodes: int, minutes: int) -> None:
    writer.family("up")
    writer.constant(labels("up", job="kube-state-metrics", instance="10.0.0.2:8080"), "1", 0, minutes)
    for node in range(nodes):
        writer.constant(labels("up", job="dcgm-exporter", instance=f"10.0.1.{node}:9400"), "1", 0, minutes)
    allocatable = (("nvidia_com_gpu", "integer", str(GPUS_PER_NODE)), ("cpu", "core", "96"),
                   ("memory", "byte", "1.16e+12"))  # fmt: skip
    for family, series in (
        ("kube_node_info", lambda name: [({"kubelet_version": "v1.31.4", "internal_ip": name[3:12]}, "1")]),
        ("kube_node_labels", lambda name: [({"label_karpenter_sh_nodepool": POOL}, "1")]),
        ("kube_node_status_allocatable", lambda name: [({"resource": r, "unit": u}, v) for r, u, v in allocatable]),
    ):
        writer.family(family)
        for node in range(nodes):
            for extra, value in series(node_name(node)):
                writer.constant(labels(family, node=node_name(node), **extra), value, 0, minutes)


def write_pods(writer: DayWriter, pods: Pods, picked: np.ndarray, day_first: int, minutes: int) -> None:
    """The pods alive during the day, minute ``day_first`` of the month its minute 0."""

    def clip(a: int, b: int) -> tuple[int, int]:
        first, last = max(a - day_first, 0), min(b - day_first, minutes)
        return (first, last) if first < last else (0, 0)  # never negative: that would slice from the end

    def pod_labels(i: int) -> dict[str, str]:
        return {"namespace": NAMESPACES[pods.namespace[i]], "pod": f"job-{i:06d}-0"}

    def bound(i: int, write: Callable[[str, int, int], None], metric: str, **extra: str) -> None:
        """The series before and after binding: unscheduled ones end with a 0 (see the module's doc)."""
        if pods.bind[i] > pods.arrive[i]:
            write(labels(metric, **pod_labels(i), **extra), *clip(pods.arrive[i], pods.bind[i]))
            writer.constant(labels(metric, **pod_labels(i), **extra), "0", *clip(pods.bind[i], pods.bind[i] + 1))
        write(labels(metric, **pod_labels(i), node=node_name(pods.node[i]), **extra), *clip(pods.bind[i], pods.gone[i]))

    writer.family("kube_pod_info")
    for i in picked:
        bound(i, lambda prefix, a, b: writer.constant(prefix, "1", a, b), "kube_pod_info", created_by_kind="Job")
    writer.family("kube_pod_container_resource_requests")
    for resource, unit, per_gpu in (("nvidia_com_gpu", "integer", 1), ("cpu", "core", 12), ("memory", "byte", 1.2e11)):
        for i in picked:
            value = f"{pods.gpus[i] * per_gpu:g}"
            bound(i, lambda prefix, a, b: writer.constant(prefix, value, a, b), "kube_pod_container_resource_requests",  # noqa: B023
                  container="main", resource=resource, unit=unit)  # fmt: skip
    writer.family("kube_pod_status_phase")
    for i in picked:
        finished = "Failed" if pods.failed[i] else "Succeeded"
        spans = {"Pending": (pods.arrive[i], pods.run[i]), "Running": (pods.run[i], pods.end[i]),
                 finished: (pods.end[i], pods.gone[i])}  # fmt: skip
        for phase in PHASES:
            prefix = labels("kube_pod_status_phase", **pod_labels(i), phase=phase)
            on, off = spans.get(phase, (pods.gone[i], pods.gone[i]))
            for a, b, value in ((pods.arrive[i], on, "0"), (on, off, "1"), (off, pods.gone[i], "0")):
                writer.constant(prefix, value, *clip(a, b))
    writer.family(RECORDED_GPUS_REQUESTED)
    for i in picked:
        who, gpus = pod_labels(i), f"{pods.gpus[i]}"
        if pods.bind[i] > pods.arrive[i]:
            unscheduled = labels(RECORDED_GPUS_REQUESTED, **who)
            writer.constant(unscheduled, gpus, *clip(pods.arrive[i], pods.bind[i]), half=True)
            writer.constant(unscheduled, "0", *clip(pods.bind[i], pods.bind[i] + 1), half=True)
        counted = labels(RECORDED_GPUS_REQUESTED, **who, node=node_name(pods.node[i]))
        writer.constant(counted, gpus, *clip(pods.bind[i], pods.end[i]), half=True)
        writer.constant(counted, "0", *clip(pods.end[i], pods.end[i] + 1), half=True)


def running_gpus(pods: Pods, minutes: int) -> np.ndarray:
    """GPUs requested by Running pods at each minute of the month."""
    change = np.zeros(minutes + 1)
    np.add.at(change, np.clip(pods.run, 0, minutes), pods.gpus)
    np.add.at(change, np.clip(pods.end, 0, minutes), -pods.gpus)
    return np.cumsum(change)[:minutes]


_INTS = np.array([f" {i}" for i in range(1001)], dtype=object)
_ENGINE = np.array([f" {i * 0.0092:.3f}" for i in range(101)], dtype=object)
_FB = np.array([f" {i * 256}" for i in range(321)], dtype=object)


def write_dcgm(writer: DayWriter, rng: np.random.Generator, busy_share: np.ndarray, nodes: int) -> None:
    """Each GPU busy while its fixed rank is under the pool's busy share; busy ones at about 78 %."""
    gpus, minutes = nodes * GPUS_PER_NODE, len(busy_share)
    rank = np.random.default_rng(0).permutation(gpus)[:, None] / gpus
    busy = rank < busy_share[None, :]
    util = np.where(busy, np.clip(rng.normal(78, 12, (gpus, minutes)), 5, 100), 0).astype(np.int64)
    memory = np.where(busy, rng.integers(100, 317, (gpus, 1)), 2)
    power = np.clip(60 + 3.3 * util + rng.normal(0, 5, (gpus, minutes)), 40, 700).astype(np.int64)
    temp = (33 + 0.45 * util).astype(np.int64)
    tables = (_INTS[util], _ENGINE[util], _FB[memory], _INTS[power], _INTS[temp])
    for family, table in zip((*DCGM, *DCGM_MORE), tables, strict=True):
        writer.family(family)
        for gpu in range(gpus):
            node, index = divmod(gpu, GPUS_PER_NODE)
            device = {"gpu": str(index), "UUID": f"GPU-{node:04x}{index:02x}-a100", "device": f"nvidia{index}"}
            exporter = {"modelName": "NVIDIA A100-SXM4-80GB", "Hostname": node_name(node),
                        "DCGM_FI_DRIVER_VERSION": "550.127.05", "instance": f"10.0.1.{node}:9400"}  # fmt: skip
            writer.varying(labels(family, **device, **exporter, job="dcgm-exporter"), table[gpu].tolist())


def live_series(pods: Pods, minutes: int, nodes: int) -> np.ndarray:
    """Series with a sample in the minute, at each minute: nodes', GPUs', and each pod's (info, three
    requests, five phases, the rule's while it counts)."""
    change = np.zeros(minutes + 1)
    for first, last, count in ((pods.arrive, pods.gone, 9), (pods.arrive, pods.end, 1)):
        np.add.at(change, np.clip(first, 0, minutes), count)
        np.add.at(change, np.clip(last, 0, minutes), -count)
    static = 1 + nodes + nodes * 5 + nodes * GPUS_PER_NODE * (len(DCGM) + len(DCGM_MORE))
    return static + np.cumsum(change)[:minutes]


@dataclass(frozen=True)
class Shape:
    days: int
    seed: int
    nodes: int
    pods: float
    end: pd.Timestamp


def generate(shape: Shape, out: Path, promtool: str) -> dict[str, float]:
    """Write the blocks, a day at a time (the next day's text is written while promtool reads one)."""
    minutes = shape.days * 1440
    start = shape.end - pd.Timedelta(minutes=minutes)
    pods = make_pods(np.random.default_rng(shape.seed), minutes, start, shape.pods, shape.nodes)
    busy_share = running_gpus(pods, minutes) / (shape.nodes * GPUS_PER_NODE)
    text_dir, blocks = out / "openmetrics", out / "blocks"
    text_dir.mkdir(parents=True, exist_ok=True)
    blocks.mkdir(exist_ok=True)
    began, text_bytes, pending = time.perf_counter(), 0, None
    day_starts = pd.date_range(start.floor("D"), start + pd.Timedelta(minutes=minutes), freq="D")
    for index, day in enumerate(day_starts):
        first = max(0, int((day - start) / pd.Timedelta(minutes=1)))
        last = min(minutes, int((day + pd.Timedelta(days=1) - start) / pd.Timedelta(minutes=1)))
        alive = np.flatnonzero((pods.arrive < last) & (pods.gone > first))
        path = text_dir / f"day-{index:02d}.om"
        with path.open("w", encoding="utf-8", buffering=16 * 2**20) as text:
            writer = DayWriter(text, int((start + pd.Timedelta(minutes=first)).timestamp()), last - first)
            write_nodes(writer, shape.nodes, last - first)
            write_pods(writer, pods, alive, first, last - first)
            write_dcgm(writer, np.random.default_rng([shape.seed, index]), busy_share[first:last], shape.nodes)
            text.write("# EOF\n")
        text_bytes = max(text_bytes, path.stat().st_size)
        if pending is not None:
            _finish(*pending)
        pending = (_promtool(promtool, path, blocks), path)
    if pending is not None:
        _finish(*pending)
    shutil.rmtree(text_dir)
    live = live_series(pods, minutes, shape.nodes)
    return {
        "seconds": time.perf_counter() - began,
        "largest day of text, MB": text_bytes / 1e6,
        "blocks, MB": sum(f.stat().st_size for f in blocks.rglob("*") if f.is_file()) / 1e6,
        "pods": float(len(pods.arrive)),
        "live series min": float(live.min()),
        "live series max": float(live.max()),
        "samples, millions": float(live.sum()) / 1e6,
    }


def _promtool(promtool: str, path: Path, blocks: Path) -> subprocess.Popen[bytes]:
    command = [promtool, "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h", "-q",
               str(path), str(blocks)]  # fmt: skip
    return subprocess.Popen(command, stderr=subprocess.PIPE)


def _finish(process: subprocess.Popen[bytes], path: Path) -> None:
    _, stderr = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"promtool failed on {path}: {stderr.decode(errors='replace')[-2000:]}")
    path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--days", type=int, default=32)
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--nodes", type=int, default=40)
    parser.add_argument("--pods", type=float, default=220.0, help="pods alive on average")
    parser.add_argument("--end-after", default="4h", help="how far past now the history goes on")
    args = parser.parse_args()
    promtool = shutil.which("promtool")
    if promtool is None:
        raise SystemExit("promtool is not installed (Debian: apt-get install prometheus)")
    end = pd.Timestamp.now(tz="UTC").floor("min") + pd.Timedelta(parse_positive_duration(args.end_after))
    shape = Shape(days=args.days, seed=args.seed, nodes=args.nodes, pods=args.pods, end=end)
    print(f"{shape}", flush=True)
    for name, value in generate(shape, args.out, promtool).items():
        print(f"{name}: {value:,.1f}", flush=True)


if __name__ == "__main__":
    main()
