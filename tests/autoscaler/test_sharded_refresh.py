"""Two replicas in one process (each its own client, Refresher, publication and shard Leases) on the
fake API, on looptime's loop: each fits only the series of the shards it owns; a replica cut off the
API stops fitting and publishing within its renew deadline and keeps serving the last published
values; the other takes its shards over from what was published (values and pacing) and no served
value goes missing; the cut-off replica rejoins and the split is balanced again."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes_asyncio.client import ApiClient
from pydantic import ValidationError

from adapters.kubernetes.watch import WatchSettings
from adapters.types import Signal
from autoscaler.config.publication_settings import PublicationSettings
from autoscaler.refresh import fitting
from autoscaler.refresh.refresher import Refresher
from autoscaler.replication.forecast_objects import shard_of
from autoscaler.replication.publication import Publication, open_publication
from autoscaler.replication.shards import Sharding, open_sharding
from autoscaler.scorecard.figures import parse_fraction_target
from autoscaler.serving.provider import SnapshotProvider, empty_snapshot
from autoscaler.targets.target_store import TunerState
from tests import fakekube
from tests.autoscaler import test_publication
from tests.autoscaler.test_publication import METRICS, NAMESPACE, PLANS, Clock, TraceSource, refresher, served_items
from tests.eventually import eventually

fake_kube = fakekube.fake_kube
pool = test_publication.pool  # a thread pool running the real forecast worker function
SHARDS = 4
# One pool per shard of 4 (sha256 of the signal series, autoscaler/replication/forecast_objects.shard_of).
POOLS = {"earth": 0, "uranus": 1, "saturn": 2, "jupiter": 3}
SETTINGS = PublicationSettings.model_validate(
    {"enabled": True, "namespace": NAMESPACE, "shards": SHARDS, "serve_from": "objects", "sharding": {"enabled": True}}
)
# Without standby models: a takeover refits (tests/autoscaler/test_standby_models.py has them).
COLD = SETTINGS.model_copy(update={"sharding": SETTINGS.sharding.model_copy(update={"standby_models": False})})


class PoolsSource(TraceSource):
    """The Helios trace once per pool, each pool scaled differently."""

    async def pull(self, now: datetime) -> list[Signal]:
        (signal,) = await super().pull(now)
        return [
            replace(signal, labels={"pool": pool}, series=signal.series * (1 + index / 4))
            for index, pool in enumerate(POOLS)
        ]


@dataclass
class Replica:
    identity: str
    refresher: Refresher
    served: SnapshotProvider  # what its APIs serve: the published objects
    publication: Publication
    sharding: Sharding

    async def refresh(self) -> None:
        snapshot = await self.refresher.refresh_once()
        publisher = self.publication.publisher
        assert publisher.owns is not None
        owned = frozenset(filter(publisher.owns, range(SHARDS)))
        await publisher.publish(snapshot, self.refresher.pacing, (), owned, self.refresher.levels.choices())


@contextlib.asynccontextmanager
async def replica(
    fake_kube, pool, clock, identity: str, settings: PublicationSettings = COLD
) -> AsyncIterator[Replica]:
    api: ApiClient = await fake_kube.api_client()
    api.user_agent = identity  # so that a fault can cut off this replica alone
    served = SnapshotProvider(empty_snapshot(METRICS), clock=clock)
    instance = refresher(pool, clock, PoolsSource())
    try:
        async with (
            open_publication(
                settings, api, served=served, metrics=METRICS, plans=PLANS, watch_settings=WatchSettings()
            ) as publication,
            open_sharding(
                settings, api, refresher=instance, publication=publication, lead_times=None, identity=identity
            ) as sharding,
        ):
            yield Replica(identity, instance, served, publication, sharding)
    finally:
        await api.close()


@pytest.fixture
def fits(monkeypatch) -> Counter:
    """(replica scope, pool) -> fits: the real worker function, counted."""
    counted: Counter = Counter()
    real = fitting.work_in_worker

    def counting(request):
        counted[request.scope, dict(request.key[1])["pool"]] += 1
        return real(request)

    monkeypatch.setattr(fitting, "work_in_worker", counting)
    return counted


@pytest.fixture
def works(monkeypatch, fits) -> dict:
    """(replica scope, pool) -> (model asked for, work done) of each one's latest fit."""
    done: dict = {}
    counting = fitting.work_in_worker

    def recording(request):
        result = counting(request)
        done[request.scope, dict(request.key[1])["pool"]] = (request.model, result.work)
        return result

    monkeypatch.setattr(fitting, "work_in_worker", recording)
    return done


def fitted_by(fits: Counter, who: Replica) -> dict[str, int]:
    return {pool: count for (scope, pool), count in fits.items() if scope == who.refresher.scope}


def held_pools(who: Replica) -> set[str]:
    """The pools whose fitted models the replica's worker (a thread pool here: this process) holds."""
    return {dict(key[1])["pool"] for key in fitting.held_models(who.refresher.scope)}


