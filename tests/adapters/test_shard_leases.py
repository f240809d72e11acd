"""Shards owned through Leases (adapters/kubernetes/shard_leases.py) against the fake API with the real client,
on looptime's loop: balance, failover of a dead replica, a replica cut off the API, the forced race, and
warm standby (a warming replica takes no shard a warm live replica would take)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import pytest
from kubernetes_asyncio.client import CoordinationV1Api, V1DeleteOptions, V1Preconditions

from adapters.kubernetes.leases import LeaseElector, LeaseTiming
from adapters.kubernetes.shard_leases import WARMING_ANNOTATION, ShardOwnership, member_lease_name, shard_lease_name
from tests import fakekube
from tests.eventually import eventually

fake_kube = fakekube.fake_kube
kube_api = fakekube.kube_api

NAMESPACE, PREFIX, SHARDS = "gpu-autoscaler", "gpu-autoscaler", 6
TIMING = LeaseTiming(15.0, 10.0, 2.0)


@contextlib.asynccontextmanager
async def replica(
    fake_kube, identity: str, changes: list | None = None, ready: Callable[[], bool] | None = None
) -> AsyncIterator[ShardOwnership]:
    """One replica's ownership loop on its own client (its User-Agent is its identity, so that a fault
    can cut this one replica off)."""
    api = await fake_kube.api_client()
    api.user_agent = identity
    ownership = ShardOwnership(
        api, NAMESPACE, prefix=PREFIX, shards=SHARDS, identity=identity, timing=TIMING,
        on_change=(lambda shard, owned: changes.append((shard, owned))) if changes is not None else None,
        ready=ready,
    )  # fmt: skip
    try:
        async with ownership.running():
            yield ownership
    finally:
        await api.close()


def holders(fake_kube) -> dict[int, str | None]:
    found = {}
    for shard in range(SHARDS):
        lease = fake_kube.get("leases", shard_lease_name(PREFIX, shard, SHARDS), NAMESPACE)
        found[shard] = (lease or {}).get("spec", {}).get("holderIdentity") if lease else None
    return found


def never_both(*replicas: ShardOwnership) -> None:
    for shard in range(SHARDS):
        assert sum(r.owns(shard) for r in replicas) <= 1, f"shard {shard} owned twice"


@pytest.mark.looptime
async def test_one_replica_takes_every_shard(fake_kube):
    changes: list = []
    async with replica(fake_kube, "a", changes) as a:
        await eventually(lambda: a.owned() == frozenset(range(SHARDS)), message="all shards")
        assert holders(fake_kube) == dict.fromkeys(range(SHARDS), "a")
        assert sorted(changes) == [(shard, True) for shard in range(SHARDS)]
        member = fake_kube.get("leases", member_lease_name(PREFIX, "a"), NAMESPACE)
        assert member["spec"]["holderIdentity"] == "a" and member["spec"]["leaseDurationSeconds"] == 15
    # A clean shutdown hands every Lease back: a successor need not wait for them to expire; the
    # membership Lease is deleted (a restarted pod is a new member).
    assert holders(fake_kube) == dict.fromkeys(range(SHARDS))
    assert changes[-SHARDS:] == [(shard, False) for shard in sorted(range(SHARDS))]
    assert fake_kube.get("leases", member_lease_name(PREFIX, "a"), NAMESPACE) is None


@pytest.mark.looptime
async def test_two_replicas_converge_to_a_balanced_split_and_never_share_a_shard(fake_kube):
    async with replica(fake_kube, "a") as a:
        await eventually(lambda: len(a.owned()) == SHARDS, message="a holds all")
        async with replica(fake_kube, "b") as b:
            await eventually(lambda: len(a.owned()) == len(b.owned()) == SHARDS // 2, timeout=30,
                             message="balanced")  # fmt: skip
            for _ in range(30):  # many rounds later: still balanced, never a shard owned twice
                never_both(a, b)
                assert a.owned() | b.owned() == frozenset(range(SHARDS))
                await asyncio.sleep(1)
            assert (a.live, b.live) == (2, 2)
            held = holders(fake_kube)
            assert sorted(held.values()) == ["a"] * 3 + ["b"] * 3
        # b leaves cleanly: a takes its shards back at its next rounds, long before any expiry.
        loop = asyncio.get_running_loop()
        left = loop.time()
        await eventually(lambda: len(a.owned()) == SHARDS, timeout=30, message="a holds all again")
        # b's membership Lease is deleted; a counts one live replica at its next round.
        assert loop.time() - left <= TIMING.lease_duration_s + 2 * TIMING.retry_period_s


@pytest.mark.looptime
async def test_a_dead_replicas_shards_are_taken_over_within_the_lease_duration(fake_kube):
    loop = asyncio.get_running_loop()
    async with replica(fake_kube, "a") as a:
        api = await fake_kube.api_client()
        b = ShardOwnership(api, NAMESPACE, prefix=PREFIX, shards=SHARDS, identity="b", timing=TIMING)
        task = asyncio.create_task(b.run())
        await eventually(lambda: len(a.owned()) == len(b.owned()) == SHARDS // 2, timeout=40, message="balanced")
        lost = b.owned()
        task.cancel()  # b dies: no release, its Leases simply stop being renewed
        with contextlib.suppress(asyncio.CancelledError):
            await task
        died = loop.time()
        assert all(holders(fake_kube)[shard] == "b" for shard in lost)
        await eventually(lambda: a.owned() == frozenset(range(SHARDS)), timeout=40, message="a took b's shards")
        assert loop.time() - died <= TIMING.lease_duration_s + 2 * TIMING.retry_period_s
        assert holders(fake_kube) == dict.fromkeys(range(SHARDS), "a")
        transitions = [
            fake_kube.get("leases", shard_lease_name(PREFIX, shard, SHARDS), NAMESPACE)["spec"]["leaseTransitions"]
            for shard in sorted(lost)
        ]
        assert all(count >= 1 for count in transitions)
        await api.close()


@pytest.mark.looptime
async def test_a_replica_cut_off_the_api_stops_acting_in_time_and_rejoins(fake_kube):
    loop = asyncio.get_running_loop()
    changes: list = []
    async with replica(fake_kube, "a") as a, replica(fake_kube, "b", changes) as b:
        await eventually(lambda: len(a.owned()) == len(b.owned()) == SHARDS // 2, timeout=40, message="balanced")
        held = b.owned()
        renewed = max(b.electors[shard]._renewed_at or 0.0 for shard in held)
        fault = fake_kube.fail(status=503, user_agent="b", times=None)  # every request of b fails
        await eventually(lambda: not b.owned(), timeout=20, message="b stopped acting")
        assert loop.time() - renewed <= TIMING.renew_deadline_s + 0.5  # on its own clock, at the deadline
        # Told at its next round (owns() said so at once): whatever acts on a shard stops.
        await eventually(lambda: set(changes[-len(held) :]) == {(shard, False) for shard in held}, timeout=3,
                         message="b was told")  # fmt: skip
        cut = loop.time()
        await eventually(lambda: len(a.owned()) == SHARDS, timeout=40, message="a took b's shards")
        assert loop.time() - cut <= TIMING.lease_duration_s + 2 * TIMING.retry_period_s
        never_both(a, b)
        fault.times = fault.hits  # the API answers b again
        await eventually(lambda: len(a.owned()) == len(b.owned()) == SHARDS // 2, timeout=60, message="rejoined")
        never_both(a, b)


@pytest.mark.looptime
async def test_two_candidates_reading_one_version_exactly_one_wins(fake_kube, kube_api):
    """The forced race: both read the same (free) Lease version, then both write; the API server
    accepts the first update and answers the second 409 Conflict."""
    name = shard_lease_name(PREFIX, 0, SHARDS)
    fake_kube.add("leases", {"metadata": {"name": name, "namespace": NAMESPACE}, "spec": {}})
    first = LeaseElector(kube_api, NAMESPACE, name, "a", TIMING)
    second = LeaseElector(kube_api, NAMESPACE, name, "b", TIMING)
    read_by_first, read_by_second = await first.read(), await second.read()
    assert read_by_first == read_by_second
    before = len(fake_kube.requests_for("leases"))
    won = await asyncio.gather(first.step(read_by_first), second.step(read_by_second))  # both in flight
    assert sorted(won) == [False, True]
    winner, loser = (first, second) if won[0] else (second, first)
    assert (winner.is_leader, loser.is_leader) == (True, False)
    puts = sorted((r.method, r.status) for r in fake_kube.requests_for("leases")[before:])
    assert puts == [("PUT", 200), ("PUT", 409)]
    assert fake_kube.get("leases", name, NAMESPACE)["spec"]["holderIdentity"] == winner.identity
    # The loser keeps out until the winner's record has stood unchanged for the lease duration.
    assert await loser.try_acquire_or_renew() is False
    assert loser.holder == winner.identity


@pytest.mark.looptime
async def test_a_short_cut_off_past_the_renew_deadline_resumes_the_same_shards(fake_kube):
    """Cut off for 12 s: past its renew deadline (it stops acting) but before the lease duration (nobody
    may take over); once it reaches the API it renews the same Leases and is told to act again."""
    changes: list = []
    async with replica(fake_kube, "a") as a, replica(fake_kube, "b", changes) as b:
        await eventually(lambda: len(a.owned()) == len(b.owned()) == SHARDS // 2, timeout=40, message="balanced")
        held, before = b.owned(), holders(fake_kube)
        await asyncio.sleep(1)  # b has just renewed (every 2 s)
        fault = fake_kube.fail(status=503, user_agent="b", times=None)
        await asyncio.sleep(11)
        assert not b.owned()
        assert a.owned().isdisjoint(held)  # 11-13 s unchanged: too early for a to take them
        fault.times = fault.hits
        await eventually(lambda: b.owned() == held, timeout=5, message="b renewed its own Leases")
        assert holders(fake_kube) == before
        told = [change for change in changes if change[0] in held]
        assert told[-2 * len(held) :] == sorted((s, False) for s in held) + sorted((s, True) for s in held)
        never_both(a, b)


@pytest.mark.looptime
async def test_a_dead_members_lease_is_deleted_after_forget_members_after_and_a_live_ones_never(fake_kube):
    loop = asyncio.get_running_loop()
    forget_after = 60.0
    api_a, api_b, api_c = [await fake_kube.api_client() for _ in range(3)]
    a = ShardOwnership(api_a, NAMESPACE, prefix=PREFIX, shards=SHARDS, identity="a", timing=TIMING,
                       forget_members_after_s=forget_after)  # fmt: skip
    b = ShardOwnership(api_b, NAMESPACE, prefix=PREFIX, shards=SHARDS, identity="b", timing=TIMING)
    c = ShardOwnership(api_c, NAMESPACE, prefix=PREFIX, shards=SHARDS, identity="c", timing=TIMING)
    tasks = {name: asyncio.create_task(who.run()) for name, who in (("a", a), ("b", b), ("c", c))}
    await eventually(lambda: (a.live, b.live, c.live) == (3, 3, 3), timeout=40, message="three members")
    tasks["c"].cancel()  # c dies: its membership Lease stops changing
    with contextlib.suppress(asyncio.CancelledError):
        await tasks["c"]
    died = loop.time()
    c_member = member_lease_name(PREFIX, "c")
    await eventually(lambda: fake_kube.get("leases", c_member, NAMESPACE) is None, timeout=120,
                     message="c's membership Lease deleted")  # fmt: skip
    # Not before it had been unchanged for forget_members_after (from a's first sight of its last
    # renewal, at most one round before the death), nor much after.
    assert forget_after - TIMING.retry_period_s <= loop.time() - died <= forget_after + 2 * TIMING.retry_period_s
    # b, alive all along (renewing every round), keeps its Lease however long it runs.
    await asyncio.sleep(3 * forget_after)
    assert fake_kube.get("leases", member_lease_name(PREFIX, "b"), NAMESPACE)["spec"]["holderIdentity"] == "b"
    assert (a.live, b.live) == (2, 2)
    for task in (tasks["a"], tasks["b"]):
        task.cancel()
    await asyncio.gather(tasks["a"], tasks["b"], return_exceptions=True)
    for api in (api_a, api_b, api_c):
        await api.close()


@pytest.mark.looptime
async def test_a_member_renewed_after_the_list_is_not_deleted(fake_kube):
    """The race, forced: a lists the Leases, b's membership Lease changes before a's delete; the
    delete carries the listed resourceVersion, so the API server refuses it (409) and b's stays."""
    api_a, api_b = await fake_kube.api_client(), await fake_kube.api_client()
    a = ShardOwnership(api_a, NAMESPACE, prefix=PREFIX, shards=SHARDS, identity="a", timing=TIMING,
                       forget_members_after_s=30.0)  # fmt: skip
    b_member = LeaseElector(api_b, NAMESPACE, member_lease_name(PREFIX, "b"), "b", TIMING)
    assert await b_member.try_acquire_or_renew()
    listed = {b_member.name: fake_kube.get("leases", b_member.name, NAMESPACE)}
    a._live_others(listed)  # a first sees b's record now
    await asyncio.sleep(31)  # ... and judges it unchanged for longer than forget_members_after
    assert await b_member.try_acquire_or_renew()  # b renews after a's list, before a's delete
    renewed = fake_kube.get("leases", b_member.name, NAMESPACE)["metadata"]["resourceVersion"]
    await a._forget_gone_members(listed)
    assert fake_kube.get("leases", b_member.name, NAMESPACE)["metadata"]["resourceVersion"] == renewed
    deletes = lambda: [r.status for r in fake_kube.requests_for("leases") if r.method == "DELETE"]  # noqa: E731
    assert deletes() == [409]
    # Not tried again at every round: only once it has again been unchanged that long.
    await a._forget_gone_members(listed)
    assert deletes() == [409]
    await asyncio.sleep(31)
    await a._forget_gone_members(listed)
    assert deletes() == [409, 409]
    await api_a.close()
    await api_b.close()


