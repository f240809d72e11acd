"""A replica fits, publishes and acts only on the shards whose Lease it holds (docs/high-availability.md).

``open_sharding`` runs ``adapters.kubernetes.shard_leases.ShardOwnership`` and ties it to the refresher (it fits
only the series of owned shards), the publisher (it writes only owned shards) and, through
``Sharding.owns_series``, to whatever else acts. A shard taken over is first restored from its
published object (values, step-down pacing, lead-time samples, the models its owner selected), then
refreshed at once: its series forecast from this replica's standby models of them
(``autoscaler.refresh.standby``), or are refitted with the published models where it holds none (never
selected again), and each shard is published as soon as its series are done, not when the whole
refresh ends. With standby models, ``Sharding.warming_problem`` keeps a replica that does not hold
them yet out of readiness while a warm replica is live.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from functools import partial

from kubernetes_asyncio.client import ApiClient

from adapters.kubernetes.leases import LeaseTiming, own_identity
from adapters.kubernetes.nodeclaims import LeadTimeHistory
from adapters.kubernetes.shard_leases import ShardOwnership
from autoscaler.config.publication_settings import PublicationSettings
from autoscaler.refresh.fitting import SeriesKey
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.standby import Standby
from autoscaler.replication.forecast_objects import shard_of
from autoscaler.replication.publication import Publication
from autoscaler.serving.provider import Snapshot

log = logging.getLogger(__name__)


@dataclass
class Sharding:
    ownership: ShardOwnership
    signal_of: Mapping[str, str]  # served metric -> its signal (a served series' shard is its signal's)
    standby: Standby | None = None  # the other shards' models kept fitted here (None: not kept)

    def owns_key(self, key: SeriesKey) -> bool:
        return self.ownership.owns(shard_of(key, self.ownership.shards))

    def warming_problem(self) -> str | None:
        """Why this replica should not be ready yet (a readiness gate), or None: it is warming while
        a warm replica is live. A rolling update then waits for it to hold its standby models before
        stopping an old replica, whose shards a cold replica would otherwise take. Alone, it is
        needed: it is ready (and takes the shards cold)."""
        standby, ownership = self.standby, self.ownership
        if standby is None or standby.ready() or ownership.live <= 1:
            return None
        due = "not yet counted" if standby.due_count is None else f"{standby.due_count} to go"
        return f"warming: fitting the other replicas' models before taking a share of the shards ({due})"

    def owns_series(self, metric: str, labels: Mapping[str, str]) -> bool:
        """Whether this replica owns the shard of a served series (e.g. the one sizing a buffer)."""
        signal = self.signal_of.get(metric)
        return signal is not None and self.owns_key((signal, tuple(sorted(labels.items()))))


def published_models(publication: Publication, ownership: ShardOwnership, namespace: str) -> dict[SeriesKey, str]:
    """The model published for each series of a shard another replica owns (what ``Standby`` fits)."""
    models: dict[SeriesKey, str] = {}
    signal_of = publication.publisher.signal_of
    for shard in range(ownership.shards):
        found = None if ownership.owns(shard) else publication.view.shard(namespace, shard)
        for metric, series_list in found[1].series.items() if found is not None else ():
            signal = signal_of.get(metric)
            if signal is None:
                continue
            for series in series_list:
                if series.published is not None and series.published.model:
                    models[(signal, tuple(sorted(series.labels.items())))] = series.published.model
    return models


def take_over(
    refresher: Refresher, publication: Publication, lead_times: LeadTimeHistory | None, namespace: str, shard: int
) -> None:
    """Continue a shard from what its previous owner published: its values (served until this
    replica's own forecast replaces them), its step-down pacing, its targets' choices and its
    lead-time samples."""
    found = publication.view.shard(namespace, shard)
    if found is not None:
        obj, published = found
        publication.publisher.seed([obj])  # what is published already is not written again
        refresher.restore(published.snapshot(refresher.metrics, refresher.clock()))
        refresher.restore_pacing(published.pacing)
        refresher.levels.restore(list(published.choices.values()))
        if lead_times is not None:
            lead_times.restore(published.lead_time_samples)
        log.info("shard %d: continuing from its published object %s", shard, obj["metadata"]["name"])
    refresher.keep_owned()  # the restore brought the other shards' values too
    # Its series are fitted (refits of the published models) at once, not at the next interval.
    refresher.wake()


@contextlib.asynccontextmanager
async def open_sharding(
    settings: PublicationSettings,
    kube: ApiClient,
    *,
    refresher: Refresher,
    publication: Publication,
    lead_times: LeadTimeHistory | None,
    identity: str | None = None,
) -> AsyncIterator[Sharding]:
    """Own shards for as long as the block runs; hand them back at its end."""
    lease = settings.sharding
    timing = LeaseTiming(
        lease.lease_duration.total_seconds(), lease.renew_deadline.total_seconds(), lease.retry_period.total_seconds()
    )

    def changed(shard: int, owned: bool) -> None:
        if owned:
            take_over(refresher, publication, lead_times, settings.namespace, shard)
        else:
            refresher.keep_owned()

    # Nothing published at start (a deployment's first start): nothing to hold, so no warm-up.
    nothing_published = publication.initial is not None and not any(publication.initial.series.values())
    standby = (
        Standby(
            refresher, lambda: published_models(publication, ownership, settings.namespace), ready=nothing_published
        )
        if lease.standby_models
        else None
    )
    refresher.keeps_standby = standby is not None
    ownership = ShardOwnership(
        kube, settings.namespace, prefix=lease.lease_prefix, shards=settings.shards,
        identity=identity or own_identity(), timing=timing, on_change=changed,
        forget_members_after_s=lease.forget_members_after.total_seconds(),
        ready=standby.ready if standby is not None else None,
    )  # fmt: skip
    sharding = Sharding(ownership, publication.publisher.signal_of, standby)
    refresher.owns = sharding.owns_key
    refresher.group_of = partial(shard_of, shards=settings.shards)

    def publish_shard(snapshot: Snapshot, shard: int) -> None:
        """A shard whose series are all fitted is published before the refresh ends (``fit_groups``)."""
        samples = lead_times.samples() if lead_times is not None else ()
        choices = refresher.levels.choices()
        publication.publisher.publish_soon(snapshot, refresher.pacing, samples, only=shard, choices=choices)

    refresher.on_group_done = publish_shard
    publication.publisher.owns = ownership.owns
    refresher.keep_owned()  # owning nothing yet: values restored at start-up are served from the objects
    async with ownership.running(), _running(standby):
        # The first round takes this replica's share before its first refresh (bounded: the API may be down).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ownership.attempted.wait(), 2 * timing.retry_period_s)
        yield sharding


@contextlib.asynccontextmanager
async def _running(standby: Standby | None) -> AsyncIterator[None]:
    task = asyncio.create_task(standby.run(), name="standby-models") if standby is not None else None
    try:
        yield
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
