"""Kueue Workloads' queue waits on the live scorecard (issue #39, item 2): a Workload in the fake API
(checked against Kueue's vendored CRDs) that waits for quota, for its admission check, then for a late
node, read through kubernetes-asyncio's watches by the service's own pipeline, and shown exactly on
``GET /api/v1/scorecard``, ``/metrics`` and the page, across a restart."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.app import scoring
from autoscaler.app.factory import build_ops_app
from autoscaler.config.settings import Settings
from autoscaler.refresh.pipeline import Pipeline, open_pipeline
from autoscaler.scorecard.live import LiveScorecard
from autoscaler.scorecard.pools import PoolScorecard
from autoscaler.serving.provider import ServedSeries, Snapshot, SnapshotProvider, empty_snapshot
from autoscaler.web.ops.scorecard_metrics import ScorecardMetrics
from autoscaler.web.shared.readiness import Readiness
from autoscaler.web.shared.self_metrics import SelfMetrics
from tests.autoscaler.test_kueue_demand import A100_FLAVOR, TRAIN, job_pod
from tests.autoscaler.test_pool_resolution import A100, H100
from tests.eventually import eventually
from tests.fakekube import FakeKube
from tests.kueue_objects import admission_check, admitted, cluster_queue, local_queue

CREATED = "2026-11-20T08:00:00Z"
RESERVED = "2026-11-20T08:12:00Z"  # 720 s waiting for quota
ADMITTED = "2026-11-20T08:15:00Z"  # 180 s waiting for the budget check
RUNNING = ("2026-11-20T08:16:10Z", "2026-11-20T08:23:30Z")  # the second pod's node came late: 510 s
CREATED_PODS = "2026-11-20T08:15:05Z"
NOW = datetime(2026, 11, 20, 8, 30, tzinfo=UTC)
WAITS = {"quota": 720.0, "admission_check": 180.0, "capacity": 510.0}


def settings(state_dir: Path) -> Settings:
    return Settings.model_validate(
        {
            "server": {"bind_address": "127.0.0.1"},
            "auth": {"mode": "none"},
            "state_dir": str(state_dir),
            # Nothing listens: each sample's GPUs held and used fail (logged); the queue waits need no Prometheus.
            "prometheus": {"url": "http://127.0.0.1:9", "timeout": "1s", "retries": 0},
            "signals": [{"name": "gpus_requested", "preset": "gpus_requested", "by": ["nodepool"]}],
            "metrics": {"gpu_headroom": {"signal": "gpus_requested", "kind": "headroom", "quantile": 0.95}},
            "inputs": {"nodeclaims": False},
        }
    )


@contextlib.asynccontextmanager
async def service(state_dir: Path, kube_api: Any) -> AsyncIterator[tuple[Pipeline, LiveScorecard]]:
    async with open_pipeline(settings(state_dir), kube_api) as pipeline:
        assert pipeline.scorecard is not None and pipeline.health is not None
        health = pipeline.health
        watches = ("pending pods", "workloads", "resourceflavors", "nodepools")
        await eventually(lambda: all(health()[f"watch {kind}"] == "synced" for kind in watches),
                         message="the watches synced", timeout=10)  # fmt: skip
        yield pipeline, pipeline.scorecard


async def answers(pipeline: Pipeline) -> tuple[Any, str, str]:
    """``GET /api/v1/scorecard``, ``/metrics`` and the a100 series' page at NOW."""
    headroom = ServedSeries("gpu_headroom", {"nodepool": "a100"}, 8.0, NOW)
    snapshot = Snapshot(NOW, {info.name: info for info in pipeline.metrics}, {"gpu_headroom": (headroom,)})
    self_metrics = SelfMetrics()
    app = build_ops_app(
        provider=SnapshotProvider(snapshot, clock=lambda: NOW),
        readiness=Readiness(ready=True, reason="test"),
        self_metrics=self_metrics,
        clock=lambda: NOW,
    )
    scoring.attach(pipeline.scorecard, pipeline.plans, app, self_metrics)
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/api/v1/scorecard")
        assert response.status == 200
        body = await response.json()
        metrics = await (await client.get("/metrics")).text()
        page = await client.get("/ui/gpu_headroom")
        assert page.status == 200
        return body, metrics, await page.text()