def owned_pools(who: Replica) -> set[str]:
    return {pool for pool, shard in POOLS.items() if who.sharding.ownership.owns(shard)}


def written_pools(fake_kube, since: int) -> list[str]:
    """The pool of each GPUForecast written since request ``since``, in the order written (a write
    refused with 409 Conflict, retried after a fresh read, counts once)."""
    pool_of = {f"shard-{shard}-of-{SHARDS}": pool for pool, shard in POOLS.items()}
    requests = fake_kube.requests_for("gpuforecasts", watch=False)[since:]
    written = [r.path for r in requests if r.method != "GET" and r.status < 300]
    return [pool_of[name] for path in written for name in pool_of if f"/{name}/" in path]


def served_pools(who: Replica) -> list[str]:
    return sorted(item["metricLabels"]["pool"] for item in served_items(who.served, "gpu_demand_forecast"))


@pytest.mark.looptime
async def test_two_replicas_split_the_fits_and_fail_over_without_a_gap(fake_kube, pool, fits, works):
    clock = Clock()
    assert {pool_: shard_of(("gpus", (("pool", pool_),)), SHARDS) for pool_ in POOLS} == POOLS
    async with replica(fake_kube, pool, clock, "a") as a:
        assert owned_pools(a) == set(POOLS)  # alone, it took every shard before its first refresh
        await a.refresh()
        assert fitted_by(fits, a) == dict.fromkeys(POOLS, 1)
        await eventually(lambda: served_pools(a) == sorted(POOLS), message="a serves what it published")

        async with replica(fake_kube, pool, clock, "b") as b:
            balanced = lambda: len(owned_pools(a)) == len(owned_pools(b)) == 2  # noqa: E731
            await eventually(balanced, timeout=40, message="balanced")
            fits.clear()
            # b serves its pools' headroom to a target it chose a buffer for: published with the series.
            b.refresher.levels.restore([chosen_buffer(pool_) for pool_ in owned_pools(b)])
            for _ in range(2):
                clock.now += timedelta(minutes=1)
                await asyncio.gather(a.refresh(), b.refresh())
            # Each series was fitted by its owner only, once per refresh.
            assert fitted_by(fits, a) == dict.fromkeys(owned_pools(a), 2)
            # a's worker dropped the models of the series it handed to b (not kept for days).
            assert held_pools(a) == owned_pools(a)
            assert fitted_by(fits, b) == dict.fromkeys(owned_pools(b), 2)
            assert owned_pools(a).isdisjoint(owned_pools(b))
            for metric in ("gpu_demand_forecast", "gpu_headroom"):
                await eventually(lambda m=metric: served_items(a.served, m) == served_items(b.served, m),
                                 message="one answer")  # fmt: skip
            assert served_pools(b) == sorted(POOLS)

            await _cut_off_and_rejoin(fake_kube, clock, a, b, fits, works)


def chosen_buffer(pool_: str) -> TunerState:
    """A target's choice of a 24-GPU buffer for the pool's headroom, as a tuner records it."""
    return TunerState(
        "gpu_headroom", ("gpus", (("pool", pool_),)), parse_fraction_target("1%"), 8, 60.0, "buffer:24", 0.01,
        datetime(2026, 11, 20, tzinfo=UTC).timestamp(), "chosen by replaying", 600.0, False, (), (), (),
    )  # fmt: skip


