"""The secure port's own event loop, in its own thread: what every HPA reads, apart from everything else.

On one loop, 200 clients of the ops port (the page, its charts, ``/metrics``, 14 days of history as
JSON) queued every HTTPS request behind theirs: its p50 went from under 1 ms to seconds. The
external metrics API reads one reference, the provider's current snapshot (immutable, swapped whole
by the refresher), so it can be answered from a loop that nothing else runs on.

What the API path needs from the main loop is handed to it: the app's start and stop (the
refresher and the CapacityBuffer writer live there, in its ``cleanup_ctx``) and every call that may
do I/O with a client bound to the main loop (TokenReview, SubjectAccessReview:
``kubernetes_asyncio``'s session belongs to the loop that made it), run there with
``run_coroutine_threadsafe``; their verdicts are cached on the API's side, so only a cache miss
waits for the main loop. Client certificates, the front proxy's headers and allow-authenticated
are checked on the API loop. Counters (prometheus_client) and logging are thread-safe; readiness
and the TLS context are read as whole references.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import threading
from collections.abc import AsyncIterator, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import uvloop
from aiohttp import web

from autoscaler.web.security.auth import (
    AccessControl,
    AllowAuthenticated,
    Authenticator,
    Authorizer,
    SubjectAccessReviewAuthorizer,
    TokenReviewer,
    User,
)
from autoscaler.web.shared.http_server import StatusAppRunner

T = TypeVar("T")
# The threads share the GIL: a thread that wants it waits until the holder lets go, or until this
# interval has passed and the holder is made to (CPython's default: 5 ms). With the main thread busy
# (ops clients, gRPC selectors) each HTTPS request waited about that long: its p50 was 3-33x idle at
# 5 ms and 1 ms, and 1.2-2.1x at 200 us (docs/benchmarks/api-load.md), with no fewer ops answers.
SWITCH_INTERVAL_S = 0.0002


class _SwitchInterval:
    """The process's GIL switch interval, shortened while any loop thread runs and restored after the last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._before_s = sys.getswitchinterval()

    def hold(self, interval_s: float) -> None:
        with self._lock:
            if self._holders == 0:
                self._before_s = sys.getswitchinterval()
            self._holders += 1
            sys.setswitchinterval(min(interval_s, sys.getswitchinterval()))

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0:
                sys.setswitchinterval(self._before_s)


_switch_interval = _SwitchInterval()


class LoopThread:
    """An event loop (uvloop's, as ``serve`` runs) running in a thread of its own until ``stop``."""

    def __init__(self, name: str, switch_interval_s: float = SWITCH_INTERVAL_S) -> None:
        self.loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._switch_interval_s = switch_interval_s
        self._holding = False

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        finally:
            self.loop.close()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        """Start the thread, and make the GIL change hands at ``switch_interval_s`` (process-wide) until ``stop``."""
        _switch_interval.hold(self._switch_interval_s)
        self._holding = True
        self._thread.start()

    async def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run ``work`` on this loop and wait for it from the calling loop (cancelling it cancels ``work``)."""
        if not self.running:
            work.close()
            raise RuntimeError(f"the event loop of thread {self._thread.name} is not running")
        return await _on(self.loop, work)

    def wait_for(self, work: Coroutine[Any, Any, T], timeout_s: float) -> T:
        """Run ``work`` on this loop, blocking the calling thread (and its loop) until it ends."""
        if not self.running:
            work.close()
            raise RuntimeError(f"the event loop of thread {self._thread.name} is not running")
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout_s)

    async def stop(self) -> None:
        """Stop the loop once what runs on it has ended (the caller drains it first), and close it."""
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            await asyncio.to_thread(self._thread.join)
        else:
            self.loop.close()
        if self._holding:
            self._holding = False
            _switch_interval.release()


class ApiLoopRunner(StatusAppRunner):
    """A :class:`StatusAppRunner` that serves the app on its loop but leaves the app's start and stop
    (``on_startup``, ``cleanup_ctx``, ``on_shutdown``) to the main loop: ``start_app``, ``stop_app``."""

    async def _make_server(self) -> web.Server:
        """As aiohttp's ``AppRunner._make_server``, without ``app.startup()`` (``start_app`` ran it)."""
        loop = asyncio.get_running_loop()
        app = self.app
        app._set_loop(loop)  # as aiohttp's AppRunner, before it freezes the app
        app.freeze()
        made = app._make_handler(loop=loop, **self._kwargs)
        return self.status_server(made)

    async def shutdown(self) -> None:
        return None  # on_shutdown runs on the main loop (stop_app)

    async def _cleanup_server(self) -> None:
        return None  # cleanup_ctx runs on the main loop (stop_app)


