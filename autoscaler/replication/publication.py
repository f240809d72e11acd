"""Forecasts published as GPUForecast objects and served from them (docs/high-availability.md).

- ``Publisher``: after each refresh, writes the shards whose content changed (``forecast_objects``
  says what goes in); a failure is logged and counted, never raised into the refresh.
- ``PublishedView``: every replica watches the objects and swaps a snapshot built from them into the
  provider the APIs read, as the refresher does with its own.
- ``open_publication``: both, plus the first read a new pod restores from (values and pacing) before
  its first refresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio.client import ApiClient

from adapters.kubernetes.client import KubeError
from adapters.kubernetes.gpuforecasts import ForecastWriter, gpuforecast_resource
from adapters.kubernetes.nodeclaims import LeadTimeSample
from adapters.kubernetes.watch import WatchCache, WatchEvent, WatchGroup, WatchSettings, list_all
from adapters.types import Clock
from autoscaler.config.publication_settings import PublicationSettings
from autoscaler.replication.forecast_objects import (
    MAX_OBJECT_BYTES,
    Choices,
    Pacing,
    Published,
    object_bytes,
    object_name,
    read_objects,
    rfc3339,
    shard_statuses,
)
from autoscaler.serving.provider import MetricInfo, Snapshot, SnapshotProvider
from autoscaler.targets.plans import MetricPlan

log = logging.getLogger(__name__)


@dataclass
class PublishStats:
    """What the publisher did, for /metrics and the logs."""

    writes: int = 0  # objects written
    unchanged: int = 0  # objects left alone: their content was already published
    failures: int = 0  # objects that could not be written (API errors, conflicts, too large)
    last_error: str | None = None


class Publisher:
    """Writes what this replica serves to one GPUForecast object per shard, only where it changed."""

    def __init__(
        self, writer: ForecastWriter, *, shards: int, signal_of: Mapping[str, str], clock: Clock | None = None
    ) -> None:
        self.writer = writer
        self.shards = shards
        self.signal_of = dict(signal_of)
        self.clock = clock or (lambda: datetime.now(UTC))
        self.stats = PublishStats()
        # shard -> the status last written (without publishedAt): equal content is not written again.
        self._written: dict[int, dict[str, Any]] = {}
        self._lock = asyncio.Lock()  # one publication at a time, in refresh order
        self._pending: set[asyncio.Task[None]] = set()  # a task nobody references may be collected
        # With shards owned through Leases: whether this replica owns a shard now (None: it owns all).
        self.owns: Callable[[int], bool] | None = None

    def seed(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """Know what is published already, so that a restart does not rewrite unchanged shards."""
        for obj in objects:
            spec, status = obj.get("spec") or {}, dict(obj.get("status") or {})
            if spec.get("shards") == self.shards and isinstance(spec.get("shard"), int):
                status.pop("publishedAt", None)
                self._written[spec["shard"]] = status

    def publish_soon(
        self,
        snapshot: Snapshot,
        pacing: Pacing,
        samples: Sequence[LeadTimeSample] = (),
        only: int | None = None,
        choices: Choices | None = None,
    ) -> None:
        """Publish without making the caller (the refresh) wait for the API server or fail with it;
        with ``only``, that shard alone (its series were just fitted, the others' not yet)."""
        # The shards owned when the snapshot was made: one taken over since may lack its restored values.
        owned = None if self.owns is None else frozenset(filter(self.owns, range(self.shards)))
        if only is not None:
            owned = (owned if owned is not None else frozenset(range(self.shards))) & {only}
        publishing = self._publish_quietly(snapshot, pacing, samples, owned, choices)
        task = asyncio.create_task(publishing, name="publish-gpuforecasts")
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _publish_quietly(
        self,
        snapshot: Snapshot,
        pacing: Pacing,
        samples: Sequence[LeadTimeSample],
        owned: frozenset[int] | None,
        choices: Choices | None = None,
    ) -> None:
        try:
            await self.publish(snapshot, pacing, samples, owned, choices)
        except Exception as error:  # a bug here must not surface as an unretrieved task error
            self._failed(f"publishing failed: {type(error).__name__}: {error}")
            log.exception("publishing the forecasts failed")

    async def aclose(self) -> None:
        """Stop publications under way (at shutdown, before the API client closes)."""
        for task in list(self._pending):
            task.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)

    async def publish(
        self,
        snapshot: Snapshot,
        pacing: Pacing,
        samples: Sequence[LeadTimeSample] = (),
        owned: frozenset[int] | None = None,
        choices: Choices | None = None,
    ) -> None:
        """Write the changed shards; with ``owned``, only those (and only while ``owns`` still says so)."""
        async with self._lock:
            # Off the event loop: at 1,000 series this takes about 0.1 s the API would otherwise wait.
            statuses = await asyncio.to_thread(
                shard_statuses, snapshot, self.signal_of, pacing, self.shards, samples, owned, choices
            )
            for shard, status in statuses.items():
                if owned is not None and (shard not in owned or self.owns is None or not self.owns(shard)):
                    continue  # another replica's shard (or lost since): its owner writes it
                if self._written.get(shard) == status:
                    self.stats.unchanged += 1
                    continue
                await self._write(shard, status)

    async def _write(self, shard: int, status: dict[str, Any]) -> None:
        name = object_name(shard, self.shards)
        size = object_bytes(status)
        if size > MAX_OBJECT_BYTES:
            self._failed(
                f"GPUForecast {name} would hold {size} bytes ({status['seriesCount']} series), over "
                f"{MAX_OBJECT_BYTES}: raise publication.shards"
            )
            return
        try:
            await self.writer.write(
                name, {"shard": shard, "shards": self.shards}, {**status, "publishedAt": rfc3339(self.clock())}
            )
        except KubeError as error:
            self._failed(f"GPUForecast {name} not published: {error}")
            return
        self._written[shard] = status
        self.stats.writes += 1

    def _failed(self, reason: str) -> None:
        self.stats.failures += 1
        self.stats.last_error = reason
        log.warning("%s; serving goes on", reason)


