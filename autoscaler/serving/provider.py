"""What the API reads: an immutable snapshot of served values behind a narrow interface.

The request path only ever reads ``provider.snapshot`` (one attribute load) and filters it: no I/O,
no model work, no locks. The refresher builds a whole new :class:`Snapshot` and swaps it in with a
single assignment, so a reader sees either the old snapshot or the new one, never a mix.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from adapters.types import ScheduledWindow
from autoscaler.echoes import echo
from autoscaler.quantity import format_quantity
from autoscaler.selectors import Operator, Selector
from autoscaler.serving.provenance import Provenance

# Past its staleness TTL a metric serves its last value (hold), a static value, or an error (503).
FallbackMode = Literal["hold", "static", "error"]
# The longest Retry-After of a warm-up answer. client-go (kubectl, the HPA controller) waits as long as
# Retry-After says and retries a GET up to 10 times: a minute-long value would hold an HPA worker for
# ten minutes. A short one keeps it to seconds, and kubectl gets the value once the forecast is in.
RETRY_AFTER_MAX_S = 10


class ProviderError(Exception):
    """Base of the errors the API turns into ``metav1.Status`` objects."""


class MetricNotFound(ProviderError):
    def __init__(self, metric: str, reason: str) -> None:
        super().__init__(reason)
        self.metric = metric


class MetricUnavailable(ProviderError):
    """The metric exists but its value cannot be trusted now (stale past its TTL, fallback ``error``)."""

    def __init__(self, metric: str, reason: str) -> None:
        super().__init__(reason)
        self.metric = metric


class MetricWarmingUp(MetricUnavailable):
    """No forecast has been served yet; the first is due by ``due`` (ask again in ``retry_after_s``)."""

    def __init__(self, metric: str, due: datetime, now: datetime) -> None:
        left = math.ceil((due - now).total_seconds())
        when = f"{due.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"
        late = f"was due by {when} and is late (see /readyz?verbose)"
        timing = f"is due by {when} (in {left} s)" if left > 0 else late
        message = f"gpu-autoscaler is warming up: the first forecast {timing}; no value of {metric!r} yet"
        super().__init__(metric, message)
        self.due = due
        self.retry_after_s = min(max(left, 1), RETRY_AFTER_MAX_S)


def not_served(metric: str, served: Iterable[str], noun: str = "external metric") -> str:
    """Why a metric name is unknown: this configuration does not serve it, and what it does serve."""
    names = ", ".join(sorted(served)) or "none"
    return f"{noun} {echo(metric)!r} is not served by this configuration; served: {names}"


@dataclass(frozen=True)
class MetricInfo:
    """A metric the service knows, whether or not it has values yet."""

    name: str
    description: str
    unit: str = ""
    # After the TTL, serve the last value (hold), a static value, or an error so the HPA holds.
    fallback: FallbackMode = "hold"
    fallback_value: float | None = None
    staleness_ttl: timedelta = timedelta(minutes=15)


@dataclass(frozen=True)
class PublishedRecord:
    """A provenance record's essentials as a GPUForecast object holds them: the forecast was made in
    another process (docs/high-availability.md), so its forecast and history are not here."""

    model: str | None = None
    quantile: float | None = None
    lead_time_seconds: int | None = None
    lead_time_source: str | None = None
    windows: tuple[ScheduledWindow, ...] = ()
    # The item's provenance fields as the object held them, passed on unchanged when the value is
    # published again before a forecast of this process replaces it (a shard taken over): its object
    # then says what it said, and a publisher seeded with it has nothing to write.
    as_published: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ServedSeries:
    """One served value: a metric name, its labels and the value the HPA reads."""

    metric: str
    labels: Mapping[str, str]
    value: float
    # When the newest data point behind this value was read (not when it was pulled or computed), so
    # a source that brings nothing new makes the value age, and its TTL and fallback apply.
    timestamp: datetime
    # None: served in every namespace; otherwise only in this one.
    namespace: str | None = None
    window_seconds: int | None = None
    explanation: str = ""
    # What the value was computed from (forecast, model, windows, limits); never read on the metrics
    # path. None for values restored after a restart.
    provenance: Provenance | None = None
    # For values read from GPUForecast objects: what the publishing process recorded.
    published: PublishedRecord | None = None
    # The ExternalMetricValue item minus metricName, made once when the series is made: the request
    # path then only copies it (formatting times and quantities per request cost a fifth of it).
    item: Mapping[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.timestamp.utcoffset() is None:
            raise ValueError("ServedSeries.timestamp must be timezone-aware")
        item: dict[str, Any] = {
            "metricLabels": dict(self.labels),
            "timestamp": self.timestamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "value": format_quantity(self.value),
        }
        if self.window_seconds is not None:
            item["window"] = self.window_seconds
        object.__setattr__(self, "item", item)

    def item_json(self) -> str:
        """``item`` as JSON object members (``json.dumps`` without its braces), made at the first request
        that serves it and kept: the answer is then joined from strings, not encoded per request."""
        members: str | None = self.__dict__.get("_item_json")
        if members is None:  # two threads may both make it: the same string, either kept
            members = json.dumps(self.item)[1:-1]
            object.__setattr__(self, "_item_json", members)
        return members


# metric -> label key -> label value -> positions of the series carrying that value
LabelIndex = dict[str, dict[str, dict[str, frozenset[int]]]]


def _index(series: Mapping[str, tuple[ServedSeries, ...]]) -> LabelIndex:
    index: LabelIndex = {}
    for metric, series_list in series.items():
        by_key: dict[str, dict[str, set[int]]] = {}
        for position, served in enumerate(series_list):
            for key, value in served.labels.items():
                by_key.setdefault(key, {}).setdefault(value, set()).add(position)
        index[metric] = {key: {v: frozenset(p) for v, p in values.items()} for key, values in by_key.items()}
    return index


@dataclass(frozen=True)
class Snapshot:
    created_at: datetime
    metrics: Mapping[str, MetricInfo]
    series: Mapping[str, tuple[ServedSeries, ...]]
    # Why the last refresh failed, if it did; the snapshot is then the last good one.
    last_error: str | None = None
    # Built with the snapshot (in the refresher), so a selector finds its series without a scan.
    label_index: LabelIndex = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "label_index", _index(self.series))

    def candidates(self, metric: str, selector: Selector) -> Sequence[ServedSeries]:
        """The series that may match: narrowed by the selector's = and in requirements, if any."""
        series_list = self.series.get(metric, ())
        by_key = self.label_index.get(metric, {})
        positions: frozenset[int] | None = None
        for requirement in selector.requirements:
            if requirement.operator not in (Operator.EQUALS, Operator.IN):
                continue
            values = by_key.get(requirement.key, {})
            found = frozenset().union(*(values.get(v, frozenset()) for v in requirement.values))
            positions = found if positions is None else positions & found
        if positions is None:
            return series_list
        return [series_list[position] for position in sorted(positions)]


