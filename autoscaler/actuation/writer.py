"""The CapacityBuffer writer: sizes each pool's buffer from the served values, when this replica may.

After every refresh ``on_snapshot`` computes each pool's desired replicas (``buffer_sizing``); the
writer task then writes those that changed, if this replica holds the Lease and it is not a dry run.
A buffer is read before the first write (and after every 409 Conflict), created with its chunk's
PodTemplate when absent, adopted when present (only ``spec.replicas`` is written), and not written
again until the desired value changes. A watch of the buffers reads back what the cluster's
autoscaler reports (``status.replicas`` and conditions). Design: docs/capacity-buffers.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from kubernetes_asyncio.client import ApiClient

from adapters.kubernetes import capacity_buffers as buffers
from adapters.kubernetes.client import KubeError
from adapters.kubernetes.leases import LeaseElector, LeaseTiming, own_identity
from adapters.kubernetes.watch import WatchCache, WatchEvent, WatchGroup, WatchSettings
from autoscaler.actuation.buffer_sizing import BufferState, Mode, Sizing, desired, reported_status, upstream_sizing
from autoscaler.config.actuator_settings import CapacityBufferSettings
from autoscaler.serving.provider import Snapshot

log = logging.getLogger(__name__)
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# Where the cluster serves no CapacityBuffers, look again this often (the CRD may be installed later).
ABSENT_RECHECK_S = 300.0


def own_namespace() -> str:
    """The namespace this pod runs in: POD_NAMESPACE (downward API), else the service account's."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    with contextlib.suppress(OSError):
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    return "default"


