"""Standby models (autoscaler/refresh/standby.py): two replicas in one process on the fake API, on
looptime's loop, with the real forecast worker function. A replica that joins holds the published
models of the shards it does not own before it takes its share; a takeover then forecasts from
them (an update) instead of refitting, for the shards handed over at the join and for those taken
over from a replica cut off the API."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from autoscaler.refresh.schedule import FitSchedule
from autoscaler.refresh.standby import PUBLICATION_WAIT, Standby
from autoscaler.replication.shards import Sharding
from autoscaler.targets.plans import RefreshSettings
from autoscaler.web.ops.shard_metrics import ShardMetrics
from tests.autoscaler import test_publication
from tests.autoscaler.test_publication import NAMESPACE, Clock
from tests.autoscaler.test_sharded_refresh import (
    POOLS,
    SETTINGS,
    SHARDS,
    Replica,
    fits,
    held_pools,
    owned_pools,
    replica,
    served_pools,
    works,
    written_pools,
)
from tests.eventually import eventually
from tests.fakekube import fake_kube

pool = test_publication.pool
__all__ = ["fake_kube", "fits", "pool", "works"]  # fixtures


def models_published(fake_kube) -> dict[str, str]:
    """pool -> the model its shard's object names for its demand forecast."""
    found = {}
    for pool_, shard in POOLS.items():
        obj = fake_kube.get("gpuforecasts", f"shard-{shard}-of-{SHARDS}", NAMESPACE)
        for item in obj["status"]["items"] if obj else ():
            if item["metric"] == "gpu_demand_forecast":
                found[pool_] = item["model"]
    return found


def shard_samples(who: Replica) -> dict[str, float]:
    """What ``/metrics`` says of the replica's shards and standbys (the collector the service registers)."""
    registry = CollectorRegistry()
    registry.register(ShardMetrics(lambda: who.sharding))
    lines = generate_latest(registry).decode().splitlines()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines if not line.startswith("#")}


def work_of(works: dict, who: Replica, pools: set[str]) -> dict[str, tuple[str | None, str]]:
    return {pool_: works[who.refresher.scope, pool_] for pool_ in pools}


@pytest.mark.looptime
async def test_a_joining_replica_warms_up_first_and_a_takeover_needs_no_refit(fake_kube, pool, fits, works):
    clock = Clock()
    # "first" starts its shard order at 0, so it hands over shards 2 and 3 (saturn, jupiter): published
    # after its own in shard order, before them once they serve restored values.
    async with replica(fake_kube, pool, clock, "first", SETTINGS) as a:
        await a.refresh()
        assert a.sharding.standby is not None and a.sharding.standby.ready()  # nothing of others to hold
        published = models_published(fake_kube)
        assert set(published) == set(POOLS)

        async with replica(fake_kube, pool, clock, "b", SETTINGS) as b:
            standby = b.sharding.standby
            assert standby is not None
            await asyncio.sleep(10)  # rounds go by: warming, b takes nothing from a
            assert (owned_pools(a), owned_pools(b)) == (set(POOLS), set())
            assert not standby.ready()
            # Not ready while a warm replica serves: a rolling update waits before stopping one.
            assert b.sharding.warming_problem() == (
                "warming: fitting the other replicas' models before taking a share of the shards (not yet counted)"
            )
            assert a.sharding.warming_problem() is None
            await b.refresh()  # its first pull: then it fits every published model as a standby
            await eventually(standby.ready, timeout=60, message="b holds every standby")
            assert b.sharding.warming_problem() is None
            assert (standby.fits, standby.held()) == (len(POOLS), len(POOLS))
            assert work_of(works, b, set(POOLS)) == {p: (published[p], "refit") for p in POOLS}
            assert held_pools(b) == set(POOLS)
            assert shard_samples(b) == {
                "gpu_autoscaler_shards_owned": 0.0,
                "gpu_autoscaler_shard_replicas_live": float(b.sharding.ownership.live),
                "gpu_autoscaler_standby_models": 4.0,
                "gpu_autoscaler_standby_models_due": 0.0,
                "gpu_autoscaler_standby_ready": 1.0,
                'gpu_autoscaler_standby_fits_total{outcome="done"}': 4.0,
                'gpu_autoscaler_standby_fits_total{outcome="failed"}': 0.0,
            }

            await eventually(lambda: len(owned_pools(a)) == len(owned_pools(b)) == 2, timeout=40, message="balanced")
            handed = owned_pools(b)
            assert handed == {"saturn", "jupiter"}
            fits.clear()
            clock.now += timedelta(minutes=1)
            await asyncio.gather(a.refresh(), b.refresh())
            # b forecasts the shards handed to it from its standbys; a keeps their models as standbys.
            assert work_of(works, b, handed) == {p: (published[p], "update") for p in handed}
            assert work_of(works, a, set(POOLS) - handed) == {
                p: (published[p], "update") for p in POOLS if p not in handed
            }
            assert held_pools(a) == set(POOLS)
            assert a.sharding.standby is not None and a.sharding.standby.held() == 2

            fake_kube.fail(status=503, user_agent="b", times=None)  # b is cut off: a takes its shards
            await eventually(lambda: owned_pools(a) == set(POOLS), timeout=25, message="a took b's shards")
            fits.clear()
            clock.now += timedelta(minutes=1)
            written_before = len(fake_kube.requests_for("gpuforecasts", watch=False))
            await a.refresh()
            # Every series from held models, the ones taken over too: no refit, no selection.
            assert work_of(works, a, set(POOLS)) == {p: (published[p], "update") for p in POOLS}
            # The shards taken over (serving b's last values) were published first, then a's own.
            assert written_pools(fake_kube, written_before) == [
                *sorted(handed, key=POOLS.__getitem__),
                *sorted(set(POOLS) - handed, key=POOLS.__getitem__),
            ]
            assert served_pools(a) == sorted(POOLS)