def empty_snapshot(metrics: Sequence[MetricInfo], now: datetime | None = None) -> Snapshot:
    return Snapshot(
        created_at=now or datetime.now(UTC),
        metrics={info.name: info for info in metrics},
        series={info.name: () for info in metrics},
    )


class SnapshotSource(Protocol):
    """Whatever holds the whole current snapshot (``SnapshotProvider`` is one): what inspection reads."""

    @property
    def snapshot(self) -> Snapshot: ...


class MetricsProvider(Protocol):
    """The only thing the external metrics API knows about the rest of the service."""

    def list_metrics(self) -> Sequence[MetricInfo]: ...

    def get_metric(self, namespace: str, name: str, selector: Selector) -> Sequence[ServedSeries]: ...


class SnapshotProvider:
    """Serves the current snapshot; applies each metric's staleness fallback at read time."""

    def __init__(self, snapshot: Snapshot, clock: Any = None) -> None:
        self.snapshot = snapshot
        self._clock = clock or (lambda: datetime.now(UTC))
        self._on_swap: list[Callable[[], None]] = []
        # While no value has been served: when the first forecast is due (the refresher says); None
        # otherwise, and then a metric without series is a 404, not a warm-up.
        self.first_forecast_due: datetime | None = None

    def expect_first_forecast(self, due: datetime) -> None:
        """Warming up: until a snapshot with values is swapped in, metrics answer that it is due by ``due``."""
        if not any(self.snapshot.series.values()):
            self.first_forecast_due = due

    def swap(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        if any(snapshot.series.values()):
            self.first_forecast_due = None
        for listener in tuple(self._on_swap):
            listener()

    def on_swap(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` after every swap (a push stream re-reads then); returns its unsubscribe."""
        self._on_swap.append(listener)
        return lambda: self._on_swap.remove(listener)

    def list_metrics(self) -> Sequence[MetricInfo]:
        return list(self.snapshot.metrics.values())

    def get_metric(self, namespace: str, name: str, selector: Selector) -> Sequence[ServedSeries]:
        snapshot = self.snapshot  # one read: the rest works on a consistent snapshot
        key = name.lower()
        info = snapshot.metrics.get(key)
        if info is None:
            raise MetricNotFound(name, not_served(name, snapshot.metrics))
        matching = [
            series
            for series in snapshot.candidates(key, selector)
            if (series.namespace is None or series.namespace == namespace) and selector.matches(series.labels)
        ]
        due = self.first_forecast_due
        if not matching and due is not None and not any(snapshot.series.values()):
            raise MetricWarmingUp(name, due, self._clock())
        if not matching:
            # An empty list makes the HPA report an error anyway; a 404 says why.
            where = f"external metric {echo(name)!r} in namespace {echo(namespace)!r}"
            raise MetricNotFound(name, f"no series of {where} matches the selector")
        now = self._clock()
        return [apply_staleness(info, series, now) for series in matching]


def apply_staleness(info: MetricInfo, series: ServedSeries, now: datetime) -> ServedSeries:
    """The series as the API serves it now: past the TTL its metric's fallback applies."""
    age = now - series.timestamp
    if age <= info.staleness_ttl or info.fallback == "hold":
        return series
    if info.fallback == "error":
        raise MetricUnavailable(
            info.name,
            f"external metric {info.name!r} is stale ({int(age.total_seconds())} s old, "
            f"TTL {int(info.staleness_ttl.total_seconds())} s); the HPA keeps its current replicas",
        )
    assert info.fallback_value is not None  # noqa: S101 - settings validation guarantees it
    return ServedSeries(
        metric=series.metric,
        labels=series.labels,
        value=info.fallback_value,
        timestamp=series.timestamp,
        namespace=series.namespace,
        window_seconds=series.window_seconds,
        explanation=f"stale for {int(age.total_seconds())} s: static fallback {info.fallback_value}",
        provenance=series.provenance,
        published=series.published,
    )
