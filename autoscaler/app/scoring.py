"""The live scorecard in the serving process: scored after each refresh, saved, exported on /metrics."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from aiohttp import web

from autoscaler.scorecard.live import LiveScorecard
from autoscaler.scorecard.target_status import statuses
from autoscaler.serving.provider import Snapshot
from autoscaler.targets.plans import MetricPlan
from autoscaler.web.ops.queued_metrics import KueueWaitMetrics
from autoscaler.web.ops.scorecard_metrics import ScorecardMetrics
from autoscaler.web.ops.target_metrics import TargetMetrics
from autoscaler.web.shared.keys import CLOCK, SCORECARD, SNAPSHOTS
from autoscaler.web.shared.self_metrics import SelfMetrics

log = logging.getLogger(__name__)

_SCORING: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to tasks


def score_soon(
    scorecard: LiveScorecard | None, snapshot: Snapshot, before: Callable[[Snapshot], None] | None = None
) -> None:
    """Score the snapshot's moment in a task of its own; ``before`` (the demo's replayed pool) runs
    first, off the event loop."""
    if scorecard is None:
        return
    task = asyncio.get_running_loop().create_task(score(scorecard, snapshot, before), name="scorecard")
    _SCORING.add(task)
    task.add_done_callback(_SCORING.discard)


async def score(scorecard: LiveScorecard, snapshot: Snapshot, before: Callable[[Snapshot], None] | None = None) -> None:
    """One sample of the live scorecard at the refresh's moment, then saved (off the event loop)."""
    loop = asyncio.get_running_loop()
    try:
        if before is not None:  # milliseconds of simulation: not on the loop the HPAs' API answers on
            await loop.run_in_executor(None, before, snapshot)
        await scorecard.collect(snapshot.created_at, snapshot)
    except Exception:  # a bug in scoring must not touch serving
        log.exception("scorecard: collecting failed at %s", snapshot.created_at)
        return
    document = scorecard.document()
    await loop.run_in_executor(None, scorecard.save, document)


def attach(
    scorecard: LiveScorecard | None, plans: Sequence[MetricPlan], ops_app: web.Application, self_metrics: SelfMetrics
) -> None:
    """Show the scorecard on the ops port's API and page, and on /metrics (with each target observed)."""
    if scorecard is None:
        return
    ops_app[SCORECARD] = scorecard
    quantiles = {plan.metric: plan.quantile for plan in plans if plan.kind == "headroom"}
    self_metrics.registry.register(ScorecardMetrics(scorecard.owned_cards, quantiles))
    snapshots, clock = ops_app[SNAPSHOTS], ops_app[CLOCK]
    self_metrics.registry.register(
        TargetMetrics(lambda: statuses(snapshots.snapshot, scorecard.owned_cards(), clock().timestamp()))
    )
    if scorecard.kueue_histograms is not None:  # no Workload watched: Kueue's own wait histograms
        self_metrics.registry.register(KueueWaitMetrics(lambda: scorecard.cluster_queue_waits))


def follow_shards(
    scorecard: LiveScorecard | None, owns_series: Callable[[str, Mapping[str, str]], bool], plans: Sequence[MetricPlan]
) -> None:
    """With shards, a pool is scored by the owner of its headroom series only."""
    if scorecard is not None:
        scorecard.owns_pool = partial(owns_pool, owns_series, plans)


def owns_pool(owns_series: Callable[[str, Mapping[str, str]], bool], plans: Sequence[MetricPlan], pool: str) -> bool:
    """With shards, a pool is scored by the owner of its (first) headroom series."""
    headroom = next((plan.metric for plan in plans if plan.kind == "headroom"), None)
    return headroom is not None and owns_series(headroom, {"nodepool": pool})