async def _cut_off_and_rejoin(fake_kube, clock, a: Replica, b: Replica, fits: Counter, works: dict) -> None:
    loop = asyncio.get_running_loop()
    b_pools = owned_pools(b)
    b_items = [
        item
        for pool in b_pools
        for item in fake_kube.get("gpuforecasts", f"shard-{POOLS[pool]}-of-{SHARDS}", NAMESPACE)["status"]["items"]
        if item["metric"] == "gpu_demand_forecast"
    ]
    published_by_b = {item["labels"]["pool"]: item["value"] for item in b_items}
    model_of_b = {item["labels"]["pool"]: item["model"] for item in b_items}
    fault = fake_kube.fail(status=503, user_agent="b", times=None)
    cut = loop.time()
    await eventually(lambda: not owned_pools(b), timeout=15, message="b stopped acting")
    assert loop.time() - cut <= 10 + 0.5  # within its renew deadline
    fits.clear()
    clock.now += timedelta(minutes=1)
    before = len(fake_kube.requests_for("gpuforecasts", watch=False))
    await b.refresh()
    assert fitted_by(fits, b) == {}  # it owns nothing: no fit, no write
    assert held_pools(b) == set()  # and its worker holds no models any more
    assert [r.status for r in fake_kube.requests_for("gpuforecasts", watch=False)[before:]] == []
    assert served_pools(b) == sorted(POOLS)  # it serves the last published values

    # a takes b's shards over; until then and after, a serves every pool (the objects still hold them).
    while owned_pools(a) != set(POOLS):
        assert served_pools(a) == sorted(POOLS)
        assert loop.time() - cut <= 15 + 2 * 2, "a did not take b's shards within the lease duration"
        await asyncio.sleep(0.5)
    # Before its first fit, a continues from what b published: b's values are in a's own snapshot.
    local = {s.labels["pool"]: s.value for s in a.refresher.provider.snapshot.series["gpu_demand_forecast"]}
    assert {pool: local[pool] for pool in b_pools} == published_by_b
    assert all(("gpu_demand_forecast", ("gpus", (("pool", p),))) in a.refresher.pacing for p in b_pools)
    # and b's targets' choices, which a serves and publishes on.
    carried = a.refresher.levels.choices()
    assert {key: state.chosen for key, state in carried.items()} == {
        ("gpu_headroom", ("gpus", (("pool", p),))): "buffer:24" for p in b_pools
    }
    fits.clear()
    clock.now += timedelta(minutes=1)
    written_before = len(fake_kube.requests_for("gpuforecasts", watch=False))
    await a.refresh()
    assert fitted_by(fits, a) == dict.fromkeys(POOLS, 1)
    # Each shard was published once, as soon as its series were fitted: a's own shards (forecasts
    # from fitted models) before the shards taken over (refits), not all of them at the end.
    assert written_pools(fake_kube, written_before) == [
        *sorted(set(POOLS) - b_pools, key=POOLS.__getitem__),
        *sorted(b_pools, key=POOLS.__getitem__),
    ]
    # The series taken over were refitted with the models b selected, not selected again.
    assert {pool: works[a.refresher.scope, pool] for pool in b_pools} == {
        pool: (model_of_b[pool], "refit") for pool in b_pools
    }
    assert served_pools(a) == sorted(POOLS)

    fault.times = fault.hits  # b reaches the API again: it rejoins, and the split is balanced again
    await eventually(lambda: len(owned_pools(a)) == len(owned_pools(b)) == 2, timeout=60, message="rejoined")
    assert owned_pools(a).isdisjoint(owned_pools(b))


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            {"enabled": True, "sharding": {"enabled": True}},
            "publication.sharding needs publication.enabled: true, serve_from: objects and publish: true",
        ),
        (
            {"enabled": True, "serve_from": "objects", "publish": False, "sharding": {"enabled": True}},
            "publication.sharding needs publication.enabled: true, serve_from: objects and publish: true",
        ),
        (
            {"sharding": {"lease_duration": "10s", "renew_deadline": "10s"}},
            "durations must satisfy lease_duration > renew_deadline > retry_period > 0 (got 0:00:10, 0:00:10, 0:00:02)",
        ),
        ({"sharding": {"retry_period": "0s"}}, "lease_duration > renew_deadline > retry_period > 0"),
        (
            {"sharding": {"forget_members_after": "15s"}},
            "forget_members_after (0:00:15) must exceed lease_duration (0:00:15): "
            "a live replica's Lease would be deleted",
        ),
        ({"sharding": {"lease_prefix": "GPU_autoscaler"}}, "String should match pattern"),
        ({"sharding": {"leases": 3}}, "Extra inputs are not permitted"),
    ],
)
def test_sharding_settings_refuse_what_cannot_work(document, message):
    with pytest.raises(ValidationError) as refused:
        PublicationSettings.model_validate(document)
    assert message in str(refused.value)


def test_sharding_settings_default_to_client_gos_lease_timings():
    sharding = SETTINGS.sharding
    assert (sharding.lease_duration, sharding.renew_deadline, sharding.retry_period) == (
        timedelta(seconds=15), timedelta(seconds=10), timedelta(seconds=2)
    )  # fmt: skip
    assert sharding.lease_prefix == "gpu-autoscaler"
    assert sharding.forget_members_after == timedelta(minutes=10)


async def test_a_shard_is_published_as_soon_as_its_series_are_fitted(fake_kube, pool, monkeypatch):
    """One worker fits the shards in turn (0 to 3 here: every one a selection); while shard 2's fit
    runs, shards 0 and 1 are published already, shard 3 not yet."""
    started, release = threading.Event(), threading.Event()
    real = fitting.work_in_worker

    def held_at_saturn(request):
        if dict(request.key[1])["pool"] == "saturn":
            started.set()
            release.wait(60)
        return real(request)

    monkeypatch.setattr(fitting, "work_in_worker", held_at_saturn)
    async with replica(fake_kube, pool, Clock(), "a") as a:
        assert owned_pools(a) == set(POOLS)
        refreshing = asyncio.create_task(a.refresh())
        try:
            assert await asyncio.to_thread(started.wait, 60)
            await eventually(lambda: written_pools(fake_kube, 0) == ["earth", "uranus"], timeout=30,
                             message="shards 0 and 1 published while shard 2 is fitted")  # fmt: skip
            assert not refreshing.done()
        finally:
            release.set()
        await refreshing
        assert written_pools(fake_kube, 0) == ["earth", "uranus", "saturn", "jupiter"]
        await eventually(lambda: served_pools(a) == sorted(POOLS), message="a serves what it published")