async def start_app(app: web.Application) -> None:
    """The app's ``on_startup`` and ``cleanup_ctx`` on the calling (main) loop, before the runner's setup
    (which freezes the app: the refresher's context stores itself in the app when it starts)."""
    app.on_startup.freeze()
    await app.startup()


async def stop_app(app: web.Application) -> None:
    """The app's ``on_shutdown`` and ``cleanup_ctx`` exits, on the main loop, after the runner's cleanup."""
    app.freeze()  # frozen already, unless the runner's setup failed
    await app.shutdown()
    await app.cleanup()


@contextlib.asynccontextmanager
async def entered_on(thread: LoopThread, context: AbstractAsyncContextManager[T]) -> AsyncIterator[T]:
    """``context`` entered and exited on ``thread``'s loop (what it makes belongs there), used from this one."""
    value = await thread.run(context.__aenter__())
    try:
        yield value
    except BaseException as error:
        if not await thread.run(context.__aexit__(type(error), error, error.__traceback__)):
            raise
    else:
        await thread.run(context.__aexit__(None, None, None))


@contextlib.asynccontextmanager
async def on_own_loop(name: str, context: AbstractAsyncContextManager[T]) -> AsyncIterator[T]:
    """``context`` entered and exited on a new loop thread called ``name``, which stops after its exit."""
    thread = LoopThread(name)
    thread.start()
    try:
        async with entered_on(thread, context) as value:
            yield value
    finally:
        await thread.stop()


async def _on(loop: asyncio.AbstractEventLoop, work: Coroutine[Any, Any, T]) -> T:
    """``work`` run on ``loop`` (another thread's), awaited from the calling loop."""
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, loop))


class _TokenReviewsOn:
    """A token reviewer whose reviews run on ``loop`` (where its API client's session lives)."""

    def __init__(self, reviewer: TokenReviewer, loop: asyncio.AbstractEventLoop) -> None:
        self._reviewer, self._loop = reviewer, loop

    async def review_token(self, token: str) -> User | None:
        return await _on(self._loop, self._reviewer.review_token(token))


class _AccessReviewsOn:
    """An access reviewer (SubjectAccessReview) whose reviews run on ``loop``."""

    def __init__(self, reviewer: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._reviewer, self._loop = reviewer, loop

    async def review_access(self, user: User, *, verb: str, group: str, resource: str, namespace: str) -> bool:
        review = self._reviewer.review_access(user, verb=verb, group=group, resource=resource, namespace=namespace)
        allowed: bool = await _on(self._loop, review)
        return allowed


class _AuthorizerOn:
    """An authorizer of unknown make: each call runs on ``loop``, where it was made."""

    def __init__(self, authorizer: Authorizer, loop: asyncio.AbstractEventLoop) -> None:
        self._authorizer, self._loop = authorizer, loop

    async def authorize(self, user: User, *, namespace: str, metric: str) -> None:
        await _on(self._loop, self._authorizer.authorize(user, namespace=namespace, metric=metric))


def reviews_on(access: AccessControl, loop: asyncio.AbstractEventLoop) -> AccessControl:
    """``access`` for the loop threads (the API's, the gRPC port's): what may do I/O on ``loop``'s
    clients runs there, the rest where called.

    The authenticator is the API's alone: its token reviewer is swapped in place, so its caches
    (and ``reconfigure`` from the authentication watch) stay one object.
    """
    authenticator = access.authenticator
    reviewer = authenticator.token_reviewer if isinstance(authenticator, Authenticator) else None
    if authenticator is not None and reviewer is not None and not isinstance(reviewer, _TokenReviewsOn):
        authenticator.token_reviewer = _TokenReviewsOn(reviewer, loop)
    authorizer, grpc_authorizer = _authorizer_on(access.authorizer, loop), _authorizer_on(access.grpc_authorizer, loop)
    return dataclasses.replace(access, authorizer=authorizer, grpc_authorizer=grpc_authorizer)


def _authorizer_on(authorizer: Authorizer | None, loop: asyncio.AbstractEventLoop) -> Authorizer | None:
    """``authorizer`` whose reviews (or, of an unknown kind, whose calls) run on ``loop``."""
    if isinstance(authorizer, SubjectAccessReviewAuthorizer):
        if not isinstance(authorizer.reviewer, _AccessReviewsOn):  # made once per process; twice in tests
            authorizer.reviewer = _AccessReviewsOn(authorizer.reviewer, loop)
        return authorizer
    if authorizer is None or isinstance(authorizer, AllowAuthenticated | _AuthorizerOn):
        return authorizer
    return _AuthorizerOn(authorizer, loop)
