"""The typed reading of one served series that the inspection API and the web page share.

Nothing here touches aiohttp: a view is made from a snapshot, a clock reading and the request's
parameters, and rendered by ``inspection`` (JSON) or ``page`` (HTML).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

import pandas as pd

from adapters.types import ScheduledWindow
from autoscaler.durations import parse_duration
from autoscaler.provider import MetricInfo, MetricUnavailable, ServedSeries, Snapshot, apply_staleness
from autoscaler.selectors import SelectorError, parse_selector
from forecast.types import Forecast

DEFAULT_HISTORY = timedelta(hours=6)


class InspectionError(ValueError):
    """A request parameter that cannot be used; becomes a 400 with the message."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


@dataclass(frozen=True)
class SeriesView:
    """One served series as people inspect it: the value after staleness, and what it came from."""

    info: MetricInfo
    series: ServedSeries
    value: float
    explanation: str
    stale_seconds: float
    model: str | None
    history: pd.Series
    forecast: Forecast | None
    quantile: float | None
    windows: tuple[ScheduledWindow, ...]
    lead_time_seconds: int | None
    lead_time_source: str | None
    scores: Mapping[str, Mapping[str, float]]
    notes: tuple[str, ...]
    fit_seconds: float | None

    @property
    def labels(self) -> Mapping[str, str]:
        return self.series.labels


def find_metric(snapshot: Snapshot, name: str) -> MetricInfo | None:
    # Metric names are matched case-insensitively, as the external metrics API does.
    return snapshot.metrics.get(name.lower())


def parse_history(text: str | None) -> timedelta:
    """The ``history`` query parameter: a duration with a unit such as ``6h`` (default) or ``90m``."""
    if text is None:
        return DEFAULT_HISTORY
    # One message for every refusal: the parsers' own would show Python's view of "inf" or "1e400".
    invalid = InspectionError("history", f"invalid history {text!r}: expected a duration with a unit, e.g. 6h or 90m")
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


def _float_or_none(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _whole_seconds(value: object) -> int | None:
    seconds = _float_or_none(value)
    return int(seconds) if seconds is not None and math.isfinite(seconds) else None


def _scores(raw: object) -> dict[str, dict[str, float]]:
    if not isinstance(raw, Mapping):
        return {}
    scores: dict[str, dict[str, float]] = {}
    for model, metrics in raw.items():
        if isinstance(metrics, Mapping):
            scores[str(model)] = {str(k): float(v) for k, v in metrics.items() if _float_or_none(v) is not None}
    return scores


def series_view(info: MetricInfo, series: ServedSeries, now: datetime, history: timedelta) -> SeriesView:
    """Read ``series.details`` (written by the refresher) defensively: any part may be missing."""
    details = series.details
    value, explanation = served_value(info, series, now)
    raw_history = details.get("history")
    raw_forecast = details.get("forecast")
    raw_windows = details.get("windows") or ()
    model = details.get("model")
    source = details.get("lead_time_source")
    notes = details.get("notes") or ()
    return SeriesView(
        info=info,
        series=series,
        value=value,
        explanation=explanation,
        stale_seconds=max(0.0, (now - series.timestamp).total_seconds()),
        model=model if isinstance(model, str) else None,
        history=history_tail(raw_history, history) if isinstance(raw_history, pd.Series) else pd.Series(dtype=float),
        forecast=raw_forecast if isinstance(raw_forecast, Forecast) else None,
        quantile=_float_or_none(details.get("quantile")),
        windows=tuple(window for window in raw_windows if isinstance(window, ScheduledWindow)),
        lead_time_seconds=_whole_seconds(details.get("lead_time_seconds")),
        lead_time_source=source if isinstance(source, str) else None,
        scores=_scores(details.get("scores")),
        notes=tuple(str(note) for note in notes),
        fit_seconds=_float_or_none(details.get("fit_seconds")),
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
