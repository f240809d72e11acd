"""Cluster scenarios as kube-state-metrics 2.x and dcgm-exporter export them, in a real Prometheus.

A :class:`Scenario` is nodes (a pool, GPUs, a lifetime), pods (a node or none, a GPU resource, when
they run and when they are deleted) and exporter outages. :func:`scenario_series` writes what
Prometheus holds after scraping both exporters every ``scrape_interval``, and :func:`start_prometheus`
backfills it (``promtool tsdb create-blocks-from openmetrics``, as ``prometheus_fixture`` does):

- kube-state-metrics (target ``job="kube-state-metrics"``): ``kube_node_info``, ``kube_node_labels`` (the
  allowlisted ``karpenter.sh/nodepool`` label as ``label_karpenter_sh_nodepool``, or the node's own
  ``pool_label``), ``kube_node_status_allocatable`` (the node's ``resource``, ``replicas`` per GPU);
  per pod ``kube_pod_info``, ``kube_pod_status_phase`` (a series per phase, 1 for the current one)
  and ``kube_pod_container_resource_requests`` (``resource`` sanitised as kube-state-metrics does:
  ``nvidia.com/mig-1g.10gb`` is ``nvidia_com_mig_1g_10gb``; no ``node`` label while the pod is
  unscheduled), ``kube_pod_created`` (its ``created`` time, else its start) and, for
  a pod on a node, ``kube_pod_status_scheduled_time`` (its start). A pod is exported from its start
  until it is deleted, Succeeded once it has ended. ``up{job="kube-state-metrics"}`` is 1, and 0 while
  the exporter is down (its target still discovered, the scrape failing): then none of its series are
  written, while
  Prometheus keeps answering.
- dcgm-exporter (target ``job="dcgm-exporter"``, one per node): ``DCGM_FI_DEV_GPU_UTIL`` per GPU with
  ``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname`` and ``DCGM_FI_DRIVER_VERSION``; 95 % on the
  GPUs Running pods hold (lowest indices first), 0 on the others.
"""

from __future__ import annotations

import hashlib
import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from tests.prometheus_fixture import BackfillSeries, PrometheusServer, binaries_or_skip, write_blocks

KSM_TARGET = {"job": "kube-state-metrics", "instance": "10.0.0.2:8080"}
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
BUSY_UTILIZATION = 95.0
Outage = tuple[pd.Timestamp, pd.Timestamp]
# How the helpers of ``scenario_series`` add a series: family, labels, at which scrapes, values.
Add = Callable[[str, Mapping[str, str], np.ndarray, "np.ndarray | float"], None]


@dataclass(frozen=True)
class Node:
    name: str
    pool: str
    gpus: int = 8
    model: str = "NVIDIA A100-SXM4-80GB"
    start: pd.Timestamp | None = None  # None: there from the scenario's start
    end: pd.Timestamp | None = None  # None: there until its end
    # The extended resource its GPUs are allocatable as, and how many units each GPU is (time-slicing).
    resource: str = "nvidia.com/gpu"
    replicas: int = 1
    # The kube_node_labels label that names its pool (the allowlisted node label, sanitised).
    pool_label: str = "label_karpenter_sh_nodepool"


@dataclass(frozen=True)
class Pod:
    """A pod that runs during ``[start, end)`` on ``node`` (Pending throughout if None)."""

    namespace: str
    name: str
    node: str | None
    start: pd.Timestamp
    end: pd.Timestamp
    gpus: float = 1.0
    resource: str = "nvidia.com/gpu"
    deleted: pd.Timestamp | None = None  # None: deleted when it ends (a Job with no TTL to keep it)
    # When it was created (the value of kube_pod_created; it is exported from ``start`` all the same).
    created: pd.Timestamp | None = None


@dataclass(frozen=True)
class Scenario:
    start: pd.Timestamp
    end: pd.Timestamp
    nodes: Sequence[Node]
    pods: Sequence[Pod]
    ksm_down: Sequence[Outage] = ()  # [from, to) when kube-state-metrics is not scraped successfully
    dcgm_down: Sequence[Outage] = ()
    scrape_interval: pd.Timedelta = field(default_factory=lambda: pd.Timedelta(minutes=1))

    @property
    def scrapes(self) -> pd.DatetimeIndex:
        return pd.date_range(self.start, self.end, freq=self.scrape_interval)

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)


def ksm_resource(resource: str) -> str:
    """A resource name as kube-state-metrics labels it (its SanitizeLabelName)."""
    return "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in resource)


def scenario_series(scenario: Scenario) -> list[BackfillSeries]:
    """Every series both exporters leave in Prometheus over the scenario."""
    times = scenario.scrapes
    seconds = times.as_unit("s").asi8
    ksm_up = ~_within(times, scenario.ksm_down)
    out: list[BackfillSeries] = []

    def add(family: str, labels: Mapping[str, str], when: np.ndarray, values: np.ndarray | float) -> None:
        values = np.broadcast_to(np.asarray(values, dtype=np.float64), when.shape)
        if when.any():
            out.append(BackfillSeries(family, dict(labels), seconds[when], [f"{v:.17g}" for v in values[when]]))

    add("up", KSM_TARGET, np.ones(len(times), dtype=bool), ksm_up.astype(np.float64))
    for node in scenario.nodes:
        exists = _between(times, node.start, node.end)
        _add_node(add, node, exists & ksm_up)
        _add_gpus(add, scenario, node, exists & ~_within(times, scenario.dcgm_down))
    for pod in scenario.pods:
        _add_pod(add, times, pod, ksm_up)
    return out


