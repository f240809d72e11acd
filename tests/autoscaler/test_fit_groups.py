"""The order a refresh fits its series in and the groups it serves as they finish
(autoscaler/refresh/fit_groups.py)."""

from __future__ import annotations

import asyncio

import pytest

from autoscaler.refresh import fit_groups
from autoscaler.refresh.fitting import SeriesKey
from autoscaler.serving.provenance import WorkKind


def key(name: str) -> SeriesKey:
    return ("gpus", (("pool", name),))


GROUP = {"a": 0, "b": 1, "c": 2, "d": 3, "e": 0, "f": 1, "g": 3}


def describe(item: tuple[str, WorkKind]) -> tuple[SeriesKey, WorkKind]:
    return key(item[0]), item[1]


def group_of(series: SeriesKey) -> int:
    return GROUP[dict(series[1])["pool"]]


def test_updates_first_then_fewest_fits_then_selections_ties_by_group():
    items: list[tuple[str, WorkKind]] = [
        ("a", "select"), ("b", "refit"), ("c", "update"), ("d", "refit"),
        ("e", "update"), ("f", "refit"), ("g", "update"),
    ]  # fmt: skip
    groups = fit_groups.in_groups(items, describe, group_of)
    assert groups == [
        (2, [("c", "update")]),  # only updates
        (3, [("d", "refit"), ("g", "update")]),  # one refit
        (1, [("b", "refit"), ("f", "refit")]),  # two refits
        (0, [("a", "select"), ("e", "update")]),  # a selection
    ]


def test_among_groups_of_equal_cost_those_serving_restored_values_go_first():
    """A shard taken over with standby models is all updates: it goes before this replica's own
    shards' updates (their values are one refresh old, its are a Lease's and more); a refit still
    never goes before an update."""
    items: list[tuple[str, WorkKind]] = [("a", "update"), ("b", "update"), ("c", "update"), ("d", "refit")]
    stale = {key("c"), key("d")}
    groups = fit_groups.in_groups(items, describe, group_of, stale.__contains__)
    assert groups == [(2, [("c", "update")]), (0, [("a", "update")]), (1, [("b", "update")]), (3, [("d", "refit")])]
    assert fit_groups.in_groups(items, describe, group_of) == [
        (0, [("a", "update")]), (1, [("b", "update")]), (2, [("c", "update")]), (3, [("d", "refit")]),
    ]  # fmt: skip


def test_without_groups_everything_is_one_group_in_its_own_order():
    items: list[tuple[str, WorkKind]] = [("d", "select"), ("a", "update"), ("c", "refit")]
    assert fit_groups.in_groups(items, describe, None) == [(0, items)]
    assert fit_groups.in_groups([], describe, None) == []
    assert fit_groups.in_groups([], describe, group_of) == []


async def test_each_group_is_served_once_it_and_the_groups_before_it_are_done():
    release = {name: asyncio.Event() for name in "abc"}
    served: list[tuple[int, list[str], bool]] = []

    async def run(name: str) -> str:
        await release[name].wait()
        return name.upper()

    groups = [(5, ["a"]), (1, ["b", "c"])]
    running = asyncio.create_task(
        fit_groups.run_in_groups(groups, run, lambda group, outcomes, last: served.append((group, outcomes, last)))
    )
    release["b"].set()
    release["c"].set()
    await asyncio.sleep(0)
    assert served == []  # the second group is done, but not the first
    release["a"].set()
    await running
    assert served == [(5, ["A"], False), (1, ["B", "C"], True)]


async def test_a_failing_run_cancels_the_others_and_raises():
    cancelled: list[str] = []
    served: list[int] = []

    async def run(name: str) -> str:
        if name == "boom":
            raise RuntimeError("worker gone")
        if name == "later-boom":
            raise ValueError("not retrieved otherwise")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(name)
            raise
        return name

    groups = [(0, ["boom", "waits"]), (1, ["later-boom", "also-waits"])]
    with pytest.raises(RuntimeError, match="worker gone"):
        await fit_groups.run_in_groups(groups, run, lambda group, outcomes, last: served.append(group))
    assert served == []
    assert sorted(cancelled) == ["also-waits", "waits"]
