"""Prometheus range queries off the event loop: settings, errors, retries, backfill and incremental pulls.

prometheus-api-client is synchronous (requests), so every call runs in a bounded thread pool. The
client's own urllib3 retries are switched off: retries happen here, with the backoff from the settings,
and nothing from requests or urllib3 escapes; callers see ``PrometheusError`` subclasses only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, ClassVar, Self, TypeVar, cast
from urllib.parse import urlparse

import pandas as pd
import requests
import urllib3
from prometheus_api_client.exceptions import PrometheusApiClientException
from prometheus_api_client.prometheus_connect import PrometheusConnect
from requests.auth import AuthBase
from urllib3.util.retry import Retry

from adapters.prometheus.matrix import MatrixError, decode_matrix
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
from adapters.types import AdapterError, Signal

log = logging.getLogger(__name__)

T = TypeVar("T")
StrPath = str | os.PathLike[str]


class PrometheusError(AdapterError):
    """Base of every Prometheus adapter error. ``retryable`` says whether trying again can help."""

    retryable: ClassVar[bool] = False
    attempts: int = 1


class PrometheusUnavailable(PrometheusError):
    """Prometheus could not be reached, timed out, or answered 5xx/429."""

    retryable = True


class PrometheusBadResponse(PrometheusError):
    """Prometheus (or something in front of it) answered with a body that is not a valid API result."""

    retryable = True  # truncated or garbled bodies from proxies are usually transient


class PrometheusQueryError(PrometheusError):
    """Prometheus rejected the query; the message is Prometheus's own."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message


class PrometheusAuthError(PrometheusError):
    """Prometheus (or its auth proxy) answered 401 or 403."""


