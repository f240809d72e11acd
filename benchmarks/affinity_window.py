"""Wait of a CronJob window's pods when the job picks its pool by node affinity (issue #15): the
service replayed on a real Prometheus, its served ``gpu_headroom`` driving the simulator's
placeholder HPA and Karpenter-like node pool, as ``benchmarks/idle_pool.py`` does.

    PYTHONPATH=. .venv/bin/python benchmarks/affinity_window.py

The scenario: NodePool ``a100`` (requirement ``node.kubernetes.io/instance-type In [p4d.24xlarge]``)
serves one 8-GPU inference pod on one node throughout (its node is full, so a window needs new
nodes); kube-state-metrics reports throughout, 7 days of history. A new nightly CronJob (02:00 UTC,
parallelism 2, 8 GPUs a pod, no past Jobs, so a 1-hour window) fires for the first time in the
replay; its two pods run from the fire time on (in Prometheus and in the simulator alike). The
service (Prometheus only, ``gpus_requested`` by nodepool at 5-minute steps, 5-minute lead time)
refreshes every minute from 2 hours before the fire time to 2 hours after it, with the CronJob's
windows as the refresher's scheduled windows, in three variants:

- affinity, before: the pod template chooses ``a100`` by required node affinity on the instance type
  and the windows come from ``windows_for_cronjob(..., nodepools=None)``: no pool is named, so the
  window reaches no pool's series (the service before the pool resolution);
- affinity, after: the same template, ``windows_for_cronjob(..., nodepools=[a100])``;
- nodeSelector (reference): ``nodeSelector: {karpenter.sh/nodepool: a100}``, ``nodepools=None``.

The simulator (``AverageValue`` 1 HPA, scale-to-zero; 8 GPUs a node, 5-minute launches,
``consolidateAfter`` 10 minutes) reports the window pods' wait at p95 (as ``gpu-autoscaler simulate``
reports "window pods wait p95") and the GPU-hours provisioned in the hour before the fire time.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from adapters.kubernetes.cronjobs import CronWindowSettings, windows_for_cronjob
from adapters.kubernetes.pool_matching import NodePool
from adapters.types import ScheduledWindow
from autoscaler.simulation.actuation import Actuation
from autoscaler.simulation.engine import Period, run_policy
from autoscaler.simulation.hpa import HPASpec
from autoscaler.simulation.inputs import Pods, Workload, make_workload
from autoscaler.simulation.lead_times import LeadTimeDistribution
from autoscaler.simulation.provisioner import PoolConfig
from autoscaler.targets.plans import WindowsFunction
from benchmarks.idle_pool import (
    CONSOLIDATE_AFTER_S,
    DAY,
    GPUS_PER_NODE,
    HOUR,
    LEAD_TIME_S,
    MINUTE,
    served_headroom,
)
from tests.cluster_scenario import Node, Pod, Scenario, start_prometheus
from tests.kube_objects import expression, gpu_pod_spec, nodepool

COMMAND = "PYTHONPATH=. .venv/bin/python benchmarks/affinity_window.py"
INSTANCE_TYPE = expression("node.kubernetes.io/instance-type", "In", "p4d.24xlarge")
A100_NODEPOOL = nodepool("a100", requirements=[INSTANCE_TYPE])
HISTORY, AROUND = 8 * DAY, 2 * HOUR  # Prometheus history; the replay, either side of the fire time
WINDOW_PODS, GPUS_PER_POD, WINDOW_LENGTH = 2, 8, HOUR


def nightly_cronjob(pod_spec: Mapping[str, Any]) -> dict[str, Any]:
    """The CronJob: 02:00 UTC, two pods at once of ``pod_spec``; no past Jobs (its first night)."""
    job_spec = {"parallelism": WINDOW_PODS, "completions": WINDOW_PODS, "template": {"spec": dict(pod_spec)}}
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly-training", "namespace": "training", "uid": "nightly-training-uid"},
        "spec": {"schedule": "0 2 * * *", "timeZone": "UTC", "jobTemplate": {"spec": job_spec}},
    }


# (what the variant is, its CronJob, the NodePools the windows are resolved against)
VARIANTS: tuple[tuple[str, dict[str, Any], Sequence[NodePool] | None], ...] = (
    ("affinity, before (nodepools=None)", nightly_cronjob(gpu_pod_spec(GPUS_PER_POD, terms=[[INSTANCE_TYPE]])), None),
    (
        "affinity, after (nodepools=[a100])",
        nightly_cronjob(gpu_pod_spec(GPUS_PER_POD, terms=[[INSTANCE_TYPE]])),
        [A100_NODEPOOL],
    ),
    (
        "nodeSelector (reference)",
        nightly_cronjob(gpu_pod_spec(GPUS_PER_POD, node_selector={"karpenter.sh/nodepool": "a100"})),
        None,
    ),
)


def cronjob_windows(cronjob: Mapping[str, Any], nodepools: Sequence[NodePool] | None) -> WindowsFunction:
    """The CronJob's windows as the refresher asks for them (``RefreshInputs.windows``)."""

    def windows(start: datetime, horizon: timedelta) -> list[ScheduledWindow]:
        return windows_for_cronjob(cronjob, (), start, CronWindowSettings(horizon=horizon), nodepools)

    return windows


