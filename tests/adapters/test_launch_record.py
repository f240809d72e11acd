"""Launch outcomes of NodeClaims: failures and their reasons, slow launches, lead times across
retries, "keeps failing", node sizes, and bad objects that never stop the watch."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adapters.kubernetes.launch_record import LaunchRecord, LaunchSettings
from adapters.kubernetes.nodeclaim_states import gone_reason, read_claim
from adapters.kubernetes.nodeclaims import LeadTimeHistory
from adapters.kubernetes.watch import WatchCache, WatchEvent
from tests.kube_objects import nodeclaim_spec

T0 = datetime(2026, 11, 20, 8, tzinfo=UTC)


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def claim(
    name: str,
    created: datetime,
    *,
    pool: str = "a",
    instance_type: str | None = "p4d.24xlarge",
    launched: tuple[str, str] | None = None,  # (status, reason)
    ready_after: timedelta | None = None,
    deleted_at: datetime | None = None,
    capacity: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A karpenter.sh/v1 NodeClaim as Karpenter leaves it at each stage."""
    conditions = []
    if launched is not None:
        conditions.append(
            {"type": "Launched", "status": launched[0], "reason": launched[1], "lastTransitionTime": stamp(created)}
        )
    if ready_after is not None:
        at = stamp(created + ready_after)
        conditions = [
            {"type": kind, "status": "True", "reason": kind, "lastTransitionTime": at}
            for kind in ("Launched", "Registered", "Initialized", "Ready")
        ]
    labels = {"karpenter.sh/nodepool": pool}
    if instance_type:
        labels["node.kubernetes.io/instance-type"] = instance_type
    metadata: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{name}",
        "labels": labels,
        "creationTimestamp": stamp(created),
    }
    if deleted_at is not None:
        metadata["deletionTimestamp"] = stamp(deleted_at)
    status: dict[str, Any] = {"conditions": conditions}
    if capacity:
        status["capacity"] = capacity
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": metadata,
        "spec": nodeclaim_spec(pool),
        "status": status,
    }


class Feed:
    """A launch record fed as the NodeClaim watch feeds it."""

    def __init__(self, now: datetime = T0, settings: LaunchSettings | None = None) -> None:
        self.now = now
        self.history = LeadTimeHistory()
        self.record = LaunchRecord(self.history, settings, clock=lambda: self.now)
        self.cache = WatchCache("nodeclaims")

    def send(self, kind: str, obj: dict[str, Any]) -> None:
        event = WatchEvent(kind, obj)
        self.cache.apply(event)
        self.record.on_change(self.cache, event)

    def fail_insufficient(self, name: str, created: datetime, pool: str = "a") -> None:
        """Karpenter's launch on InsufficientCapacity: the NodeClaim is deleted, never launched."""
        self.send("ADDED", claim(name, created, pool=pool))
        self.send("DELETED", claim(name, created, pool=pool, deleted_at=created + timedelta(seconds=20)))


def test_deleted_before_launch_is_insufficient_capacity_and_a_stuck_one_a_launch_timeout():
    created = T0
    assert gone_reason(read_claim(claim("n", created)), created + timedelta(seconds=30)) == "InsufficientCapacity"
    assert gone_reason(read_claim(claim("n", created)), created + timedelta(minutes=6)) == "LaunchTimeout"
    failed = read_claim(claim("n", created, launched=("Unknown", "LaunchFailed")))
    assert gone_reason(failed, created + timedelta(minutes=6)) == "LaunchFailed"
    assert gone_reason(read_claim(claim("n", created, ready_after=timedelta(minutes=3))), created) is None


def test_failures_count_per_reason_and_instance_type_once_each():
    feed = Feed()
    feed.fail_insufficient("a-1", T0)
    feed.send("DELETED", claim("a-1", T0, deleted_at=T0 + timedelta(seconds=20)))  # a repeated event
    feed.send("ADDED", claim("a-2", T0, launched=("False", "InsufficientCapacity")))
    pool = feed.record.pools["a"]
    assert pool.failures_by_reason() == {"InsufficientCapacity": 2}
    assert pool.failures[("p4d.24xlarge", "InsufficientCapacity")] == 2


