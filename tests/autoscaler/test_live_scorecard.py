"""The live scorecard (issue #26, item 1) on a real Prometheus holding kube-state-metrics series and the
fake Kubernetes API holding Pending pods, read through the service's own pipeline, API and /metrics.

Pools: ``a100`` holds 16 GPUs, 4 requested by a workload and 2 by a placeholder (idle on purpose);
``h100`` holds 8, all requested; ``l4`` holds 8 and runs a CronJob. The scenario lies in the past,
so Prometheus answers at once for any minute the test samples.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.app import scoring
from autoscaler.app.factory import build_ops_app
from autoscaler.config.settings import Settings
from autoscaler.refresh.pipeline import Pipeline, open_pipeline
from autoscaler.scorecard.live import LiveScorecard
from autoscaler.serving.provider import SnapshotProvider, empty_snapshot
from autoscaler.web.ops.scorecard_views import scorecard_panel
from autoscaler.web.shared.readiness import Readiness
from autoscaler.web.shared.self_metrics import SelfMetrics
from tests.autoscaler.live_cluster import HOUR, MINUTE, PLACEHOLDERS
from tests.cluster_scenario import BUSY_UTILIZATION, Node, Pod, Scenario, start_prometheus
from tests.eventually import eventually
from tests.kube_objects import gpu_pod_spec, pending_pod
from tests.prometheus_fixture import PrometheusServer, binaries_or_skip

pytestmark = pytest.mark.prometheus
RULES = Path(__file__).resolve().parents[2] / "manifests" / "monitoring" / "prometheusrule.yaml"


@contextlib.contextmanager
def scenario_prometheus(work_dir: Path) -> Iterator[tuple[PrometheusServer, pd.Timestamp]]:
    start = pd.Timestamp.now(tz="UTC").floor("h") - 4 * HOUR
    end = start + 3 * HOUR
    nodes = [Node("a100-0", "a100"), Node("a100-1", "a100"), Node("h100-0", "h100"), Node("l4-0", "l4")]
    pods = [
        Pod("inference", "serve-a100", "a100-0", start, end, gpus=4),
        Pod(PLACEHOLDERS, "placeholder-a100", "a100-1", start, end, gpus=2),
        Pod("inference", "serve-h100", "h100-0", start, end, gpus=8),
        # Created 5 minutes before it was scheduled, 40 minutes before the minutes the other tests score.
        Pod("ml", "late-a100", "a100-1", start + 10 * MINUTE, start + 20 * MINUTE, created=start + 5 * MINUTE),
    ]
    server = start_prometheus(Scenario(start, end, nodes, pods), work_dir)
    try:
        yield server, start + HOUR
    finally:
        server.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, pd.Timestamp]]:
    with scenario_prometheus(tmp_path_factory.mktemp("scorecard-cluster")) as running:
        yield running


def settings(url: str, state_dir: Path, *, watch_pods: bool = True, **extra: Any) -> Settings:
    inputs = {"nodeclaims": False, "nodepools": False, "placeholder_namespaces": [PLACEHOLDERS]}
    return Settings.model_validate(
        extra
        | {
            "server": {"bind_address": "127.0.0.1"},
            "auth": {"mode": "none"},
            "state_dir": str(state_dir),
            "prometheus": {"url": url, "timeout": "30s", "retries": 1, "backoff_initial": "50ms"},
            "signals": [{"name": "gpus_requested", "preset": "gpus_requested", "by": ["nodepool"]}],
            "metrics": {
                "gpu_headroom": {
                    "signal": "gpus_requested",
                    "kind": "headroom",
                    "quantile": 0.95,
                    "placeholder_namespace": PLACEHOLDERS,
                }
            },
            "inputs": inputs if watch_pods else None,
        }
    )


@contextlib.asynccontextmanager
async def service(url: str, state_dir: Path, kube_api: Any) -> AsyncIterator[tuple[Pipeline, LiveScorecard]]:
    async with open_pipeline(settings(url, state_dir), kube_api) as pipeline:
        assert pipeline.scorecard is not None
        await eventually(lambda: pipeline.health is not None and "synced" in pipeline.health()["watch pending pods"],
                         message="the Pending-pod watch synced", timeout=10)  # fmt: skip
        yield pipeline, pipeline.scorecard


async def score_at(pipeline: Pipeline, scorecard: LiveScorecard, moment: pd.Timestamp) -> None:
    await scoring.score(scorecard, empty_snapshot(pipeline.metrics, moment.to_pydatetime()))


async def api_answer(pipeline: Pipeline, moment: datetime) -> tuple[int, Any, str]:
    self_metrics = SelfMetrics()
    app = build_ops_app(
        provider=SnapshotProvider(empty_snapshot(pipeline.metrics)),
        readiness=Readiness(ready=True, reason="test"),
        self_metrics=self_metrics,
        clock=lambda: moment,
    )
    scoring.attach(pipeline.scorecard, pipeline.plans, app, self_metrics)
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/api/v1/scorecard")
        body = await response.json()
        metrics = await (await client.get("/metrics")).text()
    return response.status, body, metrics


def waits(count: int = 0, value: float | None = None) -> dict[str, Any]:
    return {"count": count, "p50": value, "p95": value, "max": value}


def period(
    scored: int,
    short: int | None,
    short_gpu_minutes: float | None,
    idle: float,
    allocation: float | None,
    capacity_wait: dict[str, Any] | None = None,
    window: dict[str, Any] | None = None,
    coverage: dict[str, Any] | None = None,
    *,
    busy: float | None,
    queue: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "minutes_scored": scored,
        "minutes_short": short,
        "minutes_short_fraction": None if short is None else round(short / scored, 6) if scored else 0.0,
        "short_gpu_minutes": short_gpu_minutes,
        "idle_gpu_hours": idle,
        "gpu_allocation": allocation,
        "busy_utilization": busy,
        "capacity_wait_seconds": capacity_wait or waits(),
        "window_start_delay_seconds": window or waits(),
        "queue_wait_seconds": queue or {"quota": waits(), "admission_check": waits(), "capacity": waits()},
        "coverage": coverage or {},
    }


def busy(held: int, gpus: int) -> float:
    """DCGM's busy share of a pool whose Running pods hold ``held`` of its ``gpus`` GPUs (the scenario's
    dcgm-exporter: 95 % on held GPUs, 0 on the others)."""
    return round(BUSY_UTILIZATION / 100 * held / gpus, 6)


def every_period(figures: dict[str, Any]) -> dict[str, Any]:
    return {"1h": figures, "24h": figures, "7d": figures}


def sample(metrics: str, name: str, pool: str) -> float:
    for family in text_string_to_metric_families(metrics):
        for found in family.samples:
            if found.name == name and found.labels.get("nodepool") == pool:
                return float(found.value)
    raise AssertionError(f"{name}{{nodepool={pool!r}}} is not on /metrics")


def a100_pods(fake_kube: Any, gpus: tuple[int, ...], prefix: str) -> list[str]:
    names = []
    for i, count in enumerate(gpus):
        spec = gpu_pod_spec(count, node_selector={"karpenter.sh/nodepool": "a100"})
        names.append(fake_kube.add("pods", pending_pod(f"{prefix}-{i}", spec))["metadata"]["name"])
    return names


async def test_a_pool_short_of_12_gpus_for_20_minutes_shows_240_short_gpu_minutes_across_a_restart(
    cluster: tuple[PrometheusServer, pd.Timestamp], fake_kube: Any, kube_api: Any, tmp_path: Path
) -> None:
    server, t0 = cluster
    names = a100_pods(fake_kube, (4, 4, 4), "train")
    series: dict[str, list[float]] = {"a100": [], "h100": []}
    async with service(server.url, tmp_path, kube_api) as (pipeline, scorecard):
        for minute in range(21):
            if minute == 20:
                for name in names:
                    fake_kube.delete("pods", name, "ml")
                await eventually(lambda: not scorecard.short_gpus or not scorecard.short_gpus(),
                                 message="the pods gone from the watch", timeout=10)  # fmt: skip
            await score_at(pipeline, scorecard, t0 + minute * MINUTE)
            metrics = (await api_answer(pipeline, (t0 + minute * MINUTE).to_pydatetime()))[2]
            for pool, values in series.items():
                values.append(sample(metrics, "gpu_autoscaler_gpus_short", pool))
        status, body, metrics = await api_answer(pipeline, (t0 + 20 * MINUTE).to_pydatetime())
    expected = {
        "at": f"{t0 + 20 * MINUTE:%Y-%m-%dT%H:%M:%SZ}",
        "cluster_queues": [],
        "pools": [
            {
                "pool": "a100",
                "periods": every_period(period(20, 20, 240.0, 4.0, 0.25, busy=busy(6, 16))),
                "targets": {},
            },
            {"pool": "h100", "periods": every_period(period(20, 0, 0.0, 0.0, 1.0, busy=busy(8, 8))), "targets": {}},
            # l4 holds 8 GPUs that nothing requests.
            {
                "pool": "l4",
                "periods": every_period(period(20, 0, 0.0, round(8 * 20 / 60, 6), 0.0, busy=0.0)),
                "targets": {},
            },
        ],
    }
    assert (status, body) == (200, expected)
    assert sample(metrics, "gpu_autoscaler_short_gpu_seconds_total", "a100") == 240 * 60
    assert sample(metrics, "gpu_autoscaler_minutes_short_total", "a100") == 20
    assert sample(metrics, "gpu_autoscaler_minutes_short_total", "h100") == 0
    # dcgm-exporter's utilization, read from the real Prometheus: the share of the pool's GPUs busy.
    assert sample(metrics, "gpu_autoscaler_gpu_busy_ratio", "a100") == pytest.approx(busy(6, 16), abs=1e-9)
    assert sample(metrics, "gpu_autoscaler_gpu_busy_ratio", "l4") == 0.0
    assert series["a100"] == [12.0] * 20 + [0.0]
    _alert_fires_on(series, tmp_path)

    # A restart: the saved scorecard carries on, and its counters with it.
    async with service(server.url, tmp_path, kube_api) as (pipeline, scorecard):
        status, restored, metrics = await api_answer(pipeline, (t0 + 20 * MINUTE).to_pydatetime())
        assert (status, restored) == (200, body)
        assert sample(metrics, "gpu_autoscaler_short_gpu_seconds_total", "a100") == 240 * 60
        names = a100_pods(fake_kube, (4,), "again")
        await eventually(lambda: scorecard.short_gpus is not None and scorecard.short_gpus() == {"a100": 4.0},
                         message="the new pod in the watch", timeout=10)  # fmt: skip
        await score_at(pipeline, scorecard, t0 + 21 * MINUTE)
        await score_at(pipeline, scorecard, t0 + 22 * MINUTE)
        metrics = (await api_answer(pipeline, (t0 + 22 * MINUTE).to_pydatetime()))[2]
    assert sample(metrics, "gpu_autoscaler_short_gpu_seconds_total", "a100") == 240 * 60 + 4 * 60
    assert sample(metrics, "gpu_autoscaler_minutes_short_total", "a100") == 21
    assert sample(metrics, "gpu_autoscaler_minutes_scored_total", "a100") == 22


def _alert_fires_on(series: dict[str, list[float]], work_dir: Path) -> None:
    """GpuAutoscalerGpusShort, evaluated by promtool on the gauge this service exported each minute."""
    _, promtool = binaries_or_skip()
    rules = yaml.safe_load(RULES.read_text())["spec"]
    for group in rules["groups"]:  # annotations are templates, checked by tests/manifests, not pinned here
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (work_dir / "rules.yaml").write_text(yaml.safe_dump(rules))
    inputs = [
        {
            "series": f'gpu_autoscaler_gpus_short{{namespace="gpu-autoscaler",pod="a",nodepool="{pool}"}}',
            "values": " ".join(f"{v:g}" for v in values),
        }
        for pool, values in series.items()
    ]
    firing = [{"exp_labels": {"severity": "warning", "namespace": "gpu-autoscaler", "nodepool": "a100"}}]
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": inputs,
                "alert_rule_test": [
                    {"eval_time": "9m", "alertname": "GpuAutoscalerGpusShort", "exp_alerts": []},
                    {"eval_time": "19m", "alertname": "GpuAutoscalerGpusShort", "exp_alerts": firing},
                ],
            }
        ],
    }
    (work_dir / "scorecard_test.yaml").write_text(yaml.safe_dump(test))
    result = subprocess.run(
        [promtool, "test", "rules", str(work_dir / "scorecard_test.yaml")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def cron_objects(scheduled: pd.Timestamp) -> tuple[dict[str, Any], dict[str, Any]]:
    stamp = f"{scheduled:%Y-%m-%dT%H:%M:%SZ}"
    job = {
        "metadata": {
            "name": "nightly-1",
            "namespace": "ml",
            "annotations": {"batch.kubernetes.io/cronjob-scheduled-timestamp": stamp},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": "uid-n"}],
        },
        "spec": {
            "parallelism": 1,
            "template": {"spec": gpu_pod_spec(1, node_selector={"karpenter.sh/nodepool": "l4"})},
        },
    }
    pod = pending_pod("nightly-1-abcde", gpu_pod_spec(1, node_selector={"karpenter.sh/nodepool": "l4"}))
    pod["metadata"]["creationTimestamp"] = stamp
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "nightly-1", "uid": "uid-job", "controller": True}
    ]
    return job, pod


def started(pod: dict[str, Any], scheduled_at: pd.Timestamp, running_at: pd.Timestamp) -> dict[str, Any]:
    running = {**pod, "spec": {**pod["spec"], "nodeName": "l4-0"}}
    running["status"] = {
        "phase": "Running",
        "startTime": f"{scheduled_at:%Y-%m-%dT%H:%M:%SZ}",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": f"{scheduled_at:%Y-%m-%dT%H:%M:%SZ}"}
        ],
        "containerStatuses": [
            {
                "name": "train", "image": "trainer", "imageID": "", "ready": True, "restartCount": 0,
                "state": {"running": {"startedAt": f"{running_at:%Y-%m-%dT%H:%M:%SZ}"}},
            }
        ],
    }  # fmt: skip
    return running


async def test_a_cronjob_whose_pods_started_7_minutes_late_shows_7_minutes(
    cluster: tuple[PrometheusServer, pd.Timestamp], fake_kube: Any, kube_api: Any, tmp_path: Path
) -> None:
    server, t0 = cluster
    job, pod = cron_objects(t0)
    fake_kube.add("jobs", job)
    fake_kube.add("pods", pod)
    async with service(server.url, tmp_path, kube_api) as (pipeline, scorecard):
        await eventually(lambda: scorecard.short_gpus is not None and scorecard.short_gpus() == {"l4": 1.0},
                         message="the CronJob's pod waiting", timeout=10)  # fmt: skip
        for minute in range(7):
            await score_at(pipeline, scorecard, t0 + minute * MINUTE)
        fake_kube.modify("pods", started(pod, t0 + 6.5 * MINUTE, t0 + 7 * MINUTE))
        await eventually(lambda: "l4" in scorecard.cards and len(scorecard.cards["l4"].window_delays) == 1,
                         message="the run's start recorded", timeout=10)  # fmt: skip
        await score_at(pipeline, scorecard, t0 + 7 * MINUTE)
        status, body, metrics = await api_answer(pipeline, (t0 + 7 * MINUTE).to_pydatetime())
    # The pod waited 390 s for a node and ran 420 s after the run's scheduled time; Prometheus shows
    # nothing requesting l4's GPUs in those minutes.
    # The CronJob's pods are in the API only: what dcgm-exporter shows is the scenario's pods.
    l4 = period(7, 7, 7.0, round(8 * 7 / 60, 6), 0.0, waits(1, 390.0), waits(1, 420.0), busy=0.0)
    a100 = period(7, 0, 0.0, round(12 * 7 / 60, 6), 0.25, busy=busy(6, 16))
    h100 = period(7, 0, 0.0, 0.0, 1.0, busy=busy(8, 8))
    assert (status, body) == (
        200,
        {
            "at": f"{t0 + 7 * MINUTE:%Y-%m-%dT%H:%M:%SZ}",
            "cluster_queues": [],
            "pools": [
                {"pool": "a100", "periods": every_period(a100), "targets": {}},
                {"pool": "h100", "periods": every_period(h100), "targets": {}},
                {"pool": "l4", "periods": every_period(l4), "targets": {}},
            ],
        },
    )
    assert sample(metrics, "gpu_autoscaler_window_start_delay_seconds_count", "l4") == 1
    assert sample(metrics, "gpu_autoscaler_window_start_delay_seconds_sum", "l4") == 420


async def test_where_only_prometheus_shows_pods_their_capacity_waits_come_from_kube_state_metrics(
    cluster: tuple[PrometheusServer, pd.Timestamp], tmp_path: Path
) -> None:
    server, t0 = cluster
    async with open_pipeline(settings(server.url, tmp_path, watch_pods=False), None) as pipeline:
        assert pipeline.scorecard is not None and pipeline.scorecard.pods is None
        for minute in range(3):  # the pod was scheduled at t0 - 50 min: in the window of each of these
            await score_at(pipeline, pipeline.scorecard, t0 - 49 * MINUTE + minute * MINUTE)
        status, body, metrics = await api_answer(pipeline, (t0 - 47 * MINUTE).to_pydatetime())
    # The late pod's GPU too: 4 + 2 + 1 of 16 held. Without the Pending-pod watch no pod waiting for
    # capacity is seen: GPUs short are unknown (null), so no minute is scored; held, used, idle count.
    a100 = period(0, None, None, round(11 * 2 / 60, 6), round(5 / 16, 6), waits(1, 300.0), busy=busy(7, 16))
    assert (status, body) == (
        200,
        {
            "at": f"{t0 - 47 * MINUTE:%Y-%m-%dT%H:%M:%SZ}",
            "cluster_queues": [],
            "pools": [
                {"pool": "a100", "periods": every_period(a100), "targets": {}},
                {
                    "pool": "h100",
                    "periods": every_period(period(0, None, None, 0.0, 1.0, busy=busy(8, 8))),
                    "targets": {},
                },
                {
                    "pool": "l4",
                    "periods": every_period(period(0, None, None, round(8 * 2 / 60, 6), 0.0, busy=0.0)),
                    "targets": {},
                },
            ],
        },
    )
    assert sample(metrics, "gpu_autoscaler_capacity_wait_seconds_count", "a100") == 1
    assert sample(metrics, "gpu_autoscaler_idle_gpu_seconds_total", "l4") == 8 * 2 * 60
    for absent in ("gpu_autoscaler_gpus_short", "gpu_autoscaler_short_gpu_seconds_total",
                   "gpu_autoscaler_minutes_short_total", "gpu_autoscaler_minutes_scored_total"):  # fmt: skip
        with pytest.raises(AssertionError, match="is not on /metrics"):
            sample(metrics, absent, "a100")
    panel = scorecard_panel(body["pools"][0]["periods"])
    assert "<td>unknown</td>" in panel and "GPUs short are unknown: no Pending-pod watch runs" in panel