async def test_the_fake_checks_delete_preconditions_as_the_api_server_does(fake_kube, kube_api):
    elector = LeaseElector(kube_api, NAMESPACE, "some-lease", "x", TIMING)
    assert await elector.try_acquire_or_renew()
    stored = fake_kube.get("leases", "some-lease", NAMESPACE)["metadata"]
    leases = CoordinationV1Api(kube_api)

    def delete(**preconditions):
        options = V1DeleteOptions(preconditions=V1Preconditions(**preconditions))
        return leases.delete_namespaced_lease("some-lease", NAMESPACE, body=options, _preload_content=False)

    refused = await delete(resource_version="1")
    assert refused.status == 409
    assert await refused.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Conflict", "code": 409,
        "message": 'Operation cannot be fulfilled on leases.coordination.k8s.io "some-lease": Precondition failed: '
        f"ResourceVersion in precondition: 1, ResourceVersion in object meta: {stored['resourceVersion']}",
    }  # fmt: skip
    assert (await delete(uid="not-its-uid")).status == 409
    # The body is checked against Kubernetes' DeleteOptions schema first (a wrong type: 400).
    malformed = await leases.delete_namespaced_lease(
        "some-lease", NAMESPACE, body={"preconditions": {"resourceVersion": 5}}, _preload_content=False
    )
    assert malformed.status == 400
    assert "5 is not of type 'string', 'null'" in (await malformed.json())["message"]
    assert fake_kube.get("leases", "some-lease", NAMESPACE) is not None
    deleted = await delete(resource_version=stored["resourceVersion"], uid=stored["uid"])
    assert deleted.status == 200
    assert fake_kube.get("leases", "some-lease", NAMESPACE) is None


