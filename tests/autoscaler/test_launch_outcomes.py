"""NodeClaims failing as Karpenter fails them, in a fake Kubernetes API read through kubernetes-asyncio:
InsufficientCapacity raises gpu_autoscaler_nodeclaim_launch_failures_total on the service's /metrics
and fires GpuAutoscalerNodeClaimLaunchesFailing (promtool, on the values scraped); the served lead
time covers the retries; with the first pool failing, a CronJob's window is planned in the second."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from adapters.kubernetes.watch import WatchGroup
from autoscaler.app.factory import create_app
from autoscaler.config.settings import ForecastSettings, KubernetesInputsSettings, KubernetesSettings, Settings
from autoscaler.refresh.kube_inputs import KubernetesInputs, watch_settings
from autoscaler.refresh.pipeline import Pipeline
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import ForecastPools
from autoscaler.selectors import parse_selector
from autoscaler.serving.provider import SnapshotProvider, empty_snapshot
from autoscaler.targets.launches import LearnedLaunches
from autoscaler.targets.plans import RefreshInputs, RefreshSettings
from autoscaler.web.ops.launch_views import launch_panel, pool_json
from autoscaler.web.security.auth import AccessControl
from tests.adapters.test_cronjobs import make_cronjob
from tests.adapters.test_launch_record import T0, Feed
from tests.autoscaler.test_kubernetes_inputs import METRICS, PLANS, wait_synced
from tests.autoscaler.test_refresher import FlakySource
from tests.eventually import eventually
from tests.kube_objects import nodeclaim_spec, nodepool
from tests.prometheus_fixture import binaries_or_skip

RULES = Path(__file__).resolve().parents[2] / "manifests" / "monitoring" / "prometheusrule.yaml"
ALERT = "GpuAutoscalerNodeClaimLaunchesFailing"


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def new_nodeclaim(name: str, pool: str, created: datetime) -> dict[str, Any]:
    """A NodeClaim as Karpenter's provisioner creates it (its finalizer, conditions not yet judged)."""
    metadata = {
        "name": name,
        "labels": {"karpenter.sh/nodepool": pool, "node.kubernetes.io/instance-type": "p4d.24xlarge"},
        "finalizers": ["karpenter.sh/termination"],
        "creationTimestamp": stamp(created),
    }
    conditions = [
        {"type": kind, "status": "Unknown", "reason": "AwaitingReconciliation", "message": "object is awaiting "
         "reconciliation", "lastTransitionTime": stamp(created)}
        for kind in ("Launched", "Registered", "Initialized", "Ready")
    ]  # fmt: skip
    return {"metadata": metadata, "spec": nodeclaim_spec(pool), "status": {"conditions": conditions}}


def fail_insufficient_capacity(fake_kube: Any, name: str, pool: str, created: datetime) -> None:
    """Karpenter's launch on an InsufficientCapacity error: the NodeClaim is deleted, its finalizer then
    removed (pkg/controllers/nodeclaim/lifecycle/launch.go, docs/launch-outcomes.md)."""
    stored = fake_kube.add("nodeclaims", new_nodeclaim(name, pool, created))
    deleting = {
        **stored,
        "metadata": {**stored["metadata"], "deletionTimestamp": stamp(created + timedelta(seconds=5))},
    }
    fake_kube.modify("nodeclaims", deleting)
    fake_kube.delete("nodeclaims", name)