class BufferActuator:
    """Per pool: the desired replicas, what was written and what the autoscaler reports."""

    def __init__(
        self,
        settings: CapacityBufferSettings,
        api: ApiClient | None,
        *,
        watch: WatchSettings | None = None,
        identity: str | None = None,
        clock: Callable[[], datetime] | None = None,
        on_state: Callable[[], None] | None = None,
        sharded: bool = False,
    ) -> None:
        self.settings = settings
        self.states = {pool.pool: BufferState(pool) for pool in settings.pools}
        self.api_version: str | None = None
        self.discovered = False  # discovery has answered (either way)
        self.rounds = 0  # writer rounds done (one per wake-up), so that tests can wait for one
        self._api = api
        self._watch = watch or WatchSettings()
        self._clock = clock or (lambda: datetime.now(UTC))
        self.on_state = on_state or (lambda: None)  # called when what health() says may have changed
        self._wake = asyncio.Event()
        # With shards owned through Leases (autoscaler/replication/shards.py): whether this replica owns the shard
        # of a served series; a pool's buffer is written by the owner of its sizing series only, and
        # the single Lease below is not used. None until ownership runs: nothing is written.
        self.sharded = sharded
        self.owns_series: Callable[[str, Mapping[str, str]], bool] | None = None
        # Pools whose sizing series this replica owned at the last refresh -> that series' labels.
        self._owned: dict[str, Mapping[str, str]] = {}
        lease = settings.lease
        self.elector: LeaseElector | None = None
        if api is not None and not settings.dry_run and not sharded:
            timing = LeaseTiming(
                lease.lease_duration.total_seconds(),
                lease.renew_deadline.total_seconds(),
                lease.retry_period.total_seconds(),
            )
            namespace = lease.namespace or own_namespace()
            self.elector = LeaseElector(
                api, namespace, lease.name, identity or own_identity(), timing, on_change=self._leadership
            )

    # ------------------------------------------------------------------ what it shows

    @property
    def mode(self) -> Mode:
        if self.settings.dry_run:
            return "dry-run"
        if self._api is None or self.api_version is None:
            return "unavailable"
        if self.sharded:
            return "writing" if self._owned else "standby"
        return "writing" if self.elector is not None and self.elector.is_leader else "standby"

    def health(self) -> dict[str, str]:
        """The /readyz?verbose line: where buffers are written, or why not."""
        served = f"autoscaling.x-k8s.io/{self.api_version}" if self.api_version else None
        if self._api is not None and self.discovered and served is None:
            detail = (
                "warning: the cluster serves no CapacityBuffers (autoscaling.x-k8s.io v1beta1 or v1alpha1 "
                "capacitybuffers); nothing is written, everything else is served"
            )
        elif self.settings.dry_run:
            detail = f"dry run: computed and shown, nothing written ({served or 'no cluster'})"
        elif not self.discovered:
            detail = "discovering the CapacityBuffer API version"
        elif self.sharded:
            owned = ", ".join(sorted(self._owned)) or "none"
            detail = f"{served}: written for the pools whose sizing series' shard this replica owns ({owned})"
        elif self.elector is not None and self.elector.is_leader:
            detail = f"writing {served} (this replica holds lease {self.elector.namespace}/{self.elector.name})"
        else:
            holder = self.elector.holder if self.elector is not None else None
            detail = f"standby: lease held by {holder or 'nobody yet'}; {served} written by the holder only"
        errors = [f"{state.pool.pool}: {state.last_error}" for state in self.states.values() if state.last_error]
        if errors and not detail.startswith("warning"):
            detail = "failing: " + "; ".join(errors) + f" ({detail})"
        return {"capacity buffers": detail}

    # ------------------------------------------------------------------ inputs

    def on_snapshot(self, snapshot: Snapshot) -> None:
        """After every refresh: the desired replicas of each pool; the writer task acts on changes."""
        now = self._clock()
        if self.sharded:
            self._owned = {}
            for name, state in self.states.items():
                labels = _sizing_labels(snapshot, state)
                if labels is not None and self.owns_series is not None and self.owns_series(state.pool.metric, labels):
                    self._owned[name] = labels
        for name, state in self.states.items():
            state.desired = desired(snapshot, state.pool, now)
            state.mode = self.mode if not self.sharded or name in self._owned else "standby"
            if self.sharded and name not in self._owned:
                state.written = None  # another replica may write it meanwhile: read it again first
        self._wake.set()

    def _leadership(self, leader: bool) -> None:
        # A new holder reads every buffer again before writing: the previous one may have changed them.
        for state in self.states.values():
            state.written = None
            state.mode = self.mode
        self.on_state()
        if leader:
            self._wake.set()

    def _read_back(self, cache: WatchCache, event: WatchEvent | None) -> None:
        objects: Mapping[str, object] = cache.objects
        namespace = cache.kind.partition("/")[2]
        for state in self.states.values():
            if state.pool.namespace != namespace:
                continue
            obj = objects.get(f"{namespace}/{state.pool.name}")
            state.reported, state.conditions = reported_status(obj) if isinstance(obj, Mapping) else (None, ())
            state.sizing = read_back_sizing(state, obj) if isinstance(obj, Mapping) else None
            if isinstance(event, WatchEvent) and event.type == "DELETED" and obj is None:
                state.written = None  # deleted by someone: read (and re-create) at the next write

    # ------------------------------------------------------------------ running

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Discovery, the read-back watches, the Lease and the writer, for as long as the block runs."""
        task = asyncio.create_task(self._run(), name="capacity-buffers")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        if self._api is None:
            self.discovered = True
            await self._write_loop()
            return
        await self._discover(self._api)
        async with WatchGroup(self._watch) as group, asyncio.TaskGroup() as tasks:
            assert self.api_version is not None  # noqa: S101 - _discover returns only once it is known
            for namespace in sorted({state.pool.namespace for state in self.states.values()}):
                group.start(buffers.buffer_resource(self._api, self.api_version, namespace), self._read_back)
            if self.elector is not None:
                tasks.create_task(self.elector.run(), name="capacity-buffers-lease")
            tasks.create_task(self._write_loop(), name="capacity-buffers-writer")

    async def _discover(self, api: ApiClient) -> None:
        """Wait until the cluster serves CapacityBuffers, saying plainly while it does not."""
        while True:
            try:
                self.api_version = await buffers.served_version(api)
            except KubeError as error:
                log.warning("capacity buffers: API discovery failed: %s", error)
            else:
                self.discovered = True
                for state in self.states.values():
                    state.api_version, state.mode = self.api_version, self.mode
                self.on_state()
                if self.api_version is not None:
                    log.info("capacity buffers: writing autoscaling.x-k8s.io/%s", self.api_version)
                    return
                log.warning(
                    "capacity buffers: the cluster serves no CapacityBuffers (CRD capacitybuffers.autoscaling.x-k8s.io"
                    " absent, or neither v1beta1 nor v1alpha1 served); nothing will be written, looking again in "
                    "%.0f s; the rest of the service is unaffected",
                    ABSENT_RECHECK_S,
                )
            await asyncio.sleep(ABSENT_RECHECK_S)

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self.mode == "writing":
                for name, state in self.states.items():
                    if self.sharded and not self._still_owned(name):
                        continue
                    if state.desired.replicas is not None and state.desired.replicas != state.written:
                        await self._write(state, state.desired.replicas)
                self.on_state()
            self.rounds += 1

    def _still_owned(self, name: str) -> bool:
        """Owned at the last refresh and now (a shard lost since then is not acted on)."""
        labels, owns = self._owned.get(name), self.owns_series
        return labels is not None and owns is not None and owns(self.states[name].pool.metric, labels)

    async def _write(self, state: BufferState, replicas: int) -> None:
        """Bring one buffer to ``replicas``: from a fresh read each attempt, retried after 409 Conflict."""
        api, version = self._api, self.api_version
        if api is None or version is None:  # mode "writing" implies both
            return
        pool = state.pool
        for _ in range(self.settings.conflict_retries + 1):
            try:
                current = await buffers.read_buffer(api, version, pool.namespace, pool.name)
                if current is None:
                    await buffers.ensure_pod_template(api, chunk_template(state))
                    await buffers.create_buffer(api, version, pool.namespace, pool.name, pool.template_name, replicas)
                    log.info("capacity buffer %s/%s created with %d replicas", pool.namespace, pool.name, replicas)
                elif (current.get("spec") or {}).get("replicas") != replicas:
                    revision = str(current["metadata"]["resourceVersion"])
                    await buffers.patch_replicas(api, version, pool.namespace, pool.name, replicas, revision)
                    log.info("capacity buffer %s/%s: spec.replicas %d", pool.namespace, pool.name, replicas)
                else:
                    state.written, state.last_error = replicas, None  # already so: adopted as it is
                    return
            except buffers.BufferConflict as conflict:
                state.last_error = str(conflict)
                continue
            except KubeError as error:
                state.last_error = str(error)
                log.warning("capacity buffer %s/%s: %s", pool.namespace, pool.name, error)
                return
            state.written, state.written_at, state.last_error = replicas, self._clock(), None
            state.writes += 1
            return
        log.warning("capacity buffer %s/%s: still conflicting after retries: %s", pool.namespace, pool.name,
                    state.last_error)  # fmt: skip


def _sizing_labels(snapshot: Snapshot, state: BufferState) -> Mapping[str, str] | None:
    """The labels of the one served series that sizes the pool's buffer (None: none, or ambiguous)."""
    pool = state.pool
    matching = [
        series.labels
        for series in snapshot.series.get(pool.metric, ())
        if all(series.labels.get(key) == value for key, value in pool.series_labels.items())
    ]
    return matching[0] if len(matching) == 1 else None


def read_back_sizing(state: BufferState, obj: Mapping[str, object]) -> Sizing:
    """The autoscaler's sizing of the buffer as read, for the chunk this pool's template requests
    (a template changed by hand since is not read: the writer never changes an existing one)."""
    spec = obj.get("spec")
    pool = state.pool
    try:
        return upstream_sizing(spec if isinstance(spec, Mapping) else {}, {pool.gpu_resource: pool.gpus_per_chunk})
    except ValueError as error:  # a malformed quantity in spec.limits
        return Sizing(None, str(error))


def chunk_template(state: BufferState) -> dict[str, object]:
    pool = state.pool
    return buffers.chunk_template(
        pool.namespace,
        pool.template_name,
        gpus=pool.gpus_per_chunk,
        gpu_resource=pool.gpu_resource,
        node_selector=pool.node_selector,
        tolerations=[toleration.as_kubernetes() for toleration in pool.tolerations],
    )