# ---------------------------------------------------------------------------------------- warm standby


def member_annotations(fake_kube, identity: str) -> dict[str, str] | None:
    return fake_kube.get("leases", member_lease_name(PREFIX, identity), NAMESPACE)["metadata"].get("annotations")


def member_writes(fake_kube, identity: str) -> int:
    path = f"/leases/{member_lease_name(PREFIX, identity)}"
    return sum(1 for r in fake_kube.requests_for("leases") if r.method == "PUT" and r.path.endswith(path)) + 1


@pytest.mark.looptime
async def test_a_warming_newcomer_takes_no_shard_from_a_warm_holder_until_it_is_ready(fake_kube):
    warm = False
    async with replica(fake_kube, "a") as a:
        await eventually(lambda: len(a.owned()) == SHARDS, message="a holds all")
        async with replica(fake_kube, "b", ready=lambda: warm) as b:
            for _ in range(40):  # 40 s: many rounds, well past a lease duration
                assert len(a.owned()) == SHARDS and not b.owned()
                await asyncio.sleep(1)
            assert holders(fake_kube) == dict.fromkeys(range(SHARDS), "a")
            assert (a.warming, a.live, a.warming_others) == (False, 1, 1)  # b left out of a's count
            assert (b.warming, b.live, b.warming_others) == (True, 2, 0)
            assert member_annotations(fake_kube, "b") == {WARMING_ANNOTATION: "true"}
            assert member_annotations(fake_kube, "a") is None  # ready=None: never annotated
            warm = True
            await eventually(lambda: len(a.owned()) == len(b.owned()) == SHARDS // 2, timeout=30,
                             message="balanced once b is warm")  # fmt: skip
            never_both(a, b)
            assert member_annotations(fake_kube, "b") is None
            assert (b.warming, a.live, b.live, a.warming_others) == (False, 2, 2, 0)
            # The annotation rode on b's renewal: one write of its membership Lease per round.
            assert b.rounds <= member_writes(fake_kube, "b") <= b.rounds + 1


