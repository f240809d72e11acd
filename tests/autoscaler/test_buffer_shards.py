"""With shards owned through Leases, a pool's CapacityBuffer is written by the replica owning the shard
of the series that sizes it, and by no other (the single actuator Lease is not used)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from autoscaler.actuation.writer import BufferActuator
from autoscaler.serving.provider import ServedSeries, Snapshot
from tests import fakekube
from tests.autoscaler.buffer_helpers import HEADROOM, PLURAL, WATCH, buffer_settings, show
from tests.eventually import eventually

fake_kube = fakekube.fake_kube
kube_api = fakekube.kube_api


def two_pools():
    pools = [
        {"pool": pool, "namespace": "gpu", "name": f"{pool}-buffer", "gpus_per_chunk": 8,
         "node_selector": {"karpenter.sh/nodepool": pool}}
        for pool in ("a100", "h100")
    ]  # fmt: skip
    return buffer_settings(pools=pools)


def headrooms(a100: float, h100: float) -> Snapshot:
    now = datetime.now(UTC)
    series = tuple(
        ServedSeries("gpu_headroom", {"nodepool": pool}, value, now) for pool, value in (("a100", a100), ("h100", h100))
    )
    return Snapshot(created_at=now, metrics={"gpu_headroom": HEADROOM}, series={"gpu_headroom": series})


def writer(kube_api, owned: set[str]) -> BufferActuator:
    actuator = BufferActuator(two_pools(), kube_api, watch=WATCH, sharded=True)
    actuator.owns_series = lambda metric, labels: metric == "gpu_headroom" and labels["nodepool"] in owned
    return actuator


def replicas(fake_kube, pool: str) -> int | None:
    buffer = fake_kube.get(PLURAL, f"{pool}-buffer", "gpu")
    return buffer["spec"]["replicas"] if buffer else None


@pytest.mark.looptime
async def test_each_pool_is_written_by_the_owner_of_its_sizing_series_only(fake_kube, kube_api):
    owned_by_a, owned_by_b = {"a100"}, {"h100"}
    a, b = writer(kube_api, owned_by_a), writer(kube_api, owned_by_b)
    assert a.elector is None and b.elector is None  # no single Lease: ownership is per shard
    async with a.running(), b.running():
        await eventually(lambda: a.discovered and b.discovered, message="discovery answered")
        await show(a, headrooms(16.0, 24.0))
        await show(b, headrooms(16.0, 24.0))
        assert (replicas(fake_kube, "a100"), replicas(fake_kube, "h100")) == (2, 3)
        assert (a.states["a100"].writes, a.states["h100"].writes) == (1, 0)
        assert (b.states["a100"].writes, b.states["h100"].writes) == (0, 1)
        assert (a.states["h100"].mode, b.states["a100"].mode) == ("standby", "standby")
        assert a.health()["capacity buffers"] == (
            "autoscaling.x-k8s.io/v1beta1: written for the pools whose sizing series' shard this replica owns (a100)"
        )

        # a100's shard moves from a to b: a stops writing it at once (checked at write time), b reads
        # the buffer before its first write of it.
        done = a.rounds
        a.on_snapshot(headrooms(32.0, 24.0))  # owned when the refresh ended ...
        owned_by_a.clear()  # ... lost before the writer's round
        await eventually(lambda: a.rounds > done, message="a's round")
        assert replicas(fake_kube, "a100") == 2
        owned_by_b.add("a100")
        await show(b, headrooms(32.0, 24.0))
        assert replicas(fake_kube, "a100") == 4
        assert b.states["a100"].writes == 1 and a.states["a100"].writes == 1
    assert fake_kube.requests_for("leases") == []