@dataclass(frozen=True)
class PrometheusClientSettings:
    """How to reach Prometheus. Secrets stay out of ``repr`` so the settings can be logged."""

    url: str
    timeout_s: float = 30.0
    retries: int = 3  # attempts after the first one
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 10.0
    bearer_token: str | None = field(default=None, repr=False)
    bearer_token_file: StrPath | None = None  # re-read on every request: projected tokens rotate
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)
    ca_file: StrPath | None = None
    insecure_skip_verify: bool = False
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    max_workers: int = 4

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
        # requests.Session is not documented as thread-safe: one client per worker thread.
        self._local = threading.local()
        self._clients: list[PrometheusConnect] = []
        self._clients_lock = threading.Lock()
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

        Long ranges are split into requests under Prometheus's points-per-series limit and run
        concurrently (bounded by ``max_workers``). No series at all gives an empty list.
        """
        first, last = grid_start(start, query.step), grid_end(end, query.step)
        if last < first:
            return []
        chunks = plan_chunks(first, last, query.step, self._max_points)
        tasks = [asyncio.create_task(self.query_range(query.range_promql, a, b, query.step)) for a, b in chunks]
        try:
            results = await asyncio.gather(*tasks)
        finally:
            # One chunk failed (or we were cancelled): stop the others and collect their outcomes so
            # that the caller gets the first error itself, not an ExceptionGroup or a logged stray.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return to_signals(query, (series for result in results for series in result), first, last)

    async def pull_incremental(self, query: SignalQuery, since: datetime, now: datetime) -> list[Signal]:
        """The grid points after ``since`` up to ``now``; merge the result with ``merge_signal``.

        Pass an earlier ``since`` to re-read the last few points if late scrapes matter: merging lets
        the newer values win.
        """
        after_since = grid_end(since, query.step) + pd.Timedelta(query.step)
        return await self.backfill(query, after_since, now)

    async def query_range(self, promql: str, start: datetime, end: datetime, step: timedelta) -> list[RawSeries]:
        """One ``/api/v1/query_range`` call (with retries), decoded but not yet put on a grid."""
        settings = self._settings
        # Lets Prometheus give up when we do; plain (float) seconds, as "0.5s" is not a Prometheus duration.
        params = {"timeout": f"{settings.timeout_s:g}"}

        def call() -> list[RawSeries]:
            result = self._client().custom_query_range(
                promql, start_time=start, end_time=end, step=promql_duration(step), params=params
            )
            try:
                return decode_matrix(result)
            except MatrixError as error:
                raise PrometheusBadResponse(str(error)) from None

        return await self._with_retries(call, f"query_range {promql[:120]!r}")

    async def _with_retries(self, call: Callable[[], T], what: str) -> T:
        loop = asyncio.get_running_loop()
        delays = self._settings.backoff_delays()
        for attempt in range(len(delays) + 1):
            if self._closed:  # the executor would refuse the work with a RuntimeError
                raise PrometheusError("the Prometheus source is closed")
            try:
                return await loop.run_in_executor(self._executor, _translating_errors, call)
            except PrometheusError as error:
                error.attempts = attempt + 1
                if not error.retryable or attempt == len(delays):
                    raise
                log.warning("%s failed (%s); retry %d in %.2fs", what, error, attempt + 1, delays[attempt])
                await asyncio.sleep(delays[attempt])
        raise AssertionError("unreachable")  # the loop always returns or raises

    def _client(self) -> PrometheusConnect:
        client: PrometheusConnect | None = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = _new_client(self._settings)
            with self._clients_lock:
                self._clients.append(client)
        return client

    def _shutdown(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
        with self._clients_lock:
            for client in self._clients:
                client.close()
            self._clients.clear()


class _BearerTokenFile(AuthBase):
    """Authorization from a token file, read per request so rotated service-account tokens work."""

    def __init__(self, path: StrPath) -> None:
        self._path = path

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        with open(self._path, encoding="utf-8") as token_file:
            request.headers["Authorization"] = f"Bearer {token_file.read().strip()}"
        return request


# Connection and status retries are ours (with the configured backoff); redirects are still followed.
_NO_TRANSPORT_RETRIES = Retry(total=None, connect=0, read=0, status=0, other=0, redirect=5)


def _new_client(settings: PrometheusClientSettings) -> PrometheusConnect:
    session = requests.Session()
    if settings.insecure_skip_verify:
        session.verify = False
    elif settings.ca_file is not None:
        session.verify = os.fspath(settings.ca_file)
    if settings.bearer_token_file is not None:
        session.auth = _BearerTokenFile(settings.bearer_token_file)
    elif settings.basic_auth is not None:
        session.auth = settings.basic_auth
    session.hooks["response"].append(_raise_for_api_error)
    headers = dict(settings.headers)
    if settings.bearer_token is not None:
        headers["Authorization"] = f"Bearer {settings.bearer_token}"
    # The client annotates timeout as int but hands it to requests, which takes (connect, read) seconds.
    timeout = cast(int, (settings.timeout_s, settings.timeout_s))
    url = settings.url.rstrip("/")
    retry = _NO_TRANSPORT_RETRIES
    return PrometheusConnect(url=url, headers=headers, retry=retry, session=session, timeout=timeout)


def _raise_for_api_error(response: requests.Response, *args: Any, **kwargs: Any) -> None:
    """requests response hook: classify HTTP errors while the body is still at hand.

    prometheus-api-client folds every non-200 answer into one exception holding a repr of the body;
    reading the JSON error here keeps Prometheus's own message and errorType.
    """
    status = response.status_code
    if status < 400:
        return
    error_type, message = _api_error(response)
    where = f"HTTP {status} from {response.url.split('?')[0]}"
    if status in (401, 403):
        raise PrometheusAuthError(f"{where}: {message}")
    # Prometheus answers 503 for query timeouts/cancellations and 500 for internal errors.
    if status >= 500 or status in (408, 429) or error_type in ("timeout", "canceled", "unavailable"):
        raise PrometheusUnavailable(f"{where}: {message}")
    if error_type is not None:
        raise PrometheusQueryError(error_type, message)
    raise PrometheusBadResponse(f"{where}: {message}")


def _api_error(response: requests.Response) -> tuple[str | None, str]:
    try:
        body = response.json()
    except ValueError:
        return None, response.text[:200].strip() or response.reason
    if isinstance(body, dict) and body.get("status") == "error":
        return str(body.get("errorType", "error")), str(body.get("error", ""))
    return None, response.text[:200]


def _translating_errors(call: Callable[[], T]) -> T:
    """Run ``call`` in a worker thread and map every transport exception onto ours."""
    try:
        return call()
    except PrometheusError:
        raise
    except (requests.ConnectionError, requests.Timeout) as error:
        # Covers refused connections, DNS and TLS failures and timeouts; ChunkedEncodingError is not one.
        raise PrometheusUnavailable(f"cannot reach Prometheus: {_reason(error)}") from error
    except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ContentDecodingError) as error:
        raise PrometheusBadResponse(f"Prometheus response broke off: {error}") from error
    except (ValueError, KeyError, TypeError) as error:
        # requests' JSONDecodeError is a ValueError; KeyError/TypeError: JSON without data.result.
        raise PrometheusBadResponse(f"not a Prometheus API result: {error}") from error
    except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as error:
        raise PrometheusUnavailable(f"request to Prometheus failed: {error}") from error
    except PrometheusApiClientException as error:
        # Only reached for non-error codes the hook lets through (such as a final 3xx).
        raise PrometheusBadResponse(str(error)[:200]) from error


def _reason(error: requests.RequestException) -> object:
    # urllib3 wraps the cause in MaxRetryError("Max retries exceeded"), misleading with retries off.
    wrapped = error.args[0] if error.args else None
    return wrapped.reason if isinstance(wrapped, urllib3.exceptions.MaxRetryError) else error
