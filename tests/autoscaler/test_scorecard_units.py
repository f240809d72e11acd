"""One count of GPUs (issue #36, item 5): the live scorecard's held and used GPUs, its capacity waits, the
served demand (the ``gpus_requested`` signal, PromQL on a real Prometheus) and the pod-spec path
(Pending pods, DRA claims on the fake API) count the same pods the same way, in the configured units
and pools.

Every node names its pool by a label of the cluster's own (``example.com/gpu-pool``, exported by
kube-state-metrics as ``label_example_com_gpu_pool``), not Karpenter's. Pools: ``shared`` is 8 GPUs
time-sliced into 4 replicas each (32 ``nvidia.com/gpu.shared``), 12 replicas requested by a workload
and 4 by a placeholder; ``mi300`` is 8 AMD GPUs (``amd.com/gpu``), 4 requested and, for 10 minutes, 2
more by a pod created 5 minutes before it was scheduled; ``dra`` has one node whose 8 GPUs only DRA
publishes (kube-state-metrics shows none), 2 of them allocated to a running pod's claim.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from autoscaler.config.settings import Settings
from autoscaler.refresh.claimed_demand import ClaimedDemandSource
from autoscaler.refresh.pipeline import Pipeline, open_pipeline
from tests.adapters.test_dra_allocations import allocated_claim
from tests.adapters.test_dra_claims import GPU_CLASS, resource_slice
from tests.adapters.test_nodeclaims import nodeclaim
from tests.autoscaler.live_cluster import HOUR, MINUTE, PLACEHOLDERS
from tests.autoscaler.test_live_scorecard import api_answer, busy, every_period, period, score_at, waits
from tests.cluster_scenario import Node, Pod, Scenario, start_prometheus
from tests.eventually import eventually
from tests.kube_objects import pending_pod
from tests.prometheus_fixture import PrometheusServer

pytestmark = pytest.mark.prometheus
POOL_LABEL = "label_example_com_gpu_pool"
SHARED = "nvidia.com/gpu.shared"
SIGNAL = {
    "name": "gpus_requested",
    "preset": "gpus_requested",
    "by": ["nodepool"],
    "step": "1m",
    "resource": ["nvidia.com/gpu", "amd.com/gpu"],
    "time_slicing": {SHARED: 4},
    "nodepool_label": POOL_LABEL,
    "exclude_namespaces": [PLACEHOLDERS],
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, pd.Timestamp]]:
    start = pd.Timestamp.now(tz="UTC").floor("h") - 4 * HOUR
    end = start + 3 * HOUR
    nodes = [
        Node("shared-0", "shared", resource=SHARED, replicas=4, pool_label=POOL_LABEL),
        Node("mi300-0", "mi300", model="AMD Instinct MI300X", resource="amd.com/gpu", pool_label=POOL_LABEL),
        Node("dra-0", "dra", gpus=0, pool_label=POOL_LABEL),
    ]
    pods = [
        Pod("inference", "serve-shared", "shared-0", start, end, gpus=12, resource=SHARED),
        Pod(PLACEHOLDERS, "placeholder-shared", "shared-0", start, end, gpus=4, resource=SHARED),
        Pod("inference", "serve-mi300", "mi300-0", start, end, gpus=4, resource="amd.com/gpu"),
        Pod("ml", "late-mi300", "mi300-0", start + 10 * MINUTE, start + 20 * MINUTE, gpus=2, resource="amd.com/gpu",
            created=start + 5 * MINUTE),
        Pod("ml", "train-dra", "dra-0", start, end, gpus=0),  # its GPUs come through a DRA claim
    ]  # fmt: skip
    server = start_prometheus(Scenario(start, end, nodes, pods), tmp_path_factory.mktemp("units-cluster"))
    try:
        yield server, start + 11 * MINUTE  # the late pod runs: it was scheduled one minute before
    finally:
        server.stop()


def settings(url: str, state_dir: Path, *, watch_pods: bool) -> Settings:
    inputs = {"nodeclaims": True, "nodepools": False, "placeholder_namespaces": [PLACEHOLDERS]}
    return Settings.model_validate(
        {
            "server": {"bind_address": "127.0.0.1"},
            "auth": {"mode": "none"},
            "state_dir": str(state_dir),
            "prometheus": {"url": url, "timeout": "30s", "retries": 1, "backoff_initial": "50ms"},
            "signals": [SIGNAL],
            "metrics": {
                "gpu_headroom": {"signal": "gpus_requested", "kind": "headroom", "placeholder_namespace": PLACEHOLDERS}
            },
            "inputs": inputs if watch_pods else None,
        }
    )


def pools(**periods: dict[str, Any]) -> list[dict[str, Any]]:
    """The API's pools, each with the same figures over 1 h, 24 h and 7 d."""
    return [{"pool": pool, "periods": every_period(figures), "targets": {}} for pool, figures in periods.items()]


async def served_demand(pipeline: Pipeline, moment: pd.Timestamp) -> dict[str, float]:
    """The newest point of each pool's ``gpus_requested`` series, as the refresher reads it."""
    (source,) = pipeline.sources
    return {s.labels["nodepool"]: float(s.series.iloc[-1]) for s in await source.pull(moment.to_pydatetime())}


async def scorecard_used(pipeline: Pipeline, moment: pd.Timestamp) -> dict[str, float]:
    """GPUs the scorecard counts as used now: kube-state-metrics' and DRA's."""
    assert pipeline.scorecard is not None and pipeline.scorecard.capacity is not None
    used = (await pipeline.scorecard.capacity.read(moment.to_pydatetime()))[1]
    dra = pipeline.scorecard.dra_gpus() if pipeline.scorecard.dra_gpus is not None else None
    for pool, gpus in (dra.used if dra is not None else {}).items():
        used[pool] = used.get(pool, 0.0) + gpus
    return used


