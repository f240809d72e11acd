"""Lead times from Karpenter NodeClaims, per node pool, and the "Karpenter absent" case."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from adapters.kubernetes.nodeclaims import LeadTimeHistory, lead_time_sample, nodeclaim_resource
from adapters.kubernetes.watch import WatchGroup, WatchSettings
from tests import fakekube
from tests.eventually import eventually
from tests.kube_objects import nodeclaim_spec

fake_kube = fakekube.fake_kube
kube_api = fakekube.kube_api

T0 = datetime(2025, 6, 1, 8, tzinfo=UTC)


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def nodeclaim(
    name: str,
    seconds: float | None,
    *,
    pool: str | None = "gpu",
    created: datetime = T0,
    condition: str = "Ready",
    status: str = "True",
    initialized_seconds: float | None = None,
) -> dict:
    conditions = [{"type": "Launched", "status": "True", "lastTransitionTime": stamp(created + timedelta(seconds=5))}]
    if initialized_seconds is not None:
        moment = created + timedelta(seconds=initialized_seconds)
        conditions.append({"type": "Initialized", "status": "True", "lastTransitionTime": stamp(moment)})
    if seconds is not None:
        moment = created + timedelta(seconds=seconds)
        conditions.append({"type": condition, "status": status, "lastTransitionTime": stamp(moment)})
    labels = {"karpenter.sh/nodepool": pool} if pool else {}
    metadata = {"name": name, "uid": f"uid-{name}", "labels": labels, "creationTimestamp": stamp(created)}
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": metadata,
        "spec": nodeclaim_spec(pool),
        "status": {"conditions": conditions},
    }


def test_lead_time_is_ready_minus_creation():
    sample = lead_time_sample(nodeclaim("n1", 240))
    assert sample is not None
    assert (sample.nodepool, sample.seconds, sample.condition) == ("gpu", 240.0, "Ready")


def test_initialized_stands_in_when_ready_is_missing():
    sample = lead_time_sample(nodeclaim("n1", None, initialized_seconds=200))
    assert sample is not None
    assert (sample.seconds, sample.condition) == (200.0, "Initialized")


def test_not_ready_yet_gives_no_sample():
    assert lead_time_sample(nodeclaim("n1", None)) is None
    assert lead_time_sample(nodeclaim("n1", 100, status="False", initialized_seconds=90)) is None
    broken = nodeclaim("n1", 100)
    broken["metadata"]["creationTimestamp"] = "yesterday"
    assert lead_time_sample(broken) is None


def test_claims_without_a_pool_label_go_to_the_unknown_pool():
    sample = lead_time_sample(nodeclaim("n1", 100, pool=None))
    assert sample is not None
    assert sample.nodepool == ""


def test_history_keeps_the_last_n_per_pool_and_counts_each_claim_once():
    history = LeadTimeHistory(keep_last=3)
    for index, seconds in enumerate([100, 200, 300, 400]):
        assert history.observe(nodeclaim(f"a{index}", seconds, created=T0 + timedelta(minutes=index)))
    assert not history.observe(nodeclaim("a3", 400, created=T0 + timedelta(minutes=3)))  # MODIFIED again
    history.observe(nodeclaim("b0", 60, pool="cpu"))
    assert [s.seconds for s in history.samples("gpu")] == [200, 300, 400]
    assert history.pools() == ["cpu", "gpu"]
    # A relist brings back a claim older than everything kept: it is not one of the last 3.
    assert not history.observe(nodeclaim("a0", 100))


def test_estimate_is_the_quantile_with_its_sample_count():
    history = LeadTimeHistory()
    history.observe_all(nodeclaim(f"n{i}", 100 + 10 * i, created=T0 + timedelta(minutes=i)) for i in range(11))
    history.observe(nodeclaim("other", 1000, pool="cpu"))
    estimate = history.estimate("gpu", 0.9)
    assert (estimate.status, estimate.samples, estimate.seconds) == ("learned", 11, 190.0)
    assert history.estimate("gpu", 0.5).seconds == 150.0
    everything = history.estimate(None, 1.0)
    assert (everything.samples, everything.seconds) == (12, 1000.0)
    with pytest.raises(ValueError, match="quantile"):
        history.estimate("gpu", 1.5)


def test_estimate_without_samples_says_why():
    history = LeadTimeHistory()
    assert history.estimate("gpu", 0.9).status == "no-samples"
    assert history.estimate("gpu", 0.9, absent=True).status == "absent"
    assert history.estimate("gpu", 0.9).seconds is None


@pytest.mark.looptime
async def test_lead_times_learned_from_the_nodeclaim_watch(fake_kube, kube_api):
    fake_kube.add("nodeclaims", nodeclaim("a100-1", 240, pool="a100"))
    fake_kube.add("nodeclaims", nodeclaim("h100-1", 420, pool="h100"))
    fake_kube.add("nodeclaims", nodeclaim("a100-2", None, pool="a100"))  # still launching
    history = LeadTimeHistory(keep_last=10)
    async with WatchGroup(WatchSettings(backoff_jitter=0.0)) as group:
        group.start(nodeclaim_resource(kube_api), history.on_change)
        await asyncio.wait_for(fake_kube.wait_for_watchers("nodeclaims"), 5)
        assert history.estimate("a100", 0.9).samples == 1

        # The second claim becomes ready, then Karpenter consolidates the first one away.
        fake_kube.modify("nodeclaims", nodeclaim("a100-2", 300, pool="a100"))
        fake_kube.delete("nodeclaims", "a100-1")
        await eventually(
            lambda: history.estimate("a100", 0.9).samples == 2, message="both ready a100 claims to be sampled"
        )

    a100 = history.estimate("a100", 1.0)
    assert (a100.status, a100.samples, a100.seconds) == ("learned", 2, 300.0)
    assert history.estimate("h100", 0.9).seconds == 420.0


@pytest.mark.looptime
async def test_karpenter_absent_is_reported(fake_kube, kube_api):
    fake_kube.installed.discard("nodeclaims")
    history = LeadTimeHistory()
    async with WatchGroup(WatchSettings(backoff_jitter=0.0)) as group:
        cache = group.start(nodeclaim_resource(kube_api), history.on_change)
        await eventually(lambda: cache.absent, message="the NodeClaim API to be reported absent")
    assert cache.absent
    assert history.estimate("gpu", 0.9, absent=cache.absent).status == "absent"
