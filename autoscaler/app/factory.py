"""The composition root: builds both aiohttp apps, their shared state and the refresher.

Every route is mounted here (``build_api_app`` for the secure port, ``build_ops_app`` for the plain
one); the web modules only provide handlers and ``add_*_routes`` functions. Nothing starts on import.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from aiohttp import web
from kubernetes_asyncio.client import ApiClient

from adapters.kubernetes.nodeclaims import LeadTimeSample
from adapters.types import Clock
from autoscaler.actuation.writer import BufferActuator
from autoscaler.app import scoring
from autoscaler.app.restoring import restore_published, restore_saved, save_targets_soon, serving_published
from autoscaler.config.settings import Settings
from autoscaler.refresh.kube_inputs import watch_settings
from autoscaler.refresh.pipeline import Pipeline
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import default_workers, process_pools
from autoscaler.replication import lead_time_store
from autoscaler.replication.publication import Publication, Publisher, open_publication
from autoscaler.replication.shards import Sharding, open_sharding
from autoscaler.serving import persistence
from autoscaler.serving.provider import MetricsProvider, Snapshot, SnapshotProvider, empty_snapshot
from autoscaler.simulation.replay import replay_levels
from autoscaler.targets.plans import RefreshStats
from autoscaler.web.api.external_metrics import add_external_metrics_routes
from autoscaler.web.ops import queued_views
from autoscaler.web.ops.inspection import add_inspection_routes
from autoscaler.web.ops.launch_metrics import LaunchMetrics
from autoscaler.web.ops.page import add_page_routes
from autoscaler.web.ops.shard_metrics import ShardMetrics
from autoscaler.web.security.auth import (
    AccessControl,
)
from autoscaler.web.shared.keys import (
    ACCESS,
    BUFFERS,
    CLOCK,
    LAUNCHES,
    METRICS_PROVIDER,
    PROVIDER,
    READINESS,
    SELF_METRICS,
    SNAPSHOTS,
    UNPLACED,
)
from autoscaler.web.shared.middleware import authenticate, authenticate_plain_port, errors_and_metrics
from autoscaler.web.shared.probes import add_metrics_route, add_probe_routes
from autoscaler.web.shared.readiness import Readiness, metric_states
from autoscaler.web.shared.self_metrics import SelfMetrics

log = logging.getLogger(__name__)

REFRESHER = web.AppKey("refresher", Refresher)
PUBLISHER = web.AppKey("publisher", Publisher)
SHARDING = web.AppKey("sharding", Sharding)


def buffer_actuator(settings: Settings, kube: ApiClient | None, identity: str | None = None) -> BufferActuator | None:
    """The CapacityBuffer writer the settings ask for (compute-only without a cluster: the demo's dry run);
    ``identity`` names this replica in its Lease (None: a new one)."""
    buffers = settings.actuators.capacity_buffers
    if buffers is None:
        return None
    sharded = settings.publication.enabled and settings.publication.sharding.enabled
    return BufferActuator(buffers, kube, watch=watch_settings(settings.kubernetes), sharded=sharded, identity=identity)


def after_refresh(
    snapshot: Snapshot,
    readiness: Readiness,
    refresher: Refresher,
    pipeline: Pipeline,
    settings: Settings,
    actuator: BufferActuator | None = None,
    publication: Publication | None = None,
) -> None:
    if actuator is not None:
        actuator.on_snapshot(snapshot)
    update_readiness(readiness, refresher, pipeline, actuator)
    # Off the event loop: with thousands of series the file is a few MB.
    path = settings.state_dir / persistence.FILE_NAME
    asyncio.get_running_loop().run_in_executor(None, _save_quietly, path, snapshot)
    samples = pipeline.lead_times.samples() if pipeline.lead_times is not None else []
    if pipeline.lead_times is not None:  # kept across restarts, publication or not
        samples_path = settings.state_dir / lead_time_store.FILE_NAME
        asyncio.get_running_loop().run_in_executor(None, _save_samples_quietly, samples_path, samples)
    if publication is not None and settings.publication.publish:
        publication.publisher.publish_soon(snapshot, refresher.pacing, samples, choices=refresher.levels.choices())
    # The demo's pool is replayed up to the snapshot, then scored.
    demo_pool = pipeline.demo_cluster.observe if pipeline.demo_cluster is not None else None
    scoring.score_soon(pipeline.scorecard, snapshot, demo_pool)
    save_targets_soon(refresher, settings.state_dir)


def _save_samples_quietly(path: Path, samples: Sequence[LeadTimeSample]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lead_time_store.save(path, samples)
    except OSError as error:  # a read-only or full disk must not stop serving
        log.warning("could not save lead-time samples to %s: %s", path, error)


def _save_quietly(path: Path, snapshot: Snapshot) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        persistence.save(path, snapshot)
    except OSError as error:  # a read-only or full disk must not stop serving
        log.warning("could not save served values to %s: %s", path, error)


def update_readiness(
    readiness: Readiness, refresher: Refresher, pipeline: Pipeline, actuator: BufferActuator | None = None
) -> None:
    """/readyz?verbose detail: each signal's last success or its error, and the watches' states.

    The refresher records a fit under its signal's name and a pull under its source's name; one
    source may yield several signals (the demo's yields two), so each served signal gets a line, and
    a pull error of a source without a signal of its name gets its own.
    """
    checks: dict[str, str] = {}
    stats = refresher.stats
    served = {plan.signal for plan in pipeline.plans}
    pulled_only = {source.name for source in pipeline.sources if source.name in stats.last_error} - served
    for name in sorted(served | pulled_only):
        error = stats.last_error.get(name)
        success = stats.last_success.get(name)
        last = f"last success {success:%Y-%m-%dT%H:%M:%SZ}" if success else "no success yet"
        kind = "signal" if name in served else "source"
        checks[f"{kind} {name}"] = f"failing: {error} ({last})" if error else last
    if pipeline.health is not None:
        checks.update(pipeline.health())
    if actuator is not None:
        checks.update(actuator.health())
    readiness.checks = checks


def build_api_app(
    *, provider: MetricsProvider, access: AccessControl, readiness: Readiness, self_metrics: SelfMetrics
) -> web.Application:
    """The secure port: the external metrics API and the probes, behind authentication."""
    app = web.Application(middlewares=[errors_and_metrics, authenticate], client_max_size=64 * 1024)
    app[METRICS_PROVIDER] = provider
    app[ACCESS] = access
    app[READINESS] = readiness
    app[SELF_METRICS] = self_metrics
    add_external_metrics_routes(app)
    add_probe_routes(app)
    return app


def build_ops_app(
    *, provider: SnapshotProvider, readiness: Readiness, self_metrics: SelfMetrics, clock: Clock | None = None
) -> web.Application:
    """The plain-HTTP port: probes, ``/metrics``, the inspection API and the web page (``HTTP_AUTH`` guards it)."""
    app = web.Application(middlewares=[errors_and_metrics, authenticate_plain_port])
    app[METRICS_PROVIDER] = provider
    app[SNAPSHOTS] = provider
    app[READINESS] = readiness
    app[SELF_METRICS] = self_metrics
    app[CLOCK] = clock or (lambda: datetime.now(UTC))
    add_probe_routes(app)
    add_metrics_route(app)
    add_inspection_routes(app)
    add_page_routes(app)
    return app


def create_app(
    settings: Settings,
    *,
    pipeline: Pipeline,
    access: AccessControl,
    provider: SnapshotProvider | None = None,
    readiness: Readiness | None = None,
    self_metrics: SelfMetrics | None = None,
    actuator: BufferActuator | None = None,
    kube: ApiClient | None = None,
    identity: str | None = None,
) -> tuple[web.Application, web.Application]:
    """The composition root: the secure API app and the plain ops app, sharing one provider.

    The API app owns the refresher and the CapacityBuffer writer (started and stopped by its
    ``cleanup_ctx``); with ``settings.publication`` enabled, ``kube`` publishes and watches the
    GPUForecast objects; ``identity`` names this replica in the shard Leases (None: a new one).
    """
    provider = provider or SnapshotProvider(empty_snapshot(pipeline.metrics))
    readiness = readiness or Readiness()
    self_metrics = self_metrics or SelfMetrics()
    self_metrics.watch_snapshots(lambda: provider.snapshot)
    api_app = build_api_app(provider=provider, access=access, readiness=readiness, self_metrics=self_metrics)
    ops_app = build_ops_app(provider=provider, readiness=readiness, self_metrics=self_metrics)
    api_app[PROVIDER] = provider

    def refresh_stats() -> RefreshStats | None:
        refresher = api_app.get(REFRESHER)
        return refresher.stats if refresher is not None else None

    self_metrics.watch_refreshes(refresh_stats)
    readiness.metrics = lambda: metric_states(pipeline.plans, api_app[PROVIDER].snapshot, refresh_stats())
    self_metrics.watch_publication(lambda: api_app.get(PUBLISHER))
    self_metrics.registry.register(ShardMetrics(lambda: api_app.get(SHARDING)))
    scoring.attach(pipeline.scorecard, pipeline.plans, ops_app, self_metrics)
    if pipeline.launches is not None:
        ops_app[LAUNCHES] = launches = pipeline.launches
        self_metrics.registry.register(LaunchMetrics(lambda: launches))
    queued_views.attach(pipeline.queued_workloads, ops_app, self_metrics)  # Kueue's waiting GPUs, if watched
    if pipeline.unplaced is not None:
        self_metrics.watch_unplaced(pipeline.unplaced)
        ops_app[UNPLACED] = pipeline.unplaced
    if actuator is not None:
        ops_app[BUFFERS] = actuator
        self_metrics.watch_buffers(lambda: tuple(actuator.states.values()))
        api_app.cleanup_ctx.append(partial(_actuator_ctx, actuator, readiness))
    if pipeline.sources:
        api_app.cleanup_ctx.append(
            partial(_refresher_ctx, settings, pipeline, provider, readiness, actuator, kube, identity)
        )
    else:
        readiness.ready, readiness.reason = True, "no signals configured: nothing to forecast"
    return api_app, ops_app


async def _actuator_ctx(actuator: BufferActuator, readiness: Readiness, app: web.Application) -> AsyncIterator[None]:
    actuator.on_state = lambda: readiness.checks.update(actuator.health())
    actuator.on_state()
    async with actuator.running():
        yield


async def _refresher_ctx(
    settings: Settings,
    pipeline: Pipeline,
    provider: SnapshotProvider,
    readiness: Readiness,
    actuator: BufferActuator | None,
    kube: ApiClient | None,
    identity: str | None,
    app: web.Application,
) -> AsyncIterator[None]:
    """Start the refresher (after restoring saved or published values) with the app; stop it after."""
    async with contextlib.AsyncExitStack() as stack:
        publication = None
        if settings.publication.enabled and kube is not None:
            # A reading replica is ready once the objects give it something to serve; so is a sharded one
            # (owning no shard, it may never make a forecast of its own).
            reading = not settings.publication.publish
            sharded = settings.publication.sharding.enabled
            publication = await stack.enter_async_context(
                open_publication(
                    settings.publication, kube, served=provider, metrics=pipeline.metrics, plans=pipeline.plans,
                    watch_settings=watch_settings(settings.kubernetes),
                    on_served=partial(serving_published, readiness) if reading or sharded else None,
                )
            )  # fmt: skip
            if reading:  # it neither pulls nor fits: what it serves comes from the publishing replica
                yield
                return
        from_objects = publication is not None and settings.publication.serve_from == "objects"
        # Serving from the objects, the refresher's own snapshot only feeds the publisher.
        local = SnapshotProvider(empty_snapshot(pipeline.metrics)) if from_objects else provider
        refresher = Refresher(
            provider=local,
            # Targets choose their level on the simulator's controller model (a layer above the core).
            inputs=dataclasses.replace(pipeline, replay=replay_levels),
            pools=process_pools(settings.forecast.workers or default_workers()),
            on_success=lambda snapshot: after_refresh(
                snapshot, readiness, refresher, pipeline, settings, actuator, publication
            ),
        )
        app[REFRESHER] = refresher
        if publication is not None and settings.publication.publish:
            app[PUBLISHER] = publication.publisher
        if publication is not None and publication.initial is not None:
            restore_published(refresher, readiness, pipeline, publication.initial)
        restore_saved(refresher, readiness, pipeline, settings.state_dir)
        if publication is not None and kube is not None and settings.publication.sharding.enabled:
            app[SHARDING] = await stack.enter_async_context(
                open_sharding(
                    settings.publication, kube, refresher=refresher, publication=publication,
                    lead_times=pipeline.lead_times, identity=identity,
                )
            )  # fmt: skip
            readiness.gates["shards"] = app[SHARDING].warming_problem
            if actuator is not None:  # a pool's buffer is written by the owner of its sizing series
                actuator.owns_series = app[SHARDING].owns_series
            scoring.follow_shards(pipeline.scorecard, app[SHARDING].owns_series, pipeline.plans)
        async for _ in _running(refresher, readiness):
            yield


async def _running(refresher: Refresher, readiness: Readiness) -> AsyncIterator[None]:
    """Run the refresher while the generator is suspended; stop it and its workers when it resumes."""

    def mark_ready() -> None:
        refresher.pools.lower_priority()  # the first forecast is served: from now on fits yield to the API
        if (served := readiness.forecast_served()) is not None:
            log.info("%s", served)

    task = asyncio.create_task(refresher.run(ready=mark_ready), name="refresher")
    try:
        yield
    finally:
        await _stop(task, refresher)


async def _stop(task: asyncio.Task[None], refresher: Refresher) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    refresher.pools.shutdown()