async def test_a_time_sliced_pool_under_its_own_pool_label_is_scored_in_the_units_demand_is_served_in(
    cluster: tuple[PrometheusServer, pd.Timestamp], tmp_path: Path
) -> None:
    server, t0 = cluster
    async with open_pipeline(settings(server.url, tmp_path, watch_pods=False), None) as pipeline:
        assert pipeline.scorecard is not None
        for minute in range(3):
            await score_at(pipeline, pipeline.scorecard, t0 + minute * MINUTE)
        status, body, _ = await api_answer(pipeline, (t0 + 2 * MINUTE).to_pydatetime())
        demand = await served_demand(pipeline, t0 + 2 * MINUTE)
        used = await scorecard_used(pipeline, t0 + 2 * MINUTE)
    # shared: 32 replicas are 8 GPUs held, 12 are 3 used (the placeholder's 4 are idle); mi300: 8 AMD
    # GPUs held, 4 + 2 used, and the late pod's 5-minute wait read from kube-state-metrics.
    shared = period(0, None, None, round(5 * 2 / 60, 6), 3 / 8, busy=busy(2, 8))
    mi300 = period(0, None, None, round(2 * 2 / 60, 6), 6 / 8, waits(1, 300.0), busy=busy(6, 8))
    dra = period(0, None, None, 0.0, None, busy=None)  # no Kubernetes API: DRA's GPUs are not seen
    assert (status, body["pools"]) == (200, pools(dra=dra, mi300=mi300, shared=shared))
    assert demand == used == {"dra": 0.0, "mi300": 6.0, "shared": 3.0}


@contextlib.asynccontextmanager
async def watching(url: str, state_dir: Path, kube_api: Any) -> Any:
    async with open_pipeline(settings(url, state_dir, watch_pods=True), kube_api) as pipeline:
        health = pipeline.health
        assert health is not None
        await eventually(lambda: all(state == "synced" for name, state in health().items() if name.startswith("watch")),
                         message="every watch synced", timeout=10)  # fmt: skip
        yield pipeline


async def test_dra_claimed_gpus_are_held_used_and_served_as_demand_and_pending_pods_count_in_the_same_units(
    cluster: tuple[PrometheusServer, pd.Timestamp], fake_kube: Any, kube_api: Any, tmp_path: Path
) -> None:
    server, t0 = cluster
    launched = nodeclaim("dra-abc", 120, pool="dra")
    launched["status"]["nodeName"] = "dra-0"
    fake_kube.add("nodeclaims", launched)
    fake_kube.add("deviceclasses", GPU_CLASS)
    fake_kube.add("resourceslices", resource_slice("dra-0", [(f"gpu-{i}", "gpu") for i in range(8)]))
    fake_kube.add("resourceclaims", allocated_claim("train-dra", "dra-0", 2))
    # The claim the scheduler makes for a pod's nvidia.com/gpu (served through DRA): counted as that resource.
    fake_kube.add("resourceclaims", allocated_claim("extended", "dra-0", 1, extended=True))
    # Waiting for capacity: 8 time-sliced replicas are 2 GPUs short in pool shared, as the PromQL counts them.
    wanting = {"containers": [{"name": "serve", "image": "server", "resources": {"limits": {SHARED: "8"}}}]}
    fake_kube.add("pods", pending_pod("serve-more", wanting | {"nodeSelector": {"karpenter.sh/nodepool": "shared"}}))
    async with watching(server.url, tmp_path, kube_api) as pipeline:
        assert pipeline.scorecard is not None and pipeline.pending_gpus is not None
        await eventually(lambda: pipeline.pending_gpus is not None and pipeline.pending_gpus("shared") == 2.0,
                         message="the Pending pod's 2 GPUs", timeout=10)  # fmt: skip
        for minute in range(3):
            await score_at(pipeline, pipeline.scorecard, t0 + minute * MINUTE)
        status, body, _ = await api_answer(pipeline, (t0 + 2 * MINUTE).to_pydatetime())
        demand = await served_demand(pipeline, t0 + 2 * MINUTE)
        used = await scorecard_used(pipeline, t0 + 2 * MINUTE)
    # dra: the slice's 8 GPUs held, the claim's 2 used; the extended-resource claim's GPU is in neither.
    dra = period(2, 0, 0.0, round(6 * 2 / 60, 6), 2 / 8, busy=None)
    shared = period(2, 2, 4.0, round(5 * 2 / 60, 6), 3 / 8, busy=busy(2, 8))
    mi300 = period(2, 0, 0.0, round(2 * 2 / 60, 6), 6 / 8, busy=busy(6, 8))  # waits: from the pod watch
    assert (status, body["pools"]) == (200, pools(dra=dra, mi300=mi300, shared=shared))
    # The demand history holds the claimed GPUs from the first pull on, so forecasts learn from them.
    assert demand == used == {"dra": 2.0, "mi300": 6.0, "shared": 3.0}

    # A restart keeps what was recorded: Prometheus never held it.
    fake_kube.delete("resourceclaims", "train-dra", "ml")
    async with watching(server.url, tmp_path, kube_api) as pipeline:
        (source,) = pipeline.sources
        assert isinstance(source, ClaimedDemandSource)
        # The pull at t0 + 2 min read the peak of the minute before, labelled by its start.
        assert source.recorded["dra"] == {int((t0 + MINUTE).timestamp()): 2.0}
        assert (await served_demand(pipeline, t0 + 2 * MINUTE))["dra"] == 2.0
        assert (await served_demand(pipeline, t0 + 3 * MINUTE))["dra"] == 0.0  # the claim is gone
