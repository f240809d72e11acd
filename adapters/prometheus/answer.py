"""Reading one Prometheus answer within bounds: bytes, series, nesting, time, as it arrives.

The body is never read whole before it is judged. ``BoundedBody`` hands it on in chunks, counting the
(decompressed) bytes against the query's ``AnswerBudget`` and giving each socket read only the time
left before the request's deadline, so a body dripping a byte at a time ends at the deadline.
``read_matrix`` decodes the chunks with a streaming JSON parser (ijson), one series at a time, so the
memory an answer takes is its decoded samples (16 bytes each), not Python objects for the whole body;
it counts series, samples per series, labels per series and nesting as they come, and stops at the
first one over its bound.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import ijson
import requests
import urllib3

from adapters.prometheus.errors import (
    PrometheusAnswerTooLarge,
    PrometheusBadResponse,
    PrometheusError,
    PrometheusTimeout,
    PrometheusUnavailable,
)
from adapters.prometheus.matrix import MatrixError, decode_matrix, series_name
from adapters.prometheus.promql import RawSeries

CHUNK_BYTES = 64 * 1024
# What the parser takes at a time: it turns all of it into events before the first is checked, and a
# buffer of brackets is an event each.
PARSE_BYTES = 16 * 1024
MAX_DEPTH = 32  # a matrix nests 6 deep; room for fields Prometheus may add, none for a nesting attack
MAX_LABELS = 512  # labels per series; Prometheus's own limits are far lower in practice
MIB = 1024 * 1024


def byte_size(count: int) -> str:
    """``64 MiB`` for whole mebibytes, else bytes."""
    return f"{count // MIB} MiB" if count % MIB == 0 else f"{count:,} bytes"


@dataclass
class AnswerBudget:
    """What the answers to one query (all its chunks, read in parallel threads) may take.

    Bytes add up over the chunks: they bound the decoded samples kept. Series are counted per answer:
    every chunk of a range query holds the same series.
    """

    max_bytes: int
    max_series: int
    bytes_read: int = 0
    abandoned: bool = False  # the query failed or was cancelled: its other requests stop reading
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def take(self, count: int, what: str) -> None:
        if self.abandoned:
            raise PrometheusError(f"{what}: abandoned (another request of the query failed, or it was cancelled)")
        with self._lock:
            self.bytes_read += count
            over = self.bytes_read > self.max_bytes
        if over:
            raise PrometheusAnswerTooLarge(
                f"{what}: the answer is over {byte_size(self.max_bytes)} (prometheus.max_answer_bytes); read "
                "up to there and dropped: narrow the query or its range, or raise the limit"
            )

    def give_back(self, count: int) -> None:
        """Bytes of an answer that was refused: its retry counts them again."""
        with self._lock:
            self.bytes_read -= count


class BoundedBody:
    """A readable over a streamed ``requests`` response: at most the budget's bytes, by the deadline."""

    def __init__(
        self, response: requests.Response, deadline: float, budget: AnswerBudget | None, what: str, timeout_s: float
    ) -> None:
        self._response = response
        self._deadline = deadline
        self._budget = budget
        self._what = what
        self._timeout_s = timeout_s
        self._chunks: Iterator[bytes] = response.raw.stream(CHUNK_BYTES, decode_content=True)
        self._pending = bytearray()
        self.taken = 0  # bytes counted against the budget

    def read(self, size: int = -1) -> bytes:
        """``size`` bytes of the body, fewer only at its end (ijson's parser takes a short read for the end)."""
        wanted = CHUNK_BYTES if size < 0 else size
        while len(self._pending) < wanted and (chunk := self._next_chunk()):
            self._pending += chunk
        taken = bytes(self._pending[:wanted])
        del self._pending[:wanted]
        return taken

    def _next_chunk(self) -> bytes:
        self._wait_at_most_until_the_deadline()
        try:
            chunk = next(self._chunks, b"")
        except (urllib3.exceptions.ReadTimeoutError, TimeoutError):
            raise self.timed_out() from None
        except (urllib3.exceptions.ProtocolError, urllib3.exceptions.DecodeError, OSError) as error:
            raise PrometheusBadResponse(f"{self._what}: the answer broke off: {error}") from None
        if self._budget is not None:
            self.taken += len(chunk)
            self._budget.take(len(chunk), self._what)
        return chunk

    def read_at_most(self, limit: int) -> bytes:
        """The start of the body, up to ``limit`` bytes (an error's explanation)."""
        parts: list[bytes] = []
        size = 0
        while size < limit and (chunk := self._next_chunk()):
            parts.append(chunk)
            size += len(chunk)
        return b"".join(parts)[:limit]

    def timed_out(self) -> PrometheusTimeout:
        return PrometheusTimeout(
            f"{self._what}: no complete answer within the query timeout of {self._timeout_s:g} s (Prometheus "
            "answered, but too slowly); raise --query-timeout (prometheus.timeout) or shorten the range"
        )

    def _wait_at_most_until_the_deadline(self) -> None:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise self.timed_out()
        # The socket's own timeout would restart at every byte; the request's deadline does not.
        connection = getattr(self._response.raw, "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            sock.settimeout(remaining)


def read_matrix(body: BoundedBody, max_series: int, max_points: int, what: str) -> list[RawSeries]:
    """Decode a ``query_range`` answer as it streams in (module docstring); errors name ``what``."""
    try:
        return _read_matrix(body, max_series, max_points, what)
    except PrometheusError as error:  # a bound crossed, from here or from the body's budget
        error.__traceback__ = None
        refused: PrometheusError = error
    except MatrixError as error:
        refused = PrometheusBadResponse(f"{what}: {error}")
    except ijson.JSONError as error:
        # ijson's message goes on with an excerpt of the input over several lines: its first line only.
        reason = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        refused = PrometheusBadResponse(f"{what}: not valid JSON ({reason})")
    except (ValueError, OverflowError, RecursionError) as error:
        # Values decode_matrix converts (a label value that is a huge number, for one).
        refused = PrometheusBadResponse(f"{what}: not a Prometheus API result: {str(error)[:200]}")
    # Raised out here, with no traceback into the parser: its frame, holding the events it had parsed
    # ahead (up to a buffer's worth), goes now rather than with the error, which callers keep a while.
    raise refused


# Depths (open containers) in a matrix answer: {status, data: {resultType, result: [ {metric: {..},
# values: [[t, v], ..]} ]}}. Tracked by depth and the keys above, not by ijson's prefixes: those are
# strings as long as the nesting, built for every level of a buffer before a check could see one.
_RESULT, _SERIES, _SERIES_FIELD, _SAMPLE = 3, 4, 5, 6
_SCALARS = frozenset(("null", "boolean", "integer", "double", "number", "string"))


@dataclass
class _Matrix:
    """What has been read of an answer so far."""

    max_series: int
    max_points: int
    what: str
    status: object = None
    result_type: object = None
    saw_result: bool = False
    decoded: list[RawSeries] = field(default_factory=list)

    def start_series(self) -> ijson.ObjectBuilder:
        if len(self.decoded) >= self.max_series:
            raise PrometheusAnswerTooLarge(
                f"{self.what}: the answer has more than {self.max_series:,} series (prometheus.max_series); read "
                "up to there and dropped: aggregate the query (sum by ...) or raise the limit"
            )
        return ijson.ObjectBuilder()

    def check(self) -> list[RawSeries]:
        if self.status != "success" or not self.saw_result:
            shown_status = str(self.status)[:40]
            raise MatrixError(f"not a Prometheus API result (status {shown_status!r}, data.result {self.saw_result})")
        if self.result_type != "matrix":
            raise MatrixError(f"expected a matrix result, got resultType {str(self.result_type)[:40]!r}")
        return self.decoded


def _read_matrix(body: BoundedBody, max_series: int, max_points: int, what: str) -> list[RawSeries]:
    matrix = _Matrix(max_series, max_points, what)
    depth = labels = 0
    keys: list[object] = [None] * (_SERIES_FIELD + 1)  # the current key of the map open at each depth
    builder: ijson.ObjectBuilder | None = None
    values: list[list[Any]] | None = None  # the current series' samples, once read
    events = ijson.basic_parse(body, buf_size=PARSE_BYTES, use_float=True)
    for event, value in events:
        opens = event == "start_map" or event == "start_array"
        scalar = event in _SCALARS
        if opens:
            depth += 1
            if depth > MAX_DEPTH:
                raise MatrixError(f"JSON nested deeper than {MAX_DEPTH} levels")
        in_result = keys[1] == "data" and keys[2] == "result"
        if builder is not None:
            if event == "start_array" and depth == _SERIES_FIELD and keys[_SERIES] == "values":
                values = _read_values(events, max_points, builder.value)  # to its closing bracket, in a tight loop
                builder.event("start_array", None)
                event = "end_array"  # the builder holds an empty list in its place until the series ends
            builder.event(event, value)
            if event == "map_key" and depth == _SERIES_FIELD and keys[_SERIES] == "metric":
                labels += 1
                if labels > MAX_LABELS:
                    raise MatrixError(f"a series has more than {MAX_LABELS} labels")
            elif event == "end_map" and depth == _SERIES:
                series = builder.value if values is None else builder.value | {"values": values}
                matrix.decoded.extend(decode_matrix([series]))
                builder = None
        elif in_result and ((opens and depth == _SERIES) or (scalar and depth == _RESULT)):
            if event != "start_map":
                raise MatrixError("matrix entry without a metric object")
            builder, values, labels = matrix.start_series(), None, 0
            builder.event(event, value)
        elif in_result and ((opens and depth == _RESULT) or (scalar and depth == _RESULT - 1)):
            if event != "start_array":
                raise MatrixError(f"expected a matrix result, got {str(value)[:40] if scalar else 'an object'}")
            matrix.saw_result = True
        elif scalar and depth == 1 and keys[1] == "status":
            matrix.status = value
        elif scalar and depth == 2 and keys[1] == "data" and keys[2] == "resultType":
            matrix.result_type = value
        if event == "map_key" and depth <= _SERIES_FIELD:
            keys[depth] = value
        elif event in ("end_map", "end_array"):
            if depth <= _SERIES_FIELD:
                keys[depth] = None
            depth -= 1
    return matrix.check()


def _read_values(events: Iterator[tuple[str, Any]], max_points: int, series: object) -> list[list[Any]]:
    """One series' samples, from just after the ``[`` of its ``values`` to just after their ``]``.

    Samples are nearly all of an answer: they are read here in a loop of their own, with no more per
    event than a sample's shape needs. A sample is a pair of scalars; anything else is refused here,
    its types are checked by ``decode_matrix``. ``series``: what has been read of the series, for its name.
    """
    values: list[list[Any]] = []
    labels = series.get("metric") if isinstance(series, dict) else None
    name = f"series {series_name(labels)}" if isinstance(labels, dict) else "a series (before its labels)"
    not_a_pair = f"{name}: a sample is not a [timestamp, value] pair"
    for event, _ in events:
        if event == "end_array":
            return values
        if event != "start_array":
            raise MatrixError(not_a_pair)
        if len(values) == max_points:
            raise MatrixError(f"{name} has more than the {max_points:,} samples asked for")
        pair: list[Any] = []
        for event_in_pair, scalar in events:
            if event_in_pair == "end_array":
                break
            if event_in_pair not in _SCALARS or len(pair) == 2:
                raise MatrixError(not_a_pair)
            pair.append(scalar)
        values.append(pair)
    return values  # the body ended inside the samples: the parser has said so already


def unavailable(error: Exception, what: str, timeout_s: float) -> PrometheusUnavailable:
    """The error for a request that got no answer: a read timeout is a slow query, the rest unreachable.

    With urllib3's retries off, requests reports a read timeout as a ConnectionError around a
    MaxRetryError around the ReadTimeoutError: the innermost reason decides.
    """
    reason = _reason(error)
    if isinstance(reason, urllib3.exceptions.NewConnectionError):  # refused: a ConnectTimeoutError by its class
        return PrometheusUnavailable(f"{what}: cannot reach Prometheus: {reason}")
    if isinstance(error, requests.ConnectTimeout) or isinstance(reason, urllib3.exceptions.ConnectTimeoutError):
        return PrometheusUnavailable(f"{what}: cannot reach Prometheus: connecting timed out after {timeout_s:g} s")
    if isinstance(error, requests.Timeout) or isinstance(reason, urllib3.exceptions.ReadTimeoutError):
        return PrometheusTimeout(
            f"{what}: Prometheus accepted the query but did not answer within the query timeout of {timeout_s:g} s; "
            "raise --query-timeout (prometheus.timeout) or shorten the range"
        )
    return PrometheusUnavailable(f"{what}: cannot reach Prometheus: {reason}")


def _reason(error: Exception) -> object:
    # urllib3 wraps the cause in MaxRetryError("Max retries exceeded"), misleading with retries off.
    wrapped = error.args[0] if error.args else None
    return wrapped.reason if isinstance(wrapped, urllib3.exceptions.MaxRetryError) else error