def test_a_standby_is_used_only_for_the_model_published():
    key = ("gpus", (("pool", "earth"),))
    schedule = FitSchedule(RefreshSettings(timedelta(minutes=1), timedelta(minutes=5)))
    start = Clock().now
    schedule.warmed(key, "gbm", start)
    assert not schedule.standby_due(key, "gbm", start + timedelta(hours=1))
    assert schedule.standby_due(key, "mstl", start + timedelta(hours=1))  # the owner reselected
    assert schedule.standby_due(key, "gbm", start + schedule.settings.reselect_every)  # as old as a selection
    schedule.adopt(key, "mstl", start + timedelta(hours=1))
    assert schedule.work_for(key, start + timedelta(hours=1)) == ("refit", "mstl")

    other = ("gpus", (("pool", "mars"),))
    schedule.warmed(other, "gbm", start)
    schedule.adopt(other, "gbm", start + timedelta(hours=1))
    assert schedule.work_for(other, start + timedelta(hours=1)) == ("update", "gbm")
    assert other not in schedule.standby
    # Handed away again: its model stays as the standby, fitted when it was.
    schedule.to_standby(other)
    assert schedule.standby[other] == ("gbm", start)
    assert other not in schedule.selected


class RecordingPools:
    """Stands in for two workers: records which series a standby fit was asked for, and how many
    fits ran at once, in all and on one worker."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.running: dict[int, int] = {0: 0, 1: 0}
        self.most_at_once = self.most_on_one_worker = 0

    def shard_of(self, key) -> int:
        return POOLS[dict(key[1])["pool"]] % 2

    async def run(self, key, work, request, timeout_s):
        worker = self.shard_of(key)
        self.running[worker] += 1
        self.most_at_once = max(self.most_at_once, sum(self.running.values()))
        self.most_on_one_worker = max(self.most_on_one_worker, self.running[worker])
        await asyncio.sleep(1)  # a fit
        self.running[worker] -= 1
        self.asked.append(dict(key[1])["pool"])


def standby_of(published: dict[str, str], clock: Clock) -> tuple[Standby, RecordingPools]:
    """A Standby over a refresher that pulled every pool of POOLS, owns none of them, and sees
    ``published`` (pool -> model) published by their owners."""
    pools = RecordingPools()
    keys = {pool_: ("gpus", (("pool", pool_),)) for pool_ in POOLS}
    refresher = SimpleNamespace(
        pulled={key: SimpleNamespace(name="gpus") for key in keys.values()},
        plans=[SimpleNamespace(signal="gpus")],
        owns=lambda key: False,
        schedule=FitSchedule(RefreshSettings(timedelta(minutes=1), timedelta(minutes=5))),
        clock=lambda: clock.now,
        pools=pools,
        standby_request=lambda signal, model, now: SimpleNamespace(timeout_s=1.0),
    )
    return Standby(refresher, lambda: {keys[p]: model for p, model in published.items()}), pools


@pytest.mark.looptime
async def test_standby_fits_wait_for_a_first_selection_to_be_published_for_a_while():
    clock, published = Clock(), {"earth": "gbm", "uranus": "gbm"}
    standby, pools = standby_of(published, clock)
    await standby.warm()
    # Two of four pools published: nothing fitted yet, four standbys not held, not ready.
    assert (pools.asked, standby.due_count, standby.ready()) == ([], 4, False)
    published.update(saturn="mstl", jupiter="gbm")
    await standby.warm()
    assert (sorted(pools.asked), standby.due_count, standby.ready()) == (sorted(POOLS), 0, True)
    # One fit at a time on each worker, both workers at once.
    assert (pools.most_on_one_worker, pools.most_at_once) == (1, 2)

    clock2 = Clock()
    never = {"earth": "gbm"}  # three pools whose owner never publishes them
    standby, pools = standby_of(never, clock2)
    await standby.warm()
    assert pools.asked == []
    clock2.now += PUBLICATION_WAIT
    await standby.warm()
    # Past the wait, what is published is fitted and the rest holds nobody back.
    assert (pools.asked, standby.due_count, standby.ready()) == (["earth"], 0, True)


def test_a_warming_replica_is_ready_when_no_warm_replica_is_live():
    """Alone (the warm ones gone), it is needed: ready, and it takes the shards cold."""
    standby, _ = standby_of({}, Clock())
    assert not standby.ready()
    sharding = Sharding(SimpleNamespace(live=2), {}, standby)
    assert sharding.warming_problem() is not None
    sharding.ownership.live = 1
    assert sharding.warming_problem() is None
