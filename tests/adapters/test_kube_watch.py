"""List-then-watch against the fake API server, through the real kubernetes-asyncio client.

Tests marked looptime run on fast-forwarded loop time: backoff delays of seconds or minutes take
no real time, and the fake records the loop time of every request.
"""

from __future__ import annotations

import asyncio
import contextlib
from itertools import pairwise

import pytest
from kubernetes_asyncio.client import BatchV1Api

from adapters.kubernetes.client import KubeUnavailable, ResourceVersionExpired
from adapters.kubernetes.cronjobs import cronjob_resource, job_resource
from adapters.kubernetes.nodeclaims import nodeclaim_resource
from adapters.kubernetes.watch import (
    WatchCache,
    WatchedResource,
    WatchEvent,
    WatchGroup,
    WatchSettings,
    backoff_delay,
    list_then_watch,
    stream_events,
)
from tests import fakekube
from tests.eventually import eventually
from tests.kube_objects import nodeclaim_spec

fake_kube = fakekube.fake_kube
kube_api = fakekube.kube_api

SETTINGS = WatchSettings(
    backoff_initial_s=1.0,
    backoff_max_s=8.0,
    backoff_factor=2.0,
    backoff_jitter=0.0,
    watch_timeout_s=300.0,
    absent_recheck_s=120.0,
)


