"""Only the replica holding the Lease writes; another takes over once the holder stops renewing
(after the lease duration, on the event loop's clock: looptime fast-forwards it)."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

import pytest

from tests import fakekube
from tests.autoscaler.buffer_helpers import PLURAL, buffer_settings, headroom, running_writer, show, writes
from tests.eventually import eventually

fake_kube = fakekube.fake_kube
kube_api = fakekube.kube_api

LEASE, NAMESPACE = "gpu-autoscaler-actuator", "gpu-autoscaler"


def lease_held_by(holder: str) -> dict:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    spec = {"holderIdentity": holder, "leaseDurationSeconds": 15, "acquireTime": now, "renewTime": now}
    return {"metadata": {"name": LEASE, "namespace": NAMESPACE}, "spec": spec}


async def renew_forever(fake_kube, holder: str) -> None:
    """Another replica renewing the Lease every 2 s, as client-go's elector does."""
    while True:
        await asyncio.sleep(2)
        lease = fake_kube.get("leases", LEASE, NAMESPACE)
        lease["spec"]["renewTime"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        fake_kube.modify("leases", lease)


@pytest.mark.looptime
async def test_a_replica_without_the_lease_never_writes_and_takes_over_when_it_expires(fake_kube, kube_api):
    loop = asyncio.get_running_loop()
    fake_kube.add("leases", lease_held_by("other-replica"))
    holder = asyncio.create_task(renew_forever(fake_kube, "other-replica"))
    async with running_writer(buffer_settings(), kube_api, identity="b") as writer:
        await eventually(lambda: writer.discovered, message="discovery answered")
        for value in (8.0, 16.0, 24.0, 32.0):
            await show(writer, headroom(value))
            await asyncio.sleep(10)
            assert writer.mode == "standby"
            assert writer.elector is not None and writer.elector.holder == "other-replica"
        assert writes(fake_kube, "POST") == writes(fake_kube, "PATCH") == 0
        assert {r.method for r in fake_kube.requests_for("leases")} == {"GET"}  # never tried to take it
        assert writer.health()["capacity buffers"] == (
            "standby: lease held by other-replica; autoscaling.x-k8s.io/v1beta1 written by the holder only"
        )

        holder.cancel()  # the holder dies: its Lease expires 15 s after its last renewal
        with contextlib.suppress(asyncio.CancelledError):
            await holder
        stopped = loop.time()
        await eventually(lambda: writer.mode == "writing", timeout=30, message="took the expired Lease over")
        assert 15 <= loop.time() - stopped <= 15 + 2 + 2  # the duration, plus up to two retry periods
        await eventually(lambda: fake_kube.get(PLURAL, "a100-buffer", "gpu") is not None, message="written")
        assert fake_kube.get(PLURAL, "a100-buffer", "gpu")["spec"]["replicas"] == 4
        lease = fake_kube.get("leases", LEASE, NAMESPACE)["spec"]
        assert (lease["holderIdentity"], lease["leaseTransitions"]) == ("b", 1)


@pytest.mark.looptime
async def test_of_two_replicas_exactly_one_writes(fake_kube, kube_api):
    async with (
        running_writer(buffer_settings(), kube_api, identity="a") as first,
        running_writer(buffer_settings(), kube_api, identity="b") as second,
    ):
        await eventually(lambda: "writing" in (first.mode, second.mode), message="one holds the Lease")
        await asyncio.sleep(60)  # many renewals later, still exactly one
        assert sorted((first.mode, second.mode)) == ["standby", "writing"]
        leader, follower = (first, second) if first.mode == "writing" else (second, first)
        await show(follower, headroom(16.0))
        assert writes(fake_kube, "POST") == 0
        await show(leader, headroom(16.0))
        assert fake_kube.get(PLURAL, "a100-buffer", "gpu")["spec"]["replicas"] == 2