@pytest.mark.looptime
async def test_a_warming_replica_takes_the_shards_once_no_warm_replica_is_live(fake_kube):
    loop = asyncio.get_running_loop()
    api = await fake_kube.api_client()
    a = ShardOwnership(api, NAMESPACE, prefix=PREFIX, shards=SHARDS, identity="a", timing=TIMING)
    task = asyncio.create_task(a.run())
    await eventually(lambda: len(a.owned()) == SHARDS, message="a holds all")
    async with replica(fake_kube, "b", ready=lambda: False) as b:
        await eventually(lambda: a.warming_others == 1 and b.live == 2, timeout=10, message="b seen warming")
        await asyncio.sleep(20)
        assert not b.owned()
        task.cancel()  # a dies: no release, its Leases simply stop being renewed
        with contextlib.suppress(asyncio.CancelledError):
            await task
        died = loop.time()
        await eventually(lambda: b.owned() == frozenset(range(SHARDS)), timeout=40, message="b took a's shards")
        assert loop.time() - died <= TIMING.lease_duration_s + 2 * TIMING.retry_period_s
        assert holders(fake_kube) == dict.fromkeys(range(SHARDS), "b")
        assert (b.warming, b.live, b.warming_others) == (True, 1, 0)
        assert member_annotations(fake_kube, "b") == {WARMING_ANNOTATION: "true"}  # still cold, still says so
    await api.close()


