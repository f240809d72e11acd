"""List-then-watch of one Kubernetes resource type, kept alive forever, in three tiers (as kopf does).

(a) ``stream_events``: one watch request; yields events, raises the adapter's errors.
(b) ``list_then_watch``: a list (when there is no resourceVersion yet) then one watch stream from the
    list's resourceVersion, applied to a ``WatchCache`` (objects keyed by namespace/name).
(c) ``watch_forever``: repeats (b); reconnects with exponential backoff after cuts, 5xx and 429
    (honouring Retry-After), relists after 410 Gone. ``WatchGroup`` runs one task per resource type,
    so that one slow or broken watch never holds up the others.

Objects stay raw JSON dicts: the consumers (CronJob windows, NodeClaim lead times) read a handful of
fields and must not depend on kubernetes-asyncio's models.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import random
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NoReturn

import aiohttp

from adapters.kubernetes.client import (
    TRANSPORT_ERRORS,
    KubeError,
    KubeNotFound,
    KubeUnavailable,
    ResourceVersionExpired,
    error_for_status,
    open_response,
    read_json,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WatchSettings:
    """Timing of watches and of their retries; the service's settings fill these in."""

    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0
    backoff_factor: float = 2.0
    # Each delay is scaled by a random factor in [1 - jitter, 1 + jitter] so that replicas spread out.
    backoff_jitter: float = 0.1
    # Server-side timeoutSeconds of a watch; the API ends the stream and we resume from the last RV.
    watch_timeout_s: float = 300.0
    # A stream silent for watch_timeout_s + this margin is considered dead (half-open TCP connection).
    read_timeout_margin_s: float = 30.0
    connect_timeout_s: float = 5.0
    list_timeout_s: float = 60.0
    # Items per list page (limit/continue); 0 lists everything in one response.
    list_page_size: int = 500
    # After a 404 on the list (e.g. Karpenter's CRDs are not installed), look again after this long.
    absent_recheck_s: float = 300.0


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED or BOOKMARK
    object: Mapping[str, Any]

    @property
    def resource_version(self) -> str | None:
        version = (self.object.get("metadata") or {}).get("resourceVersion")
        return str(version) if version else None