def start_prometheus(scenario: Scenario, work_dir: Path) -> PrometheusServer:
    """A Prometheus holding the scenario, started and ready (the caller stops it)."""
    prometheus, promtool = binaries_or_skip()
    blocks = write_blocks(scenario_series(scenario), promtool, work_dir / "blocks")
    data_dir = work_dir / "server" / "data"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(blocks, data_dir)
    first_node = min((node.start or scenario.start) for node in scenario.nodes)
    server = PrometheusServer(binary=prometheus, data_dir=data_dir, trace=None, probe_at=first_node)
    server.start()
    return server


def _add_node(add: Add, node: Node, exported: np.ndarray) -> None:
    add("kube_node_info", {**KSM_TARGET, **_node_info(node)}, exported, 1.0)
    add("kube_node_labels", {**KSM_TARGET, "node": node.name, node.pool_label: node.pool}, exported, 1)
    allocatable = {**KSM_TARGET, "node": node.name, "resource": ksm_resource(node.resource), "unit": "integer"}
    add("kube_node_status_allocatable", allocatable, exported, float(node.gpus * node.replicas))


def _node_info(node: Node) -> dict[str, str]:
    return {
        "node": node.name,
        "kernel_version": "6.1.0-28-cloud-amd64",
        "os_image": "Bottlerocket OS 1.26.0 (aws-k8s-1.31-nvidia)",
        "container_runtime_version": "containerd://1.7.22+bottlerocket",
        "kubelet_version": "v1.31.4-eks-0f56d01",
        "kubeproxy_version": "v1.31.4-eks-0f56d01",
        "provider_id": f"aws:///us-east-1a/i-{_hex(node.name, digits=17)}",
        "pod_cidr": "",
        "system_uuid": f"ec2{_hex(node.name, 'uuid', digits=29)}",
        "internal_ip": f"10.0.{int(_hex(node.name, digits=2), 16)}.{int(_hex(node.pool, digits=2), 16)}",
    }


def _add_pod(add: Add, times: pd.DatetimeIndex, pod: Pod, ksm_up: np.ndarray) -> None:
    exported = _between(times, pod.start, pod.deleted or pod.end) & ksm_up
    running = _between(times, pod.start, pod.end)
    uid = _hex(pod.namespace, pod.name, digits=32)
    identity = {**KSM_TARGET, "namespace": pod.namespace, "pod": pod.name, "uid": uid}
    node = {"node": pod.node} if pod.node else {}  # kube-state-metrics exports node="" while unscheduled
    info = {"host_ip": "", "pod_ip": "", "created_by_kind": "Job", "created_by_name": pod.name.rsplit("-", 1)[0]}
    add("kube_pod_info", identity | node | info | {"priority_class": "", "host_network": "false"}, exported, 1.0)
    add("kube_pod_created", identity, exported, (pod.created or pod.start).timestamp())
    if pod.node:
        add("kube_pod_status_scheduled_time", identity, exported, pod.start.timestamp())
    current = np.where(running, "Running" if pod.node else "Pending", "Succeeded" if pod.node else "Pending")
    for phase in PHASES:
        add("kube_pod_status_phase", identity | {"phase": phase}, exported, (current == phase).astype(np.float64))
    container = identity | {"container": "main"} | node
    resource = {"resource": ksm_resource(pod.resource), "unit": "integer"}
    add("kube_pod_container_resource_requests", container | resource, exported, pod.gpus)
    add("kube_pod_container_resource_requests", container | {"resource": "cpu", "unit": "core"}, exported, 8.0)


def _add_gpus(add: Add, scenario: Scenario, node: Node, exported: np.ndarray) -> None:
    times = scenario.scrapes
    held = np.zeros(len(times))
    for pod in scenario.pods:
        if pod.node == node.name:
            held += _between(times, pod.start, pod.end) * math.ceil(pod.gpus if pod.resource.endswith("gpu") else 1)
    target = {"job": "dcgm-exporter", "instance": f"{node.name}:9400", "Hostname": node.name}
    for gpu in range(node.gpus):
        labels = target | {"gpu": str(gpu), "UUID": f"GPU-{_hex(node.name, gpu, digits=32)}"}
        labels |= {"device": f"nvidia{gpu}", "modelName": node.model, "DCGM_FI_DRIVER_VERSION": "550.127.08"}
        add("DCGM_FI_DEV_GPU_UTIL", labels, exported, np.where(held > gpu, BUSY_UTILIZATION, 0.0))


def _between(times: pd.DatetimeIndex, start: pd.Timestamp | None, end: pd.Timestamp | None) -> np.ndarray:
    after = times >= start if start is not None else np.ones(len(times), dtype=bool)
    before = times < end if end is not None else np.ones(len(times), dtype=bool)
    return np.asarray(after & before)


def _within(times: pd.DatetimeIndex, outages: Sequence[Outage]) -> np.ndarray:
    down = np.zeros(len(times), dtype=bool)
    for start, end in outages:
        down |= _between(times, start, end)
    return down


def _hex(*parts: object, digits: int) -> str:
    """A stable made-up identifier (uid, UUID, instance id) for ``parts``."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:digits]