class PublishedView:
    """The snapshot the published objects make, swapped into ``provider`` whenever they change."""

    def __init__(
        self,
        provider: SnapshotProvider,
        *,
        metrics: Sequence[MetricInfo],
        signal_of: Mapping[str, str],
        shards: int,
        clock: Clock | None = None,
    ) -> None:
        self.provider = provider
        self.metrics = {info.name: info for info in metrics}
        self.signal_of = dict(signal_of)
        self.shards = shards
        self.clock = clock or (lambda: datetime.now(UTC))
        self._reported: set[str] = set()  # each problem is logged once, not at every event
        # namespace/name -> (resourceVersion, what it says): an event re-reads only the object it changed.
        self._parts: dict[str, tuple[str, Published]] = {}
        self._objects: Mapping[str, Mapping[str, Any]] = {}  # namespace/name -> object, as last watched
        # Called with each snapshot swapped in (a reading replica's readiness).
        self.on_served: Callable[[Snapshot], None] | None = None

    def read(self, objects: Iterable[Mapping[str, Any]]) -> Published:
        return self._reported_once(read_objects(objects, self.metrics, self.signal_of, self.shards))

    def _reported_once(self, published: Published) -> Published:
        for problem in published.problems:
            if problem not in self._reported:
                log.warning("ignoring %s", problem)
        self._reported = set(published.problems)
        return published

    def on_change(self, cache: WatchCache, event: WatchEvent | None) -> None:
        """A ``WatchGroup`` callback: rebuild from every object of the cache and swap (objects whose
        resourceVersion did not change are not parsed again)."""
        parts: dict[str, tuple[str, Published]] = {}
        for key, obj in cache.objects.items():
            version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
            known = self._parts.get(key)
            if known is None or known[0] != version or not version:
                known = (version, read_objects([obj], self.metrics, self.signal_of, self.shards))
            parts[key] = known
        self._parts, self._objects = parts, dict(cache.objects)
        self.serve(self._reported_once(Published.merged(part for _, part in parts.values())))

    def shard(self, namespace: str, shard: int) -> tuple[Mapping[str, Any], Published] | None:
        """One shard's object as last watched and what it says (a shard taken over restores from it)."""
        key = f"{namespace}/{object_name(shard, self.shards)}"
        obj, part = self._objects.get(key), self._parts.get(key)
        return (obj, part[1]) if obj is not None and part is not None else None

    def serve(self, published: Published) -> None:
        snapshot = published.snapshot(self.metrics, self.clock())
        self.provider.swap(snapshot)
        if self.on_served is not None:
            self.on_served(snapshot)


def signals_of(plans: Iterable[MetricPlan]) -> dict[str, str]:
    return {plan.metric: plan.signal for plan in plans}


@dataclass(frozen=True)
class Publication:
    """What ``open_publication`` starts: the publisher, the view and what was published before."""

    publisher: Publisher
    view: PublishedView
    # The objects as this pod found them at start (None if the read failed): values and pacing to
    # restore before the first refresh.
    initial: Published | None


@contextlib.asynccontextmanager
async def open_publication(
    settings: PublicationSettings,
    kube: ApiClient,
    *,
    served: SnapshotProvider,
    metrics: Sequence[MetricInfo],
    plans: Sequence[MetricPlan],
    watch_settings: WatchSettings,
    on_served: Callable[[Snapshot], None] | None = None,
) -> AsyncIterator[Publication]:
    """Read what is published, then watch it; with ``serve_from: objects`` the view feeds ``served``
    (and calls ``on_served`` with each snapshot it swaps in)."""
    signal_of = signals_of(plans)
    publisher = Publisher(
        ForecastWriter(kube, settings.namespace, attempts=settings.write_attempts),
        shards=settings.shards,
        signal_of=signal_of,
    )
    view = PublishedView(served, metrics=metrics, signal_of=signal_of, shards=settings.shards)
    view.on_served = on_served
    resource = gpuforecast_resource(kube, settings.namespace)
    initial: Published | None = None
    try:
        objects, _ = await list_all(resource, watch_settings)
    except KubeError as error:
        log.warning("could not read the published GPUForecasts (%s); starting without them", error)
    else:
        initial = view.read(objects)
        publisher.seed(objects)
        if settings.serve_from == "objects":  # at once, not after the watch's own first list
            view.serve(initial)
    async with WatchGroup(watch_settings) as group:
        if settings.serve_from == "objects":
            group.start(resource, view.on_change)
        try:
            yield Publication(publisher, view, initial)
        finally:
            await publisher.aclose()