@dataclass(frozen=True)
class WatchedResource:
    """One resource type to list and watch.

    ``list_call`` is a kubernetes-asyncio list method with its path arguments already bound (e.g.
    ``BatchV1Api(api).list_cron_job_for_all_namespaces`` or a ``functools.partial`` of
    ``CustomObjectsApi(api).list_cluster_custom_object``); it is called with ``watch``,
    ``resource_version`` and friends.
    """

    kind: str  # for logs and errors, e.g. "cronjobs"
    list_call: Callable[..., Awaitable[Any]]


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` for namespaced objects, ``name`` for cluster-scoped ones."""
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    name = str(metadata.get("name", ""))
    return f"{namespace}/{name}" if namespace else name


class WatchCache:
    """The current objects of one resource type plus how the watch is doing (for /metrics and logs)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._objects: dict[str, Mapping[str, Any]] = {}
        self.resource_version: str | None = None  # None: the next attempt starts with a list
        self.synced = False  # a list has succeeded at least once
        self.absent = False  # the API says this resource type does not exist (404 on list)
        self.last_error: str | None = None  # the latest failure; cleared when a stream ends cleanly
        self.relists = 0  # lists made, the first one included
        self.reconnects = 0  # failed attempts that were retried
        self.events = 0  # watch events applied, bookmarks included

    @property
    def objects(self) -> Mapping[str, Mapping[str, Any]]:
        """A read-only live view; take ``snapshot()`` to keep a consistent copy across awaits."""
        return MappingProxyType(self._objects)

    def snapshot(self) -> Mapping[str, Mapping[str, Any]]:
        return MappingProxyType(dict(self._objects))

    def replace(self, items: list[Mapping[str, Any]], resource_version: str) -> None:
        self._objects = {object_key(item): item for item in items}
        self.resource_version = resource_version
        self.synced = True
        self.absent = False

    def clear(self) -> None:
        """Forget every object (the resource type is gone); the next attempt lists again."""
        self._objects = {}
        self.resource_version = None

    def apply(self, event: WatchEvent) -> None:
        self.events += 1
        if event.type in ("ADDED", "MODIFIED"):
            self._objects[object_key(event.object)] = event.object
        elif event.type == "DELETED":
            self._objects.pop(object_key(event.object), None)
        # BOOKMARK carries only a resourceVersion: it moves our position without touching objects.
        self.resource_version = event.resource_version or self.resource_version


# Called after every list (event None) and every applied event. It runs on the watch's task, so it
# must be quick; an exception in it is logged and the watch carries on.
OnChange = Callable[[WatchCache, WatchEvent | None], None]


def _watch_request_timeout(settings: WatchSettings) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(
        connect=settings.connect_timeout_s,
        sock_connect=settings.connect_timeout_s,
        sock_read=settings.watch_timeout_s + settings.read_timeout_margin_s,
    )


def _error_from_status_object(status: Mapping[str, Any], what: str) -> KubeError:
    code = status.get("code")
    return error_for_status(int(code) if isinstance(code, int) else 500, json.dumps(status).encode(), None, what)


async def stream_events(
    resource: WatchedResource, resource_version: str | None, settings: WatchSettings
) -> AsyncGenerator[WatchEvent, None]:
    """Tier (a): one watch stream from ``resource_version``; ends when the server closes the stream.

    An ERROR event becomes an exception (410 Gone: ``ResourceVersionExpired``); a cut connection or
    a silent one becomes ``KubeUnavailable``. Use with ``contextlib.aclosing`` to free the connection.
    """
    what = f"watch {resource.kind}"
    call = resource.list_call(
        watch=True,
        resource_version=resource_version,
        allow_watch_bookmarks=True,
        timeout_seconds=math.ceil(settings.watch_timeout_s),
        _preload_content=False,
        _request_timeout=_watch_request_timeout(settings),
    )
    response = await open_response(call, what)
    try:
        while True:
            try:
                line = await response.content.readline()
            except TRANSPORT_ERRORS as exc:
                raise KubeUnavailable(f"{what}: stream broken: {type(exc).__name__}: {exc}") from exc
            except ValueError as exc:  # aiohttp: a line longer than the read buffer
                raise KubeUnavailable(f"{what}: event too large: {exc}") from exc
            if not line:
                return
            if not line.strip():
                continue
            try:
                document = json.loads(line)
                event_type = str(document["type"])
                obj = document["object"]
                if not isinstance(obj, dict):
                    raise TypeError("object is not a JSON object")
            except (ValueError, KeyError, TypeError) as exc:
                raise KubeUnavailable(f"{what}: garbled event: {line[:200]!r}") from exc
            if event_type == "ERROR":
                raise _error_from_status_object(obj, what)
            yield WatchEvent(event_type, obj)
    finally:
        # close() drops the connection: a half-read stream cannot go back to the pool.
        response.close()


async def list_all(resource: WatchedResource, settings: WatchSettings) -> tuple[list[Mapping[str, Any]], str]:
    """All objects of a resource type (page by page) and the list's resourceVersion."""
    items: list[Mapping[str, Any]] = []
    continue_token: str | None = None
    timeout = aiohttp.ClientTimeout(
        total=settings.list_timeout_s,
        connect=settings.connect_timeout_s,
        sock_connect=settings.connect_timeout_s,
    )
    while True:
        paging: dict[str, Any] = {}
        if settings.list_page_size > 0:
            paging["limit"] = settings.list_page_size
        if continue_token:
            paging["_continue"] = continue_token
        page = await read_json(
            resource.list_call(_preload_content=False, _request_timeout=timeout, **paging),
            f"list {resource.kind}",
        )
        if not isinstance(page, dict):
            raise KubeError(f"list {resource.kind}: the answer is not a list object")
        items.extend(page.get("items") or [])
        metadata = page.get("metadata") or {}
        continue_token = metadata.get("continue")
        if not continue_token:
            return items, str(metadata.get("resourceVersion", ""))


def _notify(on_change: OnChange | None, cache: WatchCache, event: WatchEvent | None) -> None:
    if on_change is None:
        return
    try:
        on_change(cache, event)
    except Exception:
        log.exception("on_change callback for %s failed; the watch carries on", cache.kind)


async def list_then_watch(
    resource: WatchedResource,
    cache: WatchCache,
    settings: WatchSettings,
    on_change: OnChange | None = None,
) -> int:
    """Tier (b): list if the cache has no resourceVersion, then follow one watch stream to its end.

    Returns how many events (bookmarks included) the stream delivered. Raises the adapter's errors;
    on ``ResourceVersionExpired`` the cache's resourceVersion is cleared so that the next call relists.
    """
    if cache.resource_version is None:
        items, resource_version = await list_all(resource, settings)
        cache.replace(items, resource_version)
        cache.relists += 1
        _notify(on_change, cache, None)
    delivered = 0
    try:
        async with contextlib.aclosing(stream_events(resource, cache.resource_version, settings)) as events:
            async for event in events:
                delivered += 1
                cache.apply(event)
                if event.type != "BOOKMARK":
                    _notify(on_change, cache, event)
    except ResourceVersionExpired:
        cache.resource_version = None
        raise
    return delivered


def backoff_delay(settings: WatchSettings, failures: int) -> float:
    """Delay before retry number ``failures`` (1-based): exponential, capped, with jitter."""
    exponent = max(0, failures - 1)
    delay = min(settings.backoff_max_s, settings.backoff_initial_s * settings.backoff_factor**exponent)
    if settings.backoff_jitter:
        # Not security-sensitive: only spreads retries of several replicas apart.
        delay *= 1 + random.uniform(-settings.backoff_jitter, settings.backoff_jitter)  # noqa: S311
    return max(0.0, delay)


Sleep = Callable[[float], Awaitable[None]]


async def watch_forever(
    resource: WatchedResource,
    cache: WatchCache,
    settings: WatchSettings,
    on_change: OnChange | None = None,
    *,
    sleep: Sleep = asyncio.sleep,
) -> NoReturn:
    """Tier (c): keep ``cache`` in sync with the API until cancelled.

    - server closed the stream after delivering events: watch again at once from the last RV;
    - 410 Gone: relist (at once if the stream had delivered events, else after a backoff delay);
    - cut stream, timeout, 5xx, 429, 401/403: wait, then resume from the last RV; the delay grows
      with consecutive failures and is never shorter than the server's Retry-After;
    - 404 on the list (CRD not installed): mark the cache absent and look again later.
    A stream that delivers events resets the failure count.
    """
    loop = asyncio.get_running_loop()
    failures = 0
    while True:
        started = loop.time()
        events_before = cache.events
        try:
            delivered = await list_then_watch(resource, cache, settings, on_change)
        except Exception as exc:
            progressed = cache.events > events_before  # the stream applied events before it failed
            failures, delay = _after_failure(exc, resource, cache, settings, on_change, failures, progressed)
            if delay is not None:
                await sleep(delay)
            continue
        cache.last_error = None
        # A healthy stream either carries events (bookmarks at least) or lasts a while; one that the
        # server ends at once with nothing in it would otherwise be retried in a hot loop.
        if delivered or loop.time() - started >= settings.backoff_max_s:
            failures = 0
        else:
            failures += 1
            await sleep(backoff_delay(settings, failures))


def _after_failure(
    exc: Exception,
    resource: WatchedResource,
    cache: WatchCache,
    settings: WatchSettings,
    on_change: OnChange | None,
    failures: int,
    progressed: bool,
) -> tuple[int, float | None]:
    """Record why an attempt failed; return the new count of consecutive failures and the delay
    before the next attempt (None: at once). Call it in the ``except`` block: it logs the traceback."""
    if isinstance(exc, ResourceVersionExpired):
        cache.last_error = str(exc)
        log.info("%s: resourceVersion expired; relisting", resource.kind)
        if progressed:
            return 0, None
        failures += 1
        return failures, backoff_delay(settings, failures)
    if isinstance(exc, KubeNotFound):
        cache.last_error = str(exc)
        cache.absent = True
        if cache.objects:
            cache.clear()
            _notify(on_change, cache, None)
        cache.resource_version = None
        log.info("%s: not found (%s); looking again in %ss", resource.kind, exc, settings.absent_recheck_s)
        return 0, settings.absent_recheck_s
    if isinstance(exc, KubeError):
        cache.last_error = str(exc)
        cache.reconnects += 1
        failures = 1 if progressed else failures + 1
        delay = max(backoff_delay(settings, failures), exc.retry_after_s or 0.0)
        log.warning("%s: %s; retrying in %.1fs", resource.kind, exc, delay)
        return failures, delay
    # A bug or an answer we did not foresee: log it loudly, but keep this watch alive.
    cache.last_error = f"{type(exc).__name__}: {exc}"
    log.exception("%s: unexpected failure", resource.kind)
    failures += 1
    return failures, backoff_delay(settings, failures)


class WatchGroup:
    """Runs each watched resource in its own task; closing the group cancels them all."""

    def __init__(self, settings: WatchSettings, *, sleep: Sleep = asyncio.sleep) -> None:
        self.settings = settings
        self._sleep = sleep
        self._caches: dict[str, WatchCache] = {}
        self._tasks: dict[str, asyncio.Task[NoReturn]] = {}

    @property
    def caches(self) -> Mapping[str, WatchCache]:
        return MappingProxyType(self._caches)

    def start(self, resource: WatchedResource, on_change: OnChange | None = None) -> WatchCache:
        if resource.kind in self._tasks:
            raise ValueError(f"{resource.kind} is already watched")
        cache = WatchCache(resource.kind)
        self._caches[resource.kind] = cache
        self._tasks[resource.kind] = asyncio.create_task(
            watch_forever(resource, cache, self.settings, on_change, sleep=self._sleep),
            name=f"watch-{resource.kind}",
        )
        return cache

    async def aclose(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()

    async def __aenter__(self) -> WatchGroup:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