def histogram(metrics: str, wait: str) -> dict[str, float]:
    """The a100 pool's ``gpu_autoscaler_workload_queue_wait_seconds{wait=...}``: its buckets, sum and count."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name.startswith("gpu_autoscaler_workload_queue_wait_seconds") and sample.labels == {
                "nodepool": "a100", "wait": wait, **({"le": sample.labels["le"]} if "le" in sample.labels else {}),
            }:  # fmt: skip
                found[sample.name.rsplit("_", 1)[-1] + sample.labels.get("le", "")] = sample.value
    return found


def running(pod: dict[str, Any], at: str) -> dict[str, Any]:
    """The pod scheduled to a node and its container started at ``at``: it leaves the Pending-pod watch."""
    status = {
        "phase": "Running", "startTime": at,
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": at}],
        "containerStatuses": [{"name": "train", "image": "trainer", "imageID": "", "ready": True, "restartCount": 0,
                               "state": {"running": {"startedAt": at}}}],
    }  # fmt: skip
    return {**pod, "spec": {**pod["spec"], "nodeName": "a100-node"}, "status": status}


def waits(seconds: float | None = None) -> dict[str, Any]:
    return {"count": 0 if seconds is None else 1, "p50": seconds, "p95": seconds, "max": seconds}


async def through_quota_checks_and_a_late_node(fake_kube: FakeKube, scorecard: LiveScorecard) -> None:
    fake_kube.add("workloads", {**TRAIN, "metadata": {**TRAIN["metadata"], "creationTimestamp": CREATED}})
    reserved = admitted(TRAIN, "gpu", "a100", reserved_at=RESERVED, admitted_at=None, checks=["budget"])
    fake_kube.modify("workloads", reserved)
    card = lambda: scorecard.cards.get("a100")  # noqa: E731
    await eventually(lambda: (c := card()) is not None and len(c.queue.events["quota"]) == 1, message="quota wait",
                     timeout=10)  # fmt: skip
    fake_kube.modify("workloads", admitted(TRAIN, "gpu", "a100", reserved_at=RESERVED, admitted_at=ADMITTED,
                                           checks=["budget"]))  # fmt: skip
    pods = []
    for i in range(2):  # created by the Job once Kueue admitted it
        pod = job_pod(f"train-{i}")
        pods.append(fake_kube.add("pods", {**pod, "metadata": {**pod["metadata"], "creationTimestamp": CREATED_PODS}}))
    await eventually(lambda: len(scorecard.cards["a100"].queue.events["admission_check"]) == 1,
                     message="admission-check wait", timeout=10)  # fmt: skip
    fake_kube.modify("pods", running(pods[0], RUNNING[0]))
    outcomes = scorecard.workloads
    assert outcomes is not None
    await eventually(lambda: [len(state.running) for state in outcomes.admitted.values()] == [1],
                     message="one pod seen running", timeout=10)  # fmt: skip
    assert not scorecard.cards["a100"].queue.events["capacity"]  # one of its two pods runs: not yet
    fake_kube.modify("pods", running(pods[1], RUNNING[1]))
    await eventually(lambda: len(scorecard.cards["a100"].queue.events["capacity"]) == 1, message="capacity wait",
                     timeout=10)  # fmt: skip


async def test_a_workload_shows_its_quota_admission_check_and_capacity_waits_exactly(
    fake_kube: FakeKube, kube_api: Any, tmp_path: Path
) -> None:
    for pool in (A100, H100):
        fake_kube.add("nodepools", pool)
    fake_kube.add("resourceflavors", A100_FLAVOR)
    fake_kube.add("admissionchecks", admission_check("budget", "example.com/budget-approval"))
    fake_kube.add("clusterqueues", cluster_queue("gpu", [("a100", 32)], checks=["budget"]))
    fake_kube.add("localqueues", local_queue("team-a", "gpu"))
    async with service(tmp_path, kube_api) as (pipeline, scorecard):
        await through_quota_checks_and_a_late_node(fake_kube, scorecard)
        body, metrics, page = await answers(pipeline)
        await scoring.score(scorecard, empty_snapshot(pipeline.metrics, NOW))  # a refresh's sample, then saved
    queued = {kind: waits(seconds) for kind, seconds in WAITS.items()}
    (a100,) = body["pools"]
    assert a100["pool"] == "a100"
    assert {name: figures["queue_wait_seconds"] for name, figures in a100["periods"].items()} == {
        "1h": queued,
        "24h": queued,
        "7d": queued,
    }
    # Its pods' own capacity waits, beside: created at 08:15:05, scheduled 65 s and 505 s later.
    assert a100["periods"]["1h"]["capacity_wait_seconds"] == {"count": 2, "p50": 285.0, "p95": 483.0, "max": 505.0}
    assert histogram(metrics, "quota") == {"count": 1.0, "sum": 720.0, **buckets_for(720.0)}
    assert histogram(metrics, "admission_check") == {"count": 1.0, "sum": 180.0, **buckets_for(180.0)}
    assert histogram(metrics, "capacity") == {"count": 1.0, "sum": 510.0, **buckets_for(510.0)}
    assert "<h3>Kueue Workloads' queue waits</h3>" in page
    row = "<tr><td>1h</td><td>12.0 min / 12.0 min / 12.0 min (1 Workload)</td><td>3.0 min / 3.0 min / 3.0 min (1 Workload)</td><td>8.5 min / 8.5 min / 8.5 min (1 Workload)</td></tr>"  # noqa: E501
    assert row in page

    # A restart: the waits are read back, and the Workload, listed again, is not counted twice.
    async with service(tmp_path, kube_api) as (pipeline, scorecard):
        await scoring.score(scorecard, empty_snapshot(pipeline.metrics, NOW))  # every Workload listed is placed
        assert scorecard.workloads is not None and not scorecard.workloads.unresolved
        restored, metrics, _ = await answers(pipeline)
    assert restored == body
    assert histogram(metrics, "quota")["count"] == 1.0


def buckets_for(seconds: float | None) -> dict[str, float]:
    """A histogram's cumulative buckets holding one wait of ``seconds`` (None: none)."""
    bounds = (15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
    held = {f"bucket{float(bound)!r}": float(seconds is not None and seconds <= bound) for bound in bounds}
    return held | {"bucket+Inf": float(seconds is not None)}


def test_a_pool_without_workload_waits_exports_no_queue_wait_histograms() -> None:
    """Most clusters run no Kueue: 3 histograms of 15 series per pool would say nothing."""
    queued, plain = PoolScorecard(), PoolScorecard()
    queued.record_queue_wait("capacity", NOW.timestamp(), 510.0)
    registry = CollectorRegistry()
    registry.register(ScorecardMetrics(lambda: {"a100": queued, "h100": plain}, {}))
    exported = generate_latest(registry).decode()
    assert histogram(exported, "capacity") == {"count": 1.0, "sum": 510.0, **buckets_for(510.0)}
    assert histogram(exported, "quota") == {"count": 0.0, "sum": 0.0, **buckets_for(None)}
    assert 'nodepool="h100",wait=' not in exported
    assert 'gpu_autoscaler_capacity_wait_seconds_count{nodepool="h100"}' in exported  # the pods' waits still are