def a100_scenario(fire: pd.Timestamp) -> Scenario:
    """Pool a100's inference pod throughout, and the window's pods from ``fire`` for an hour."""
    start, end = fire - HISTORY, fire + AROUND
    nodes = [Node("a100-base", "a100")]
    pods = [Pod("serving", "inference-0", "a100-base", start, end, gpus=8)]
    for i in range(WINDOW_PODS):
        node = f"a100-nightly-{i}"
        nodes.append(Node(node, "a100", start=fire, end=fire + WINDOW_LENGTH + 10 * MINUTE))
        pods.append(Pod("training", f"nightly-training-{i}", node, fire, fire + WINDOW_LENGTH, gpus=GPUS_PER_POD))
    return Scenario(start, end, nodes, pods)


def simulator_workload(scenario: Scenario, origin: pd.Timestamp, steps: int) -> Workload:
    """The scenario's pods on the simulator's 1-minute grid; the nightly pods are the window's."""
    arrival = np.array([(pod.start - origin).total_seconds() for pod in scenario.pods])
    duration = np.array([(pod.end - pod.start).total_seconds() for pod in scenario.pods])
    gpus = np.array([int(pod.gpus) for pod in scenario.pods], dtype=np.int64)
    from_window = np.array([pod.namespace == "training" for pod in scenario.pods])
    order = np.argsort(arrival, kind="stable")
    pods = Pods(arrival, duration, gpus, from_window).select(order)
    return make_workload("affinity-window", origin, 60.0, np.zeros(steps), pods, ())


def figures(workload: Workload, headroom: np.ndarray, fire_s: float) -> dict[str, float]:
    """The served headroom one minute before the fire time, the GPU-hours provisioned (and of them
    idle: not used by real pods) in the hour before it, and the window pods' wait at p95 (with
    two pods, numpy's interpolation between the two waits, as ``simulate`` reports it)."""
    pool = PoolConfig(GPUS_PER_NODE, LeadTimeDistribution("fixed", LEAD_TIME_S), CONSOLIDATE_AFTER_S)
    hpa = Actuation(hpa=HPASpec(min_replicas=0))
    before = run_policy(workload, headroom, Period(0.0, fire_s - 3600.0, fire_s), pool, hpa)
    after = run_policy(workload, headroom, Period(0.0, fire_s, workload.end_s), pool, hpa)
    return {
        "headroom_before_fire": float(headroom[int(fire_s // 60) - 1]),
        "gpu_hours_hour_before": before.totals.provisioned / 3600,
        "idle_gpu_hours_hour_before": (before.totals.provisioned - before.totals.used) / 3600,
        "window_wait_p95_s": float(np.percentile(after.window_pod_waits, 95)),
        "window_wait_max_s": float(after.window_pod_waits.max()),
    }


def print_table(rows: Sequence[tuple[str, str, dict[str, float]]]) -> None:
    print(
        f"{'variant':48} {'window pool':11} {'headroom T-1m':>13} {'GPU-h T-1h..T':>13} {'idle of them':>12}"
        f" {'wait p95 s':>10} {'wait max s':>10}"
    )
    for variant, pool, row in rows:
        print(
            f"{variant:48} {pool:11} {row['headroom_before_fire']:>13g} {row['gpu_hours_hour_before']:>13.2f}"
            f" {row['idle_gpu_hours_hour_before']:>12.2f} {row['window_wait_p95_s']:>10.1f}"
            f" {row['window_wait_max_s']:>10.0f}"
        )


# The node launch time plus the service's lead-time margin (forecast.lead_time_margin, 90 s), as the
# simulator's auto policies plan; the service adds it to lead times learned from NodeClaims.
MARGINED_LEAD_TIME = "390s"


def main() -> None:
    fire = (pd.Timestamp.now(tz="UTC") - DAY).floor("D") + 2 * HOUR
    scenario = a100_scenario(fire)
    moments = pd.date_range(fire - AROUND, fire + AROUND, freq=MINUTE, inclusive="left")
    workload = simulator_workload(scenario, moments[0], len(moments))
    fire_s = (fire - moments[0]).total_seconds()
    started = time.perf_counter()
    rows: list[tuple[str, str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as work:
        server = start_prometheus(scenario, Path(work))
        try:
            for lead_time in ("5m", MARGINED_LEAD_TIME):
                for variant, cronjob, nodepools in VARIANTS:
                    windows = cronjob_windows(cronjob, nodepools)
                    (window,) = windows(fire.to_pydatetime(), timedelta(minutes=1))
                    headroom, _ = asyncio.run(served_headroom(server.url, moments, windows, lead_time))
                    pool = window.labels.get("nodepool", "(none)")
                    rows.append((f"{variant}, lead {lead_time}", pool, figures(workload, headroom, fire_s)))
        finally:
            server.stop()
    print(f"fire time {fire.isoformat()}, lead time {LEAD_TIME_S:g} s, window {WINDOW_PODS} pods x {GPUS_PER_POD} GPUs")
    print_table(rows)
    print(f"command: {COMMAND}")
    print(f"wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