def test_the_lead_time_of_a_need_runs_from_its_first_nodeclaim_across_retries():
    feed = Feed()
    feed.fail_insufficient("a-1", T0)
    feed.fail_insufficient("a-2", T0 + timedelta(minutes=1))
    feed.send("ADDED", claim("a-3", T0 + timedelta(minutes=2), ready_after=timedelta(minutes=4)))
    (sample,) = feed.history.samples("a")
    assert sample.seconds == 6 * 60  # from a-1's creation until a-3 was Ready, not a-3's own 4 minutes
    last = feed.record.pools["a"].recent[-1]
    assert (last.name, last.retries, last.seconds) == ("a-3", 2, 360.0)
    # The need is over: the next launch stands alone.
    feed.send("ADDED", claim("a-4", T0 + timedelta(hours=1), ready_after=timedelta(minutes=3)))
    assert [s.seconds for s in feed.history.samples("a")] == [360.0, 180.0]


def test_a_nodeclaim_long_after_the_last_failure_starts_a_new_need():
    feed = Feed()
    feed.fail_insufficient("a-1", T0)
    feed.send("ADDED", claim("a-2", T0 + timedelta(hours=2), ready_after=timedelta(minutes=4)))
    assert [s.seconds for s in feed.history.samples("a")] == [240.0]


def test_slow_launches_are_counted():
    feed = Feed(settings=LaunchSettings(slow_after=timedelta(minutes=10)))
    feed.send("ADDED", claim("a-1", T0, ready_after=timedelta(minutes=4)))
    feed.send("ADDED", claim("a-2", T0, ready_after=timedelta(minutes=12)))
    pool = feed.record.pools["a"]
    assert (pool.ready["p4d.24xlarge"], pool.slow["p4d.24xlarge"]) == (2, 1)


def test_a_pool_keeps_failing_until_a_launch_succeeds_or_time_passes():
    feed = Feed(settings=LaunchSettings(failing_after=3, failing_for=timedelta(minutes=30)))
    for minute in range(2):
        feed.fail_insufficient(f"a-{minute}", T0 + timedelta(minutes=minute))
    assert feed.record.failing("a", T0 + timedelta(minutes=3)) is None  # two are not yet "keeps failing"
    feed.fail_insufficient("a-2", T0 + timedelta(minutes=2))
    why = feed.record.failing("a", T0 + timedelta(minutes=3))
    assert why == "its last 3 launches failed (InsufficientCapacity x3), the latest at 08:02:20Z"
    assert feed.record.failing("a", T0 + timedelta(hours=1)) is None
    feed.send("ADDED", claim("a-3", T0 + timedelta(minutes=3), ready_after=timedelta(minutes=4)))
    assert feed.record.failing("a", T0 + timedelta(minutes=8)) is None


def test_nodeclaims_deleted_while_the_watch_was_down_are_found_at_the_relist():
    feed = Feed(now=T0 + timedelta(seconds=40))
    feed.send("ADDED", claim("a-1", T0))
    feed.cache.replace([], "99")
    feed.record.on_change(feed.cache, None)
    assert feed.record.pools["a"].failures_by_reason() == {"InsufficientCapacity": 1}


def test_node_sizes_come_from_status_capacity():
    feed = Feed()
    capacity = {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1152Gi"}
    feed.send("ADDED", claim("a-1", T0, ready_after=timedelta(minutes=3), capacity=capacity))
    (size,) = feed.record.node_sizes("a")
    assert (size["nvidia.com/gpu"], size["cpu"]) == (8.0, 96.0)


@pytest.mark.parametrize(
    "broken",
    [
        {"metadata": {"name": "bad-time", "creationTimestamp": "yesterday"}},
        {"metadata": {"name": "bad-cond", "creationTimestamp": "2026-11-20T08:00:00Z"}, "status": {"conditions": 7}},
        {
            "metadata": {"name": "bad-transition", "creationTimestamp": "2026-11-20T08:00:00Z"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "soon"}]},
        },
        {
            "metadata": {"name": "bad-capacity", "creationTimestamp": "2026-11-20T08:00:00Z"},
            "status": {"capacity": {"cpu": "lots"}},
        },
    ],
)
def test_a_malformed_nodeclaim_is_logged_by_name_and_the_rest_carry_on(broken, caplog):
    feed = Feed()
    with caplog.at_level(logging.ERROR, logger="adapters.kubernetes.launch_record"):
        feed.send("ADDED", broken)
    assert broken["metadata"]["name"] in caplog.text
    feed.send("ADDED", claim("a-1", T0, ready_after=timedelta(minutes=3)))
    assert [s.seconds for s in feed.history.samples("a")] == [180.0]
