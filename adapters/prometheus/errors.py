"""What can go wrong asking Prometheus, as exceptions callers can tell apart.

``PrometheusUnavailable``: Prometheus could not be reached (refused, DNS, TLS, a connect timeout) or
answered 5xx/429. ``PrometheusTimeout`` is the part of it where Prometheus was reached but the query ran
out of time: ours (``timeout_s`` for the whole answer, body included) or its own (HTTP 503 "query timed
out in expression evaluation"). Answers over a bound (``AnswerLimits``) are ``PrometheusAnswerTooLarge``.
"""

from __future__ import annotations

import json
from typing import ClassVar

from adapters.types import AdapterError

SHOWN = 200  # characters of a query or a body shown in a message


def shown(text: str) -> str:
    """``text`` cut to a readable length, for messages that echo input."""
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


class PrometheusError(AdapterError):
    """Base of every Prometheus adapter error. ``retryable`` says whether trying again can help."""

    retryable: ClassVar[bool] = False
    attempts: int = 1


class PrometheusUnavailable(PrometheusError):
    """Prometheus could not be reached, or answered 5xx/429."""

    retryable = True


class PrometheusTimeout(PrometheusUnavailable):
    """Prometheus was reached, but the query did not finish in time, by our clock or by its own.

    Not retried: the same query against the same Prometheus takes as long again; a longer timeout
    (``--query-timeout``, ``prometheus.timeout``) or a shorter range is what helps.
    """

    retryable = False


class PrometheusBadResponse(PrometheusError):
    """Prometheus (or something in front of it) answered with a body that is not a valid API result."""

    retryable = True  # truncated or garbled bodies from proxies are usually transient


class PrometheusAnswerTooLarge(PrometheusError):
    """The answer went over a configured bound (bytes or series); it was cut there, not read whole."""


class PrometheusQueryError(PrometheusError):
    """Prometheus rejected the query; the message is Prometheus's own."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message


class PrometheusAuthError(PrometheusError):
    """Prometheus (or its auth proxy) answered 401 or 403."""


def http_error(status: int, reason: str, where: str, body: bytes) -> PrometheusError:
    """The error for a non-2xx answer, from its status and the (bounded) start of its body.

    Prometheus's JSON error keeps its own message and errorType; a 503 of errorType ``timeout`` (or
    with "timed out" in the message) is Prometheus giving up on the query, not Prometheus being down.
    """
    error_type, message = _api_error(body, reason)
    where = f"HTTP {status} from {where}"
    if status in (401, 403):
        return PrometheusAuthError(f"{where}: {message}")
    if error_type == "timeout" or (status == 503 and "timed out" in message):
        return PrometheusTimeout(f"Prometheus-side timeout, {where}: {message}")
    # Prometheus answers 503 for cancellations and 500 for internal errors.
    if status >= 500 or status in (408, 429) or error_type in ("canceled", "unavailable"):
        return PrometheusUnavailable(f"{where}: {message}")
    if error_type is not None:
        return PrometheusQueryError(error_type, message)
    return PrometheusBadResponse(f"{where}: {message}")


def _api_error(body: bytes, reason: str) -> tuple[str | None, str]:
    text = body.decode("utf-8", "replace")
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return None, shown(text.strip()) or reason
    if isinstance(parsed, dict) and parsed.get("status") == "error":
        return shown(str(parsed.get("errorType", "error"))), shown(str(parsed.get("error", "")))
    return None, shown(text)
