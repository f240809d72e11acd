"""Prometheus range queries off the event loop: settings, retries, backfill in chunks, incremental pulls.

Requests (with requests) run in a bounded thread pool, the bound per Prometheus. Each answer is read as
it streams in, within the bounds of ``adapters.prometheus.answer`` (bytes, series, time for the whole
answer). urllib3's own retries are switched off: retries happen here, with the backoff from the
settings, and nothing from requests or urllib3 escapes; callers see the ``PrometheusError`` subclasses
of ``adapters.prometheus.errors`` only, each naming its query.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from types import TracebackType
from typing import Self, TypeVar
from urllib.parse import urlparse

import pandas as pd
import requests
import tenacity
import urllib3
from requests.adapters import HTTPAdapter
from requests.auth import AuthBase
from urllib3.util.retry import Retry

from adapters.prometheus.answer import MIB, AnswerBudget, BoundedBody, read_matrix, unavailable
from adapters.prometheus.errors import (
    PrometheusAnswerTooLarge,
    PrometheusAuthError,
    PrometheusBadResponse,
    PrometheusError,
    PrometheusQueryError,
    PrometheusTimeout,
    PrometheusUnavailable,
    http_error,
    shown,
)
from adapters.prometheus.promql import (
    MAX_POINTS_PER_REQUEST,
    RawSeries,
    SignalQuery,
    grid_end,
    grid_start,
    plan_chunks,
    promql_duration,
    to_signals,
)
from adapters.types import Signal

__all__ = [
    "PrometheusAnswerTooLarge",
    "PrometheusAuthError",
    "PrometheusBadResponse",
    "PrometheusClientSettings",
    "PrometheusError",
    "PrometheusQueryError",
    "PrometheusSource",
    "PrometheusTimeout",
    "PrometheusUnavailable",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
StrPath = str | os.PathLike[str]

DEFAULT_TIMEOUT_S = 120.0  # a 30-day range query on a modest cluster's Prometheus takes about a minute
DEFAULT_MAX_ANSWER_BYTES = 64 * MIB
DEFAULT_MAX_SERIES = 10_000
DEFAULT_CHUNK = timedelta(days=1)
ERROR_BODY_BYTES = 16 * 1024  # of a non-2xx answer, read for Prometheus's explanation


@dataclass(frozen=True)
class PrometheusClientSettings:
    """How to reach Prometheus. Secrets stay out of ``repr`` so the settings can be logged."""

    url: str
    timeout_s: float = DEFAULT_TIMEOUT_S  # for each request, its whole answer included
    retries: int = 3  # attempts after the first one
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 10.0
    bearer_token: str | None = field(default=None, repr=False)
    bearer_token_file: StrPath | None = None  # re-read on every request: projected tokens rotate
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)
    ca_file: StrPath | None = None
    insecure_skip_verify: bool = False
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    max_workers: int = 4  # requests in flight to this Prometheus at once
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES  # per query, over all its chunks, decompressed
    max_series: int = DEFAULT_MAX_SERIES  # per answer
    chunk: timedelta = DEFAULT_CHUNK  # the longest range one request asks for

    def __post_init__(self) -> None:
        parsed = urlparse(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"Prometheus url must be http(s)://host[:port][/path], got {self.url!r}")
        if self.timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        if self.retries < 0:
            raise ValueError("retries must be >= 0")
        if self.backoff_initial_s < 0 or self.backoff_max_s < self.backoff_initial_s:
            raise ValueError("need 0 <= backoff_initial_s <= backoff_max_s")
        if self.max_workers < 1:
            raise ValueError("max_workers must be >= 1")
        if self.max_answer_bytes < 1 or self.max_series < 1:
            raise ValueError("max_answer_bytes and max_series must be >= 1")
        if self.chunk < timedelta(seconds=1):
            raise ValueError("chunk must be at least a second")
        credentials = (self.bearer_token, self.bearer_token_file, self.basic_auth)
        if sum(credential is not None for credential in credentials) > 1:
            raise ValueError("set at most one of bearer_token, bearer_token_file and basic_auth")
        if self.insecure_skip_verify and self.ca_file is not None:
            raise ValueError("ca_file and insecure_skip_verify contradict each other")

    def backoff_delays(self) -> list[float]:
        """Seconds to wait before each retry: doubling from ``backoff_initial_s`` up to ``backoff_max_s``."""
        initial, cap = self.backoff_initial_s, self.backoff_max_s
        return [min(cap, initial * 2**attempt) for attempt in range(self.retries)]


class PrometheusSource:
    """Pulls SignalQuery results from Prometheus as Signals.

    Use as ``async with PrometheusSource(settings) as prometheus: ...`` or call ``aclose()``.
    """

    def __init__(
        self, settings: PrometheusClientSettings, *, max_points_per_request: int = MAX_POINTS_PER_REQUEST
    ) -> None:
        self._settings = settings
        self._max_points = max_points_per_request
        self._executor = ThreadPoolExecutor(max_workers=settings.max_workers, thread_name_prefix="prometheus")
        # requests.Session is not documented as thread-safe: one session per worker thread.
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._sessions_lock = threading.Lock()
        self._closed = False

    @property
    def settings(self) -> PrometheusClientSettings:
        return self._settings

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the thread pool and close the HTTP sessions. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._shutdown)

    async def backfill(self, query: SignalQuery, start: datetime, end: datetime) -> list[Signal]:
        """History of ``query`` evaluated on the step grid within ``[start, end]``, one Signal per series
        (a ``peak`` query's points are labelled by the start of their step, one step earlier).

        Long ranges are split on the grid into requests of at most ``chunk`` and under Prometheus's
        points-per-series limit, run concurrently (bounded by ``max_workers``) and joined: every grid
        point is asked for once, so the result is the one query's. No series at all: an empty list.
        """
        first, last = grid_start(start, query.step), grid_end(end, query.step)
        if last < first:
            return []
        per_chunk = max(1, min(self._max_points, self._settings.chunk // query.step))
        chunks = plan_chunks(first, last, query.step, per_chunk)
        budget = self._budget()
        promql = query.range_promql
        tasks = [asyncio.create_task(self.query_range(promql, a, b, query.step, budget=budget)) for a, b in chunks]
        try:
            results = await asyncio.gather(*tasks)
        finally:
            # One chunk failed (or we were cancelled): stop the others and collect their outcomes so
            # that the caller gets the first error itself, not an ExceptionGroup or a logged stray. The
            # requests already in worker threads stop at their next read.
            budget.abandoned = True
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return to_signals(query, (series for result in results for series in result), first, last)

    async def read_recorded_if_held(self, query: SignalQuery, since: datetime) -> SignalQuery:
        """``query.recorded`` when Prometheus holds its recording rule's series at ``since`` (a rule installed
        later would give a shorter history than the raw series), else ``query`` without it."""
        recorded, series = query.recorded, query.recorded_series
        if recorded is None or series is None:
            return query
        at = grid_end(since, query.step)
        found = await self.query_range(f"count({series})", at, at, query.step)
        return recorded if found else replace(query, recorded=None)

    async def pull_incremental(self, query: SignalQuery, since: datetime, now: datetime) -> list[Signal]:
        """The grid points after ``since`` up to ``now``; merge the result with ``merge_signal``.

        Pass an earlier ``since`` to re-read the last few points if late scrapes matter: merging lets
        the newer values win.
        """
        after_since = grid_end(since, query.step) + pd.Timedelta(query.step)
        return await self.backfill(query, after_since, now)

    async def query_range(
        self, promql: str, start: datetime, end: datetime, step: timedelta, *, budget: AnswerBudget | None = None
    ) -> list[RawSeries]:
        """One ``/api/v1/query_range`` call (with retries), decoded but not yet put on a grid.

        ``budget``: the bytes the answers to one query may take together (a fresh one by default).
        """
        settings = self._settings
        what = f"query {shown(promql)!r}"
        budget = budget if budget is not None else self._budget()
        points = int((pd.Timestamp(end) - pd.Timestamp(start)) // pd.Timedelta(step)) + 1
        params = {
            "query": promql,
            "start": str(round(start.timestamp())),
            "end": str(round(end.timestamp())),
            "step": promql_duration(step),
            # Lets Prometheus give up when we do; plain (float) seconds, as "0.5s" is not a Prometheus duration.
            "timeout": f"{settings.timeout_s:g}",
        }

        def call() -> list[RawSeries]:
            return self._get_matrix(params, budget, points, what)

        return await self._with_retries(call)

    def _budget(self) -> AnswerBudget:
        return AnswerBudget(self._settings.max_answer_bytes, self._settings.max_series)

    def _get_matrix(self, params: Mapping[str, str], budget: AnswerBudget, points: int, what: str) -> list[RawSeries]:
        """In a worker thread: the request, its status, then its body as it streams in."""
        settings = self._settings
        deadline = time.monotonic() + settings.timeout_s
        url = f"{settings.url.rstrip('/')}/api/v1/query_range"
        try:
            response = self._session().get(url, params=params, timeout=settings.timeout_s, stream=True)
        except (requests.ConnectionError, requests.Timeout) as error:
            # Refused connections, DNS and TLS failures, connect and read timeouts (ConnectTimeout is both).
            raise unavailable(error, what, settings.timeout_s) from error
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as error:
            raise PrometheusUnavailable(f"{what}: request to Prometheus failed: {error}") from error
        with response:
            if response.status_code != 200:
                start = BoundedBody(response, deadline, None, what, settings.timeout_s).read_at_most(ERROR_BODY_BYTES)
                refusal = http_error(response.status_code, response.reason, response.url.split("?")[0], start)
                if isinstance(refusal, PrometheusQueryError):
                    raise refusal
                raise type(refusal)(f"{what}: {refusal}")
            body = BoundedBody(response, deadline, budget, what, settings.timeout_s)
            try:
                return read_matrix(body, settings.max_series, points, what)
            except PrometheusError:
                budget.give_back(body.taken)  # a retry reads it again
                raise

    async def _with_retries(self, call: Callable[[], T]) -> T:
        """``call`` in the executor, retried after a retryable error with the configured backoff
        (doubling from ``backoff_initial_s`` up to ``backoff_max_s``: ``backoff_delays``)."""
        loop = asyncio.get_running_loop()
        settings = self._settings
        retrying = tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(settings.retries + 1),
            wait=tenacity.wait_exponential(multiplier=settings.backoff_initial_s, max=settings.backoff_max_s),
            retry=tenacity.retry_if_exception(lambda error: isinstance(error, PrometheusError) and error.retryable),
            before_sleep=_log_retry,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                if self._closed:  # the executor would refuse the work with a RuntimeError
                    raise PrometheusError("the Prometheus source is closed")
                try:
                    return await loop.run_in_executor(self._executor, call)
                except PrometheusError as error:
                    error.attempts = attempt.retry_state.attempt_number
                    raise
        raise AssertionError("unreachable")  # reraise=True: the last error is raised, not RetryError

    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = _new_session(self._settings)
            with self._sessions_lock:
                self._sessions.append(session)
        return session

    def _shutdown(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
        with self._sessions_lock:
            for session in self._sessions:
                session.close()
            self._sessions.clear()


class _BearerTokenFile(AuthBase):
    """Authorization from a token file, read per request so rotated service-account tokens work."""

    def __init__(self, path: StrPath) -> None:
        self._path = path

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        with open(self._path, encoding="utf-8") as token_file:
            request.headers["Authorization"] = f"Bearer {token_file.read().strip()}"
        return request


def _log_retry(state: tenacity.RetryCallState) -> None:
    error = state.outcome.exception() if state.outcome is not None else None
    delay = state.next_action.sleep if state.next_action is not None else 0.0
    log.warning("%s; retry %d in %.2fs", error, state.attempt_number, delay)


# Connection and status retries are ours (with the configured backoff); redirects are still followed.
_NO_TRANSPORT_RETRIES = Retry(total=None, connect=0, read=0, status=0, other=0, redirect=5)


def _new_session(settings: PrometheusClientSettings) -> requests.Session:
    session = requests.Session()
    if settings.insecure_skip_verify:
        session.verify = False
    elif settings.ca_file is not None:
        session.verify = os.fspath(settings.ca_file)
    if settings.bearer_token_file is not None:
        session.auth = _BearerTokenFile(settings.bearer_token_file)
    elif settings.basic_auth is not None:
        session.auth = settings.basic_auth
    session.headers.update(settings.headers)
    if settings.bearer_token is not None:
        session.headers["Authorization"] = f"Bearer {settings.bearer_token}"
    adapter = HTTPAdapter(max_retries=_NO_TRANSPORT_RETRIES)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session