@pytest.mark.looptime
async def test_a_dead_warm_holders_shards_go_to_the_other_warm_replica_not_the_warming_one(fake_kube):
    api = await fake_kube.api_client()
    b = ShardOwnership(api, NAMESPACE, prefix=PREFIX, shards=SHARDS, identity="b", timing=TIMING)
    async with replica(fake_kube, "a") as a:
        await eventually(lambda: len(a.owned()) == SHARDS, message="a holds all")
        task = asyncio.create_task(b.run())
        await eventually(lambda: len(a.owned()) == len(b.owned()) == SHARDS // 2, timeout=40, message="balanced")
        async with replica(fake_kube, "c", ready=lambda: False) as c:
            await eventually(lambda: a.warming_others == b.warming_others == 1, message="c seen warming")
            assert not c.owned() and len(a.owned()) == len(b.owned()) == SHARDS // 2
            lost = b.owned()
            task.cancel()  # b dies
            with contextlib.suppress(asyncio.CancelledError):
                await task
            for _ in range(60):  # a takes b's shards within the lease duration; c none of them, then or later
                assert not c.owned()
                never_both(a, b, c)
                await asyncio.sleep(1)
            assert a.owned() == frozenset(range(SHARDS))
            assert all(holders(fake_kube)[shard] == "a" for shard in lost)
            assert (a.live, a.warming_others, c.live, c.warming_others) == (1, 1, 2, 0)
    await api.close()


@pytest.mark.looptime
async def test_warming_replicas_left_alone_split_the_shards_between_them(fake_kube):
    """Nobody warm is live: the cold replicas take the shards, each its share of the live ones."""
    api = await fake_kube.api_client()
    a = ShardOwnership(api, NAMESPACE, prefix=PREFIX, shards=SHARDS, identity="a", timing=TIMING)
    task = asyncio.create_task(a.run())
    await eventually(lambda: len(a.owned()) == SHARDS, message="a holds all")
    async with replica(fake_kube, "b", ready=lambda: False) as b, replica(fake_kube, "c", ready=lambda: False) as c:
        await eventually(lambda: a.warming_others == 2, timeout=10, message="b and c seen warming")
        task.cancel()  # a dies
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await eventually(lambda: len(b.owned()) == len(c.owned()) == SHARDS // 2, timeout=40,
                         message="b and c split a's shards")  # fmt: skip
        for _ in range(20):  # and keep that split
            never_both(b, c)
            assert len(b.owned()) == len(c.owned()) == SHARDS // 2
            await asyncio.sleep(1)
    await api.close()


@pytest.mark.looptime
async def test_a_holder_that_turns_warming_keeps_its_shards_and_hands_none_to_a_warming_newcomer(fake_kube):
    """Shards move only to warm replicas: a holder no longer warm (its ready() turned False) still has the
    models of its own shards, so it keeps them rather than split them with a newcomer colder than itself."""
    ready = True
    async with replica(fake_kube, "a", ready=lambda: ready) as a:
        await eventually(lambda: len(a.owned()) == SHARDS, message="a holds all")
        ready = False
        await eventually(lambda: member_annotations(fake_kube, "a") == {WARMING_ANNOTATION: "true"},
                         message="a says it is warming")  # fmt: skip
        async with replica(fake_kube, "b", ready=lambda: False) as b:
            for _ in range(40):
                assert len(a.owned()) == SHARDS and not b.owned()
                await asyncio.sleep(1)
            assert (a.warming, a.live, a.warming_others, b.live, b.warming_others) == (True, 1, 1, 1, 1)