def become_ready(fake_kube: Any, name: str, pool: str, created: datetime, ready: datetime) -> None:
    stored = fake_kube.add("nodeclaims", new_nodeclaim(name, pool, created))
    conditions = [
        {"type": kind, "status": "True", "reason": kind, "message": "", "lastTransitionTime": stamp(ready)}
        for kind in ("Launched", "Registered", "Initialized", "Ready")
    ]
    capacity = {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1152Gi"}
    fake_kube.modify("nodeclaims", {**stored, "status": {"conditions": conditions, "capacity": capacity}})


@pytest.fixture
async def inputs(fake_kube, kube_api):
    kube_inputs = KubernetesInputs(
        inputs=KubernetesInputsSettings(),
        forecast=ForecastSettings(default_lead_time=timedelta(minutes=5), lead_time_margin=timedelta(seconds=30)),
    )
    async with WatchGroup(watch_settings(KubernetesSettings())) as group:
        kube_inputs.start(group, kube_api)
        await wait_synced(group)
        yield kube_inputs


def failures_counted(scraped: str, pool: str) -> dict[str, float]:
    return {
        sample.labels["reason"]: sample.value
        for family in text_string_to_metric_families(scraped)
        if family.name == "gpu_autoscaler_nodeclaim_launch_failures"
        for sample in family.samples
        if sample.name.endswith("_total") and sample.labels["pool"] == pool
    }


async def test_insufficient_capacity_is_counted_alerted_and_its_retries_are_in_the_lead_time(
    fake_kube, inputs, tmp_path
):
    refresh = RefreshSettings(interval=timedelta(minutes=1), lead_time=timedelta(minutes=5))
    pipeline = Pipeline(metrics=METRICS, plans=PLANS, sources=(), refresh=refresh, launches=inputs.launches)
    _, ops_app = create_app(Settings(), pipeline=pipeline, access=AccessControl(None, None))
    start = datetime.now(UTC) - timedelta(minutes=20)
    scraped: list[float | None] = [None, None]  # the pool has no series before its first failure
    async with TestClient(TestServer(ops_app)) as client:
        for index in range(3):
            fail_insufficient_capacity(fake_kube, f"a100-{index}", "a100", start + timedelta(minutes=index))

            async def counted(expected: float = index + 1.0) -> float:
                body = await (await client.get("/metrics")).text()
                value = failures_counted(body, "a100").get("InsufficientCapacity")
                assert value == expected, body
                return value

            scraped.append(await eventually(counted, message=f"failure {index + 1} counted on /metrics"))
        # The third try in the pool is Ready 4 minutes after its creation, 7 after the need's first NodeClaim.
        become_ready(fake_kube, "a100-3", "a100", start + timedelta(minutes=3), start + timedelta(minutes=7))

        def retry_learned() -> float:
            lead = inputs.lead_time({"nodepool": "a100"})
            assert lead.source.startswith("the slowest of 1 NodeClaim launch of pool a100"), lead
            return lead.value.total_seconds()

        assert await eventually(retry_learned, message="the lead time learned across the retries") == 7 * 60 + 30
        launches = await (await client.get("/api/v1/launches")).json()
    (pool,) = launches["pools"]
    assert pool["failures"] == {"InsufficientCapacity": 3}
    assert pool["recent"][0] == {
        "at": stamp(start + timedelta(minutes=7)), "nodeclaim": "a100-3", "instance_type": "p4d.24xlarge",
        "outcome": "Ready", "seconds": 420.0, "retries": 3,
    }  # fmt: skip
    alert_fires_on(scraped + [scraped[-1]] * 30, tmp_path)


def alert_fires_on(values: list[float | None], work_dir: Path) -> None:
    """The alert, evaluated by promtool on the counter this service exported each minute."""
    _, promtool = binaries_or_skip()
    rules = yaml.safe_load(RULES.read_text())["spec"]
    for group in rules["groups"]:  # annotations are templates, checked by tests/manifests
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (work_dir / "rules.yaml").write_text(yaml.safe_dump(rules))
    series = (
        "gpu_autoscaler_nodeclaim_launch_failures_total"
        '{namespace="gpu-autoscaler",pod="a",pool="a100",reason="InsufficientCapacity"}'
    )
    firing = {"severity": "warning", "namespace": "gpu-autoscaler", "pool": "a100", "reason": "InsufficientCapacity"}
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": series, "values": " ".join("_" if v is None else f"{v:g}" for v in values)}
                ],
                "alert_rule_test": [
                    {"eval_time": "3m", "alertname": ALERT, "exp_alerts": []},
                    {"eval_time": "10m", "alertname": ALERT, "exp_alerts": [{"exp_labels": firing}]},
                ],
            }
        ],
    }
    (work_dir / "launches_test.yaml").write_text(yaml.safe_dump(test))
    result = subprocess.run(
        [promtool, "test", "rules", str(work_dir / "launches_test.yaml")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


class SecondPoolSource(FlakySource):
    """The Helios trace as the requested GPUs of node pool "second"."""

    def __init__(self) -> None:
        super().__init__()
        self.replay.labels = {"nodepool": "second"}


async def test_with_the_first_pool_failing_a_cronjob_window_is_planned_in_the_second(fake_kube, inputs):
    fake_kube.add("nodepools", nodepool("first", weight=20))
    fake_kube.add("nodepools", nodepool("second", weight=10))
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    fire = now + timedelta(minutes=3)
    cronjob = make_cronjob("nightly", schedule=f"{fire.minute} {fire.hour} * * *", job_spec={"parallelism": 2})
    fake_kube.add("cronjobs", cronjob)

    def planned_in(pool: str) -> str:
        found = inputs.windows(now, timedelta(hours=1))
        windows = [w for w in found if w.name == "nightly"]
        assert len(windows) == 1, (found, inputs.unplaced(), inputs.nodepools())
        (window,) = windows
        assert window.labels["nodepool"] == pool, window
        return window.placement

    await eventually(lambda: planned_in("first"), message="the window in the heavier pool while it launches")
    for index in range(3):
        fail_insufficient_capacity(fake_kube, f"first-{index}", "first", now - timedelta(minutes=10 - index))
    placement = await eventually(lambda: planned_in("second"), message="the window moved to the next pool")
    assert "Karpenter tries first first, but its launches keep failing" in placement
    assert "falls back to second (weight 10)" in placement

    provider = SnapshotProvider(empty_snapshot(METRICS), clock=lambda: now)
    with ThreadPoolExecutor(max_workers=2) as pool:
        refresher = Refresher(
            provider=provider,
            inputs=RefreshInputs(
                metrics=METRICS, plans=PLANS, sources=[SecondPoolSource()],
                refresh=RefreshSettings(interval=timedelta(minutes=1), lead_time=timedelta(minutes=5)),
                windows=inputs.windows, lead_time=inputs.lead_time,
            ),
            pools=ForecastPools([pool]),
            clock=lambda: now,
        )  # fmt: skip
        await refresher.refresh_once()
    (demand,) = provider.get_metric("default", "gpu_demand_forecast", parse_selector("nodepool=second"))
    assert "plus scheduled windows ml/nightly (2 GPUs; NodePools first (weight 20), second" in demand.explanation
    assert "its launches keep failing" in demand.explanation


async def test_one_fast_nodeclaim_does_not_set_the_lead_time(fake_kube, inputs):
    created = datetime.now(UTC) - timedelta(hours=1)
    become_ready(fake_kube, "fast", "a100", created, created + timedelta(seconds=60))

    def one_sample() -> str:
        lead = inputs.lead_time({"nodepool": "a100"})
        assert lead.source == "configured default (only 1 NodeClaim launch of pool a100, none slower)", lead
        return lead.value

    assert await eventually(one_sample, message="the default kept against one fast launch") == timedelta(minutes=5)
    for index, seconds in enumerate((200, 220)):
        become_ready(fake_kube, f"n{index}", "a100", created, created + timedelta(seconds=seconds))

    def learned() -> float:
        lead = inputs.lead_time({"nodepool": "a100"})
        assert lead.source == "p90 of 3 NodeClaim launches of pool a100 plus margin", lead
        return lead.value.total_seconds()

    assert await eventually(learned, message="the p90 once three launches are known") == pytest.approx(216 + 30)


def test_the_page_panel_and_the_api_show_the_pool_s_record():
    feed = Feed()
    for minute in range(3):
        feed.fail_insufficient(f"a-{minute}", T0 + timedelta(minutes=minute))
    record = pool_json(feed.record, "a", T0 + timedelta(minutes=5))
    assert record["failing"] == "its last 3 launches failed (InsufficientCapacity x3), the latest at 08:02:20Z"
    assert record["instance_types"] == [
        {"instance_type": "p4d.24xlarge", "ready": 0, "slow": 0, "failures": {"InsufficientCapacity": 3}}
    ]
    html = launch_panel(record)
    assert "Launches keep failing: its last 3 launches failed" in html
    assert "<td>p4d.24xlarge</td><td>0</td><td>0</td><td>InsufficientCapacity x3</td>" in html


async def test_a_target_replays_the_learned_lead_times_with_their_retries_and_the_failed_share(fake_kube, inputs):
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    become_ready(fake_kube, "a100-fast", "a100", start, start + timedelta(minutes=4))
    assert inputs.learned_launches("a100") is None  # one launch: not the pool replayed yet
    # A need: InsufficientCapacity twice, then a NodeClaim Ready 5 minutes after its own creation,
    # 9 after the need's first: its lead time is 9 minutes.
    need = start + timedelta(minutes=30)
    for index in range(2):
        fail_insufficient_capacity(fake_kube, f"a100-ice-{index}", "a100", need + timedelta(minutes=2 * index))
    become_ready(fake_kube, "a100-retried", "a100", need + timedelta(minutes=4), need + timedelta(minutes=9))
    become_ready(fake_kube, "a100-slow", "a100", start, start + timedelta(minutes=10))
    become_ready(fake_kube, "h100-0", "h100", start, start + timedelta(minutes=6))

    learned = await eventually(
        lambda: inputs.learned_launches("a100") if len(inputs.lead_times.samples("a100")) == 3 else None,
        message="three launches of a100 learned",
    )
    assert learned == LearnedLaunches((240.0, 540.0, 600.0), samples=3, failure_rate=0.4)  # 2 of 5 failed
    assert learned.describe() == "the pool's 3 learned launches: lead time p50 9m, p95 9m54s, 40 % failed"
    # A series without a pool replays every pool's launches, as its lead time pools them.
    pooled = inputs.learned_launches("")
    assert pooled is not None and (pooled.samples, pooled.failure_rate) == (4, pytest.approx(2 / 6))
    unwatched = KubernetesInputs(inputs=KubernetesInputsSettings(nodeclaims=False), forecast=ForecastSettings())
    assert unwatched.learned_launches("a100") is None  # the NodeClaim watch off: the lead time served
