"""The order a refresh fits its series in, and the groups it serves as soon as they are done.

With shards (docs/high-availability.md) a group is a shard: a refresh publishes each shard once all
its series are fitted, not every shard at the end. After a takeover the new owner refits the series
it took over (0.1 s a series with gbm), and before this its own shards' fresh values and the first
refitted shard both waited for the last refit. Groups that need only forecasts from fitted models
(milliseconds a series) go first, then the others, cheapest first: one shard's refits never hold
back another shard's updates. Among groups of equal cost, those serving values restored from a
shard's object (a takeover: with standby models, its series are updates too) go first.

A worker takes its work first come, first served (``workers.ForecastPools``), so the order the
runs start in is the order they are done in, and each group can be served as soon as it and the
groups before it are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from autoscaler.refresh.fitting import SeriesKey
from autoscaler.serving.provenance import WorkKind

Item = TypeVar("Item")
Outcome = TypeVar("Outcome")

# Relative cost of each kind of work, only to order the groups: a selection backtests every model,
# a refit fits one, an update forecasts from the fitted one.
WORK_COST: dict[WorkKind, int] = {"update": 0, "refit": 1, "select": 2}


def in_groups(
    items: Sequence[Item],
    describe: Callable[[Item], tuple[SeriesKey, WorkKind]],
    group_of: Callable[[SeriesKey], int] | None,
    stale: Callable[[SeriesKey], bool] | None = None,
) -> list[tuple[int, list[Item]]]:
    """``items`` split by ``group_of`` of their key, groups ordered by (costliest work, whether any
    series is ``stale``: those first, number of fits, group); without ``group_of``, all of them in
    one group (0), in their own order. A stale series serves values restored from elsewhere (a
    shard taken over): among groups of equal cost, the oldest values are replaced first."""
    if group_of is None:
        return [(0, list(items))] if items else []
    groups: dict[int, list[Item]] = {}
    costs: dict[int, list[int]] = {}
    stale_groups: set[int] = set()
    for item in items:
        key, work = describe(item)
        group = group_of(key)
        groups.setdefault(group, []).append(item)
        costs.setdefault(group, []).append(WORK_COST[work])
        if stale is not None and stale(key):
            stale_groups.add(group)

    def order(group: int) -> tuple[int, bool, int, int]:
        fits = sum(1 for cost in costs[group] if cost > 0)
        return max(costs[group]), group not in stale_groups, fits, group

    return [(group, groups[group]) for group in sorted(groups, key=order)]


async def run_in_groups(
    groups: Sequence[tuple[int, Sequence[Item]]],
    run: Callable[[Item], Awaitable[Outcome]],
    on_group: Callable[[int, list[Outcome], bool], None],
) -> None:
    """Start ``run`` for every item at once, in order, and call ``on_group(group, outcomes, last)``
    for each group, in order, as soon as it and the groups before it are done.

    A run that raises cancels those not done yet and the error propagates (the refresh fails and
    keeps what it served), as one ``gather`` of them all did.
    """
    tasks = [[asyncio.ensure_future(run(item)) for item in items] for _, items in groups]
    try:
        for position, ((group, _), group_tasks) in enumerate(zip(groups, tasks, strict=True)):
            outcomes = list(await asyncio.gather(*group_tasks))
            on_group(group, outcomes, position == len(groups) - 1)
    finally:
        every_task = [task for group_tasks in tasks for task in group_tasks]
        for task in every_task:
            task.cancel()  # a no-op for those done
        # Retrieves every outcome, so a later group's failure is not reported as never retrieved.
        await asyncio.gather(*every_task, return_exceptions=True)