def cronjob(name: str, namespace: str = "ml", schedule: str = "0 * * * *") -> dict:
    pod = {"spec": {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"}}
    spec = {"schedule": schedule, "jobTemplate": {"spec": {"template": pod}}}
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def nodeclaim(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": nodeclaim_spec()}


class Recorder:
    """An on_change callback remembering what it was told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    def __call__(self, cache: WatchCache, event: WatchEvent | None) -> None:
        if event is None:
            self.calls.append(("LIST", None))
        else:
            self.calls.append((event.type, event.object["metadata"]["name"]))


@pytest.mark.looptime
async def test_list_then_watch_follows_added_modified_deleted(fake_kube, kube_api):
    fake_kube.add("cronjobs", cronjob("a"))
    recorder = Recorder()
    async with WatchGroup(SETTINGS) as group:
        cache = group.start(cronjob_resource(kube_api), recorder)
        await asyncio.wait_for(fake_kube.wait_for_watchers("cronjobs"), 5)
        assert cache.synced
        assert list(cache.objects) == ["ml/a"]

        fake_kube.add("cronjobs", cronjob("b", namespace="other"))
        fake_kube.modify("cronjobs", cronjob("a", schedule="30 * * * *"))
        fake_kube.delete("cronjobs", "b", "other")
        await eventually(lambda: len(recorder.calls) == 4, message="the list and three events to reach the callback")

    assert recorder.calls == [("LIST", None), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert list(cache.objects) == ["ml/a"]
    assert cache.objects["ml/a"]["spec"]["schedule"] == "30 * * * *"
    assert cache.resource_version == str(fake_kube.resource_version)
    listed, watched = fake_kube.requests_for("cronjobs")[:2]
    assert not listed.watch
    assert watched.watch
    assert watched.query["resourceVersion"] == "2"  # the list's resourceVersion
    assert watched.query["allowWatchBookmarks"].lower() == "true"
    assert watched.query["timeoutSeconds"] == "300"


@pytest.mark.looptime
async def test_bookmark_moves_the_resource_version_without_touching_objects(fake_kube, kube_api):
    fake_kube.add("cronjobs", cronjob("a"))
    recorder = Recorder()
    async with WatchGroup(SETTINGS) as group:
        cache = group.start(cronjob_resource(kube_api), recorder)
        await asyncio.wait_for(fake_kube.wait_for_watchers("cronjobs"), 5)
        listed_rv = cache.resource_version
        fake_kube.add("configmaps", {"metadata": {"name": "unrelated", "namespace": "x"}})  # RV moves on
        fake_kube.bookmark("cronjobs")
        await eventually(
            lambda: cache.resource_version != listed_rv, message="the bookmark to move the resource version"
        )
        assert cache.resource_version == str(fake_kube.resource_version)
        assert recorder.calls == [("LIST", None)]  # bookmarks are not changes

        # The next watch resumes from the bookmark, not from the list.
        fake_kube.end_watches("cronjobs")
        await eventually(
            lambda: len(fake_kube.requests_for("cronjobs", watch=True)) == 2, message="a second watch request"
        )
    resumed = fake_kube.requests_for("cronjobs", watch=True)[1]
    assert resumed.query["resourceVersion"] == str(fake_kube.resource_version)
    assert cache.relists == 1


@pytest.mark.looptime
async def test_cut_stream_resumes_from_the_last_resource_version(fake_kube, kube_api):
    fake_kube.add("cronjobs", cronjob("a"))
    async with WatchGroup(SETTINGS) as group:
        cache = group.start(cronjob_resource(kube_api))
        await asyncio.wait_for(fake_kube.wait_for_watchers("cronjobs"), 5)
        fake_kube.add("cronjobs", cronjob("b"))
        await eventually(lambda: "ml/b" in cache.objects, message="ml/b in the cache")
        rv_before_cut = cache.resource_version

        cut_at = asyncio.get_running_loop().time()
        fake_kube.cut_watches("cronjobs")
        fake_kube.add("cronjobs", cronjob("c"))  # happens while nobody watches
        await eventually(lambda: "ml/c" in cache.objects, message="ml/c in the cache")

    assert sorted(cache.objects) == ["ml/a", "ml/b", "ml/c"]
    assert cache.relists == 1  # no relist: the watch resumed
    assert cache.reconnects == 1
    assert "stream broken" in (cache.last_error or "")
    watches = fake_kube.requests_for("cronjobs", watch=True)
    assert watches[1].query["resourceVersion"] == rv_before_cut
    # The stream had delivered an event, so the reconnect waited only the initial delay.
    assert watches[1].at - cut_at == pytest.approx(SETTINGS.backoff_initial_s, abs=0.01)


@pytest.mark.looptime
async def test_one_client_cut_off_loses_its_streams_and_requests_while_another_keeps_watching(fake_kube, kube_api):
    """The fake's partition of one client (by User-Agent): its open watch breaks and its reconnects
    are dropped; the other client's watch goes on seeing events."""
    other = await fake_kube.api_client()
    other.user_agent = "other-replica"
    kube_api.user_agent = "cut-replica"
    async with (
        contextlib.AsyncExitStack() as stack,
        WatchGroup(SETTINGS) as cut_group,
        WatchGroup(SETTINGS) as kept_group,
    ):
        stack.push_async_callback(other.close)
        cut, kept = cut_group.start(cronjob_resource(kube_api)), kept_group.start(cronjob_resource(other))
        await asyncio.wait_for(fake_kube.wait_for_watchers("cronjobs", 2), 5)
        fault = fake_kube.fail(disconnect=True, user_agent="cut-replica", times=None)
        fake_kube.cut_watches(user_agent="cut-replica")
        fake_kube.add("cronjobs", cronjob("during"))
        await eventually(lambda: "ml/during" in kept.objects, message="the other client to see ml/during")
        await asyncio.sleep(3 * SETTINGS.backoff_initial_s)  # loop time: reconnects are tried and dropped
        assert "ml/during" not in cut.objects
        assert fault.hits >= 2 and cut.reconnects >= 1
        assert kept.reconnects == 0
        fake_kube.faults.remove(fault)  # the partition heals
        await eventually(lambda: "ml/during" in cut.objects, message="the cut client to catch up", timeout=30)


@pytest.mark.looptime
async def test_expired_resource_version_on_reconnect_relists_to_the_true_state(fake_kube, kube_api):
    for name in ("a", "b", "c"):
        fake_kube.add("cronjobs", cronjob(name))
    recorder = Recorder()
    async with WatchGroup(SETTINGS) as group:
        cache = group.start(cronjob_resource(kube_api), recorder)
        await asyncio.wait_for(fake_kube.wait_for_watchers("cronjobs"), 5)

        # While the watch is down, objects change and the history is compacted away.
        fake_kube.cut_watches("cronjobs")
        fake_kube.delete("cronjobs", "a", "ml")
        fake_kube.modify("cronjobs", cronjob("b", schedule="5 5 * * *"))
        fake_kube.add("cronjobs", cronjob("d"))
        fake_kube.compact()
        await eventually(lambda: cache.relists == 2, message="a second list")
        await asyncio.wait_for(fake_kube.wait_for_watchers("cronjobs"), 5)

    assert sorted(cache.objects) == ["ml/b", "ml/c", "ml/d"]
    assert cache.objects["ml/b"]["spec"]["schedule"] == "5 5 * * *"
    assert recorder.calls == [("LIST", None), ("LIST", None)]
    assert "too old resource version" in (cache.last_error or "")


@pytest.mark.looptime
async def test_410_error_event_on_an_open_watch_relists_at_once(fake_kube, kube_api):
    fake_kube.add("cronjobs", cronjob("a"))
    loop = asyncio.get_running_loop()
    async with WatchGroup(SETTINGS) as group:
        cache = group.start(cronjob_resource(kube_api))
        await asyncio.wait_for(fake_kube.wait_for_watchers("cronjobs"), 5)
        fake_kube.add("cronjobs", cronjob("b"))
        await eventually(lambda: "ml/b" in cache.objects, message="ml/b in the cache")
        expired_at = loop.time()
        fake_kube.expire_watches("cronjobs")
        await eventually(lambda: cache.relists == 2, message="a second list")
        relisted_at = loop.time()
    assert relisted_at - expired_at < SETTINGS.backoff_initial_s
    assert sorted(cache.objects) == ["ml/a", "ml/b"]


@pytest.mark.looptime
async def test_http_410_on_the_watch_request_relists(fake_kube, kube_api):
    fake_kube.add("cronjobs", cronjob("a"))
    fake_kube.fail(status=410, plural="cronjobs", watch=True, times=1)
    async with WatchGroup(SETTINGS) as group:
        cache = group.start(cronjob_resource(kube_api))
        await asyncio.wait_for(fake_kube.wait_for_watchers("cronjobs"), 30)
    assert cache.relists == 2
    assert [r.watch for r in fake_kube.requests_for("cronjobs")] == [False, True, False, True]


@pytest.mark.looptime
async def test_429_waits_for_retry_after(fake_kube, kube_api):
    fake_kube.fail(status=429, retry_after=30, plural="cronjobs", watch=True, times=1)
    async with WatchGroup(SETTINGS) as group:
        cache = group.start(cronjob_resource(kube_api))
        await asyncio.wait_for(fake_kube.wait_for_watchers("cronjobs"), 60)
    first, second = fake_kube.requests_for("cronjobs", watch=True)[:2]
    assert first.status == 429
    # Retry-After (30 s) wins over the 1 s backoff delay.
    assert second.at - first.at == pytest.approx(30.0, abs=0.01)
    assert cache.relists == 1  # a throttled watch resumes, it does not relist


@pytest.mark.looptime
async def test_5xx_backs_off_exponentially_up_to_the_cap(fake_kube, kube_api):
    fake_kube.fail(status=503, plural="cronjobs", watch=False, times=6)
    async with WatchGroup(SETTINGS) as group:
        cache = group.start(cronjob_resource(kube_api))
        await asyncio.wait_for(fake_kube.wait_for_watchers("cronjobs"), 120)
    lists = fake_kube.requests_for("cronjobs", watch=False)
    assert [r.status for r in lists] == [503] * 6 + [200]
    gaps = [round(b.at - a.at, 3) for a, b in pairwise(lists)]
    assert gaps == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert cache.synced


@pytest.mark.looptime
async def test_events_reset_the_backoff(fake_kube, kube_api):
    fake_kube.fail(status=500, plural="cronjobs", watch=True, times=3)
    async with WatchGroup(SETTINGS) as group:
        cache = group.start(cronjob_resource(kube_api))
        await asyncio.wait_for(fake_kube.wait_for_watchers("cronjobs"), 60)
        fake_kube.add("cronjobs", cronjob("a"))
        await eventually(lambda: "ml/a" in cache.objects, message="ml/a in the cache")
        fake_kube.fail(status=500, plural="cronjobs", watch=True, times=1)
        fake_kube.cut_watches("cronjobs")
        await eventually(
            lambda: len(fake_kube.requests_for("cronjobs", watch=True)) == 6, message="a sixth watch request"
        )
        await asyncio.wait_for(fake_kube.wait_for_watchers("cronjobs"), 60)
    watches = fake_kube.requests_for("cronjobs", watch=True)
    gaps = [round(b.at - a.at, 3) for a, b in pairwise(watches)]
    # 1, 2, 4 while failing; after the stream delivered an event: the cut and the next 500 start over.
    assert gaps[:3] == [1.0, 2.0, 4.0]
    assert gaps[4] == 2.0
    assert gaps[3] >= 1.0


@pytest.mark.looptime
async def test_a_broken_or_slow_watch_does_not_block_the_others(fake_kube, kube_api):
    fake_kube.fail(status=500, plural="cronjobs", times=None)  # broken for good
    fake_kube.fail(delay_s=10_000, plural="jobs", times=None)  # never answers in time
    async with WatchGroup(SETTINGS) as group:
        cronjobs = group.start(cronjob_resource(kube_api))
        jobs = group.start(job_resource(kube_api))
        nodeclaims = group.start(nodeclaim_resource(kube_api))
        await asyncio.wait_for(fake_kube.wait_for_watchers("nodeclaims"), 5)
        fake_kube.add("nodeclaims", nodeclaim("gpu-1"))
        await eventually(lambda: "gpu-1" in nodeclaims.objects, message="gpu-1 in the NodeClaim cache")
    assert not cronjobs.synced
    assert "HTTP 500" in (cronjobs.last_error or "")
    assert not jobs.synced


@pytest.mark.looptime
async def test_missing_crd_is_reported_absent_and_looked_for_again(fake_kube, kube_api):
    fake_kube.installed.discard("nodeclaims")
    async with WatchGroup(SETTINGS) as group:
        cache = group.start(nodeclaim_resource(kube_api))
        await eventually(lambda: cache.absent, message="the resource to be reported absent")
        assert not cache.synced
        fake_kube.installed.add("nodeclaims")
        fake_kube.add("nodeclaims", nodeclaim("n1"))
        await eventually(
            lambda: cache.synced, message="the cache to sync once the CRD exists", timeout=SETTINGS.absent_recheck_s + 5
        )
    assert not cache.absent
    assert list(cache.objects) == ["n1"]
    lists = fake_kube.requests_for("nodeclaims", watch=False)
    assert lists[1].at - lists[0].at == pytest.approx(SETTINGS.absent_recheck_s, abs=0.01)


@pytest.mark.looptime
async def test_a_crd_removed_while_watched_empties_the_cache(fake_kube, kube_api):
    fake_kube.add("nodeclaims", nodeclaim("n1"))
    recorder = Recorder()
    async with WatchGroup(SETTINGS) as group:
        cache = group.start(nodeclaim_resource(kube_api), recorder)
        await asyncio.wait_for(fake_kube.wait_for_watchers("nodeclaims"), 5)
        fake_kube.installed.discard("nodeclaims")
        fake_kube.cut_watches("nodeclaims")
        await eventually(lambda: cache.absent, message="the resource to be reported absent")
    assert dict(cache.objects) == {}
    assert recorder.calls == [("LIST", None), ("LIST", None)]


@pytest.mark.looptime
async def test_a_garbled_stream_reconnects(fake_kube, kube_api):
    async with WatchGroup(SETTINGS) as group:
        cache = group.start(cronjob_resource(kube_api))
        await asyncio.wait_for(fake_kube.wait_for_watchers("cronjobs"), 5)
        fake_kube.send_raw("cronjobs", b'{"type": "ADDED", "object": "not an object"}\n')
        await eventually(lambda: cache.reconnects == 1, message="a reconnect after the garbled event")
        assert "garbled event" in (cache.last_error or "")
        fake_kube.add("cronjobs", cronjob("a"))
        await eventually(lambda: "ml/a" in cache.objects, message="ml/a in the cache")
    assert cache.relists == 1


@pytest.mark.looptime
async def test_large_lists_are_paged(fake_kube, kube_api):
    for index in range(5):
        fake_kube.add("jobs", {"metadata": {"name": f"j{index}", "namespace": "ml"}})
    settings = WatchSettings(backoff_jitter=0.0, list_page_size=2)
    async with WatchGroup(settings) as group:
        cache = group.start(job_resource(kube_api))
        await asyncio.wait_for(fake_kube.wait_for_watchers("jobs"), 5)
    assert len(cache.objects) == 5
    lists = fake_kube.requests_for("jobs", watch=False)
    assert [r.query.get("limit") for r in lists] == ["2", "2", "2"]
    assert "continue" in lists[1].query


@pytest.mark.looptime
async def test_server_side_timeout_rewatches_without_relisting(fake_kube, kube_api):
    settings = WatchSettings(backoff_jitter=0.0, watch_timeout_s=60.0, backoff_max_s=30.0)
    async with WatchGroup(settings) as group:
        cache = group.start(cronjob_resource(kube_api))
        await eventually(
            lambda: len(fake_kube.requests_for("cronjobs", watch=True)) == 4,
            message="four watch requests (three server-side timeouts)",
            timeout=400,
        )
    watches = fake_kube.requests_for("cronjobs", watch=True)
    assert [round(b.at - a.at, 3) for a, b in pairwise(watches)] == [60.0, 60.0, 60.0]
    assert cache.relists == 1


@pytest.mark.looptime
async def test_a_failing_callback_does_not_stop_the_watch(fake_kube, kube_api):
    def explode(cache: WatchCache, event: WatchEvent | None) -> None:
        raise RuntimeError("consumer bug")

    async with WatchGroup(SETTINGS) as group:
        cache = group.start(cronjob_resource(kube_api), explode)
        await asyncio.wait_for(fake_kube.wait_for_watchers("cronjobs"), 5)
        fake_kube.add("cronjobs", cronjob("a"))
        await eventually(lambda: "ml/a" in cache.objects, message="ml/a in the cache")


@pytest.mark.looptime
async def test_rejected_credentials_are_retried_with_backoff(fake_kube, kube_api):
    fake_kube.bearer_token = "rotated"  # our token is no longer accepted
    async with WatchGroup(SETTINGS) as group:
        cache = group.start(cronjob_resource(kube_api))
        await eventually(
            lambda: len(fake_kube.requests_for("cronjobs")) >= 3,
            message="three attempts with rejected credentials",
            timeout=20,
        )
        assert "HTTP 401" in (cache.last_error or "")
        fake_kube.bearer_token = fakekube.FAKE_ADMIN_TOKEN
        await asyncio.wait_for(fake_kube.wait_for_watchers("cronjobs"), 30)
    assert cache.synced


def test_watch_group_refuses_the_same_kind_twice():
    async def scenario() -> None:
        resource = WatchedResource("things", lambda **kwargs: asyncio.sleep(0))
        async with WatchGroup(SETTINGS) as group:
            group.start(resource)
            with pytest.raises(ValueError, match="already watched"):
                group.start(resource)

    asyncio.run(scenario())


async def test_stream_events_raises_own_error_on_a_cut(fake_kube, kube_api):
    resource = WatchedResource("cronjobs", BatchV1Api(kube_api).list_cron_job_for_all_namespaces)
    events = stream_events(resource, str(fake_kube.resource_version), SETTINGS)
    async with contextlib.aclosing(events):
        fake_kube.add("cronjobs", cronjob("a"))
        first = await anext(events)
        assert (first.type, first.object["metadata"]["name"]) == ("ADDED", "a")
        fake_kube.cut_watches()
        with pytest.raises(KubeUnavailable, match="stream broken"):
            await anext(events)


async def test_list_then_watch_clears_the_resource_version_on_410(fake_kube, kube_api):
    fake_kube.add("cronjobs", cronjob("a"))
    cache = WatchCache("cronjobs")
    resource = cronjob_resource(kube_api)
    task = asyncio.create_task(list_then_watch(resource, cache, SETTINGS))
    await asyncio.wait_for(fake_kube.wait_for_watchers("cronjobs"), 5)
    fake_kube.expire_watches()
    with pytest.raises(ResourceVersionExpired):
        await task
    assert cache.resource_version is None


def test_backoff_delay_grows_caps_and_jitters():
    plain = WatchSettings(backoff_initial_s=0.5, backoff_max_s=10, backoff_factor=3, backoff_jitter=0)
    assert [backoff_delay(plain, n) for n in range(1, 6)] == [0.5, 1.5, 4.5, 10, 10]
    jittery = WatchSettings(backoff_initial_s=4, backoff_max_s=10, backoff_factor=2, backoff_jitter=0.25)
    delays = {backoff_delay(jittery, 1) for _ in range(50)}
    assert all(3.0 <= d <= 5.0 for d in delays)
    assert len(delays) > 1
