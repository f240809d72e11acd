"""The typed reading of one served series that the inspection API and the web page share.

Nothing here touches aiohttp: a view is made from a snapshot, a clock reading and the request's
parameters, and rendered by ``inspection`` (JSON) or ``page`` (HTML).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

import pandas as pd

from adapters.types import ScheduledWindow
from autoscaler.echoes import echo
from autoscaler.selectors import SelectorError, parse_selector
from autoscaler.serving.provenance import Provenance, TargetChoice
from autoscaler.serving.provider import (
    MetricInfo,
    MetricUnavailable,
    PublishedRecord,
    ServedSeries,
    Snapshot,
    apply_staleness,
)
from forecast.durations import parse_duration
from forecast.types import Forecast

DEFAULT_HISTORY = timedelta(hours=6)


class InspectionError(ValueError):
    """A request parameter that cannot be used; becomes a 400 with the message."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


_NOTHING_PUBLISHED = PublishedRecord()


@dataclass(frozen=True)
class SeriesView:
    """One served series as people inspect it: the value after staleness, and what it came from.

    ``provenance`` is the refresher's record; a value restored after a restart has none, and then
    every field read from it is empty, except those a GPUForecast object recorded (``published``).
    """

    info: MetricInfo
    series: ServedSeries
    value: float
    explanation: str
    stale_seconds: float
    history: pd.Series  # the tail of the history the forecast saw, as long as was asked for
    provenance: Provenance | None

    @property
    def labels(self) -> Mapping[str, str]:
        return self.series.labels

    @property
    def published(self) -> PublishedRecord:
        """What a GPUForecast object recorded, for values served from one (empty otherwise)."""
        return self.series.published or _NOTHING_PUBLISHED

    @property
    def model(self) -> str | None:
        return self.provenance.model if self.provenance else self.published.model

    @property
    def forecast(self) -> Forecast | None:
        return self.provenance.forecast if self.provenance else None

    @property
    def quantile(self) -> float | None:
        return self.provenance.quantile if self.provenance else self.published.quantile

    @property
    def windows(self) -> tuple[ScheduledWindow, ...]:
        return self.provenance.windows if self.provenance else self.published.windows

    @property
    def lead_time_seconds(self) -> int | None:
        return self.provenance.lead_time_seconds if self.provenance else self.published.lead_time_seconds

    @property
    def lead_time_source(self) -> str | None:
        return self.provenance.lead_time.source if self.provenance else self.published.lead_time_source

    @property
    def scores(self) -> Mapping[str, Mapping[str, float]]:
        return self.provenance.scores if self.provenance else {}

    @property
    def notes(self) -> tuple[str, ...]:
        return self.provenance.notes if self.provenance else ()

    @property
    def fit_seconds(self) -> float | None:
        return self.provenance.fit_seconds if self.provenance else None

    @property
    def target(self) -> TargetChoice | None:
        """With a service-level target: the candidate chosen, when and why (None otherwise)."""
        return self.provenance.target if self.provenance else None


def find_metric(snapshot: Snapshot, name: str) -> MetricInfo | None:
    # Metric names are matched case-insensitively, as the external metrics API does.
    return snapshot.metrics.get(name.lower())


def parse_history(text: str | None) -> timedelta:
    """The ``history`` query parameter: a duration with a unit such as ``6h`` (default) or ``90m``."""
    if text is None:
        return DEFAULT_HISTORY
    # One message for every refusal: the parsers' own would show Python's view of "inf" or "1e400".
    expected = "expected a duration with a unit, e.g. 6h or 90m"
    invalid = InspectionError("history", f"invalid history {echo(text)!r}: {expected}")
    try:
        float(text)
    except ValueError:
        pass
    else:  # a bare number, which the settings read as seconds, has no unit here
        raise invalid
    try:
        return parse_duration(text)
    except (ValueError, OverflowError):  # "99999999999w" overflows timedelta
        raise invalid from None


def history_tail(series: pd.Series, window: timedelta) -> pd.Series:
    """The last ``window`` of ``series``, counted back from its last timestamp."""
    if not series.index.is_monotonic_increasing:
        series = series.sort_index()
    if series.empty or window >= (series.index[-1] - series.index[0]).to_pytimedelta():
        return series
    cutoff = series.index[-1] - pd.Timedelta(window)
    return series.loc[cutoff:]


def served_value(info: MetricInfo, series: ServedSeries, now: datetime) -> tuple[float, str]:
    """The value an HPA reads now and why, by the provider's own staleness rule."""
    try:
        served = apply_staleness(info, series, now)
    except MetricUnavailable as error:
        return series.value, f"{error}: the external metrics API answers 503; last value {series.explanation}"
    return served.value, served.explanation


def series_view(info: MetricInfo, series: ServedSeries, now: datetime, history: timedelta) -> SeriesView:
    value, explanation = served_value(info, series, now)
    provenance = series.provenance
    return SeriesView(
        info=info,
        series=series,
        value=value,
        explanation=explanation,
        stale_seconds=max(0.0, (now - series.timestamp).total_seconds()),
        history=history_tail(provenance.history, history) if provenance else pd.Series(dtype=float),
        provenance=provenance,
    )


def views_of(
    snapshot: Snapshot, info: MetricInfo, now: datetime, history: timedelta, selector_text: str | None = None
) -> list[SeriesView]:
    """Every series of ``info`` matching the selector; raises InspectionError for a bad selector."""
    try:
        selector = parse_selector(selector_text)
    except SelectorError as error:
        raise InspectionError("labelSelector", f"invalid labelSelector: {error}") from None
    return [
        series_view(info, series, now, history)
        for series in snapshot.series.get(info.name, ())
        if selector.matches(series.labels)
    ]
