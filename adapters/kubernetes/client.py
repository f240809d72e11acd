"""A Kubernetes API client with timeouts, and the adapter's own errors for what the API answers.

Every call in the Kubernetes adapters goes through kubernetes-asyncio with ``_preload_content=False``:
we read the raw JSON ourselves (no model deserialisation, which is slow and drops unknown fields) and
turn HTTP statuses and transport failures into the errors below. Callers never see ``ApiException``
or aiohttp's exceptions.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.client.exceptions import ApiException, ApiValueError

from adapters.types import AdapterError

log = logging.getLogger(__name__)


class KubeError(AdapterError):
    """The Kubernetes API refused or failed a request."""

    def __init__(self, message: str, *, status: int | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        # Seconds the server asked us to wait (Retry-After), if it said so.
        self.retry_after_s = retry_after_s


class KubeUnavailable(KubeError):
    """The API could not be reached, timed out, cut the connection or answered 5xx: retry later."""


class KubeThrottled(KubeUnavailable):
    """429 Too Many Requests (API priority and fairness): wait at least ``retry_after_s``."""


class KubeForbidden(KubeError):
    """401 or 403: our own credentials or RBAC are wrong; retrying will not help until fixed."""


class KubeNotFound(KubeError):
    """404: the object, or the whole resource type (a CRD that is not installed), does not exist."""


class ResourceVersionExpired(KubeError):
    """410 Gone: the resourceVersion was compacted away; the only way forward is a fresh list."""


@dataclass(frozen=True)
class KubeClientSettings:
    """Where the API is and how long a plain (non-watch) request may take."""

    kubeconfig_path: Path | str | None = None  # None: in-cluster service account
    context: str | None = None  # kubeconfig context; None: the current one
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 10.0
    # Kubeconfig credentials from exec plugins (EKS, GKE) expire: they are fetched again this often.
    # (In-cluster, the library re-reads the rotated service-account token by itself.)
    credential_refresh_s: float = 300.0
    # Sent on every request, so an API server's audit log (and a test's fake) tells replicas apart;
    # None: the library's default ("OpenAPI-Generator/<version>/python").
    user_agent: str | None = None


class TimedApiClient(ApiClient):
    """An ApiClient that applies a default timeout to every request that does not set its own.

    kubernetes-asyncio otherwise waits forever: its aiohttp session has no timeout and the generated
    API methods pass none unless told to.
    """

    def __init__(self, configuration: Configuration, default_timeout: aiohttp.ClientTimeout) -> None:
        super().__init__(configuration=configuration)
        self.default_timeout = default_timeout

    def request(
        self,
        method: Any,
        url: Any,
        query_params: Any | None = None,
        headers: dict[str, Any] | None = None,
        post_params: dict[str, Any] | None = None,
        body: Any | None = None,
        _preload_content: bool = True,
        _request_timeout: float | tuple[float] | aiohttp.ClientTimeout | None = None,
    ) -> Any:
        return super().request(
            method,
            url,
            query_params=query_params,
            headers=headers,
            post_params=post_params,
            body=body,
            _preload_content=_preload_content,
            _request_timeout=self.default_timeout if _request_timeout is None else _request_timeout,
        )


async def create_api_client(settings: KubeClientSettings) -> ApiClient:
    """An ApiClient from the kubeconfig at ``settings.kubeconfig_path``, else the in-cluster config.

    The in-cluster loader re-reads the projected service-account token when it rotates.
    Raises ``KubeError`` when the configuration cannot be loaded.
    """
    configuration = Configuration()
    try:
        if settings.kubeconfig_path is None:
            kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            loader = await kube_config.load_kube_config(
                config_file=str(settings.kubeconfig_path),
                context=settings.context,
                client_configuration=configuration,
                persist_config=False,
            )
            configuration.refresh_api_key_hook = _credential_refresher(loader, settings.credential_refresh_s)
    except (kube_config.ConfigException, OSError, ValueError, KeyError) as exc:
        raise KubeError(f"cannot load Kubernetes client configuration: {exc}") from exc
    timeout = aiohttp.ClientTimeout(
        total=settings.request_timeout_s,
        connect=settings.connect_timeout_s,
        sock_connect=settings.connect_timeout_s,
    )
    client = TimedApiClient(configuration, timeout)
    if settings.user_agent is not None:
        client.user_agent = settings.user_agent
    return client


def _credential_refresher(loader: Any, every_s: float) -> Callable[[Configuration], Awaitable[None]]:
    """A refresh_api_key_hook (called before each request) that reloads kubeconfig credentials."""
    lock = asyncio.Lock()
    loaded_at = time.monotonic()

    async def refresh(configuration: Configuration) -> None:
        nonlocal loaded_at
        if time.monotonic() - loaded_at < every_s:
            return
        async with lock:
            if time.monotonic() - loaded_at >= every_s:
                try:
                    await loader.load_and_set(configuration)
                except Exception as exc:
                    # Keep the current credentials: they may still be valid; try again later.
                    log.warning("cannot refresh kubeconfig credentials: %s", exc)
                loaded_at = time.monotonic()

    return refresh


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None if absent or garbled."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_for_status(status: int, body: bytes, retry_after: str | None, what: str) -> KubeError:
    """The adapter error for a non-2xx answer, with the message of the metav1.Status body if any."""
    message = body[:500].decode("utf-8", errors="replace")
    try:
        document = json.loads(body)
        if isinstance(document, dict) and document.get("message"):
            message = str(document["message"])
    except ValueError:
        pass
    text = f"{what}: HTTP {status}: {message}"
    delay = parse_retry_after(retry_after)
    if status == 410:
        return ResourceVersionExpired(text, status=status)
    if status == 404:
        return KubeNotFound(text, status=status)
    if status in (401, 403):
        return KubeForbidden(text, status=status)
    if status == 429:
        return KubeThrottled(text, status=status, retry_after_s=delay)
    if status >= 500:
        return KubeUnavailable(text, status=status, retry_after_s=delay)
    return KubeError(text, status=status, retry_after_s=delay)


# What a failing transport looks like from kubernetes-asyncio: aiohttp errors, timeouts, socket errors.
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


async def open_response(call: Awaitable[Any], what: str) -> aiohttp.ClientResponse:
    """Await a kubernetes-asyncio call made with ``_preload_content=False``; raise unless it is 2xx.

    The caller owns the returned response and must release it.
    """
    try:
        response: aiohttp.ClientResponse = await call
    except TRANSPORT_ERRORS as exc:
        raise KubeUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc
    except (ApiException, ApiValueError) as exc:  # only raised for malformed arguments here
        raise KubeError(f"{what}: {exc}") from exc
    if response.status < 300:
        return response
    try:
        body = await response.read()
    except TRANSPORT_ERRORS:
        body = b""
    finally:
        response.release()
    raise error_for_status(response.status, body, response.headers.get("Retry-After"), what)


async def read_json(call: Awaitable[Any], what: str) -> Any:
    """Await a kubernetes-asyncio call made with ``_preload_content=False`` and decode its JSON body."""
    response = await open_response(call, what)
    try:
        body = await response.read()
    except TRANSPORT_ERRORS as exc:
        raise KubeUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc
    finally:
        response.release()
    try:
        return json.loads(body)
    except ValueError as exc:
        raise KubeError(f"{what}: the answer is not JSON") from exc


def parse_kube_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp from a Kubernetes object (``2026-11-20T09:00:00Z``); None if absent or garbled."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
