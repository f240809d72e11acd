"""The page's charts: matplotlib SVGs rendered in a worker thread and cached per snapshot."""

from __future__ import annotations

import asyncio
import io
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from html import escape

import numpy as np
import pandas as pd
from aiohttp import web
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MultipleLocator

from autoscaler.policy import figure
from autoscaler.serving.provider import Snapshot
from autoscaler.web.ops.views import SeriesView

MAX_CACHED_CHARTS = 256

# (metric, labels, history seconds, zoomed)
ChartKey = tuple[str, tuple[tuple[str, str], ...], float, bool]


class ChartCache:
    """SVG charts of one snapshot. A different snapshot object drops them all.

    Concurrent requests for the same chart share one rendering (a task), and a client that goes away
    does not cancel a rendering others wait for.
    """

    def __init__(self, max_entries: int = MAX_CACHED_CHARTS) -> None:
        self._max_entries = max_entries
        self._snapshot: Snapshot | None = None
        self._charts: dict[ChartKey, asyncio.Task[str]] = {}
        self._render_lock = asyncio.Lock()

    async def get(self, snapshot: Snapshot, key: ChartKey, render: Callable[[], str]) -> str:
        if snapshot is not self._snapshot:
            self._snapshot, self._charts = snapshot, {}
        task = self._charts.get(key)
        if task is None:
            if len(self._charts) >= self._max_entries:  # many history= values: forget the oldest
                self._charts.pop(next(iter(self._charts)))
            task = asyncio.create_task(self._render(render))
            self._charts[key] = task
        try:
            return await asyncio.shield(task)
        except Exception:
            if self._charts.get(key) is task:  # let the next request try again
                del self._charts[key]
            raise

    async def _render(self, render: Callable[[], str]) -> str:
        async with self._render_lock:
            return await asyncio.to_thread(render)


CHARTS = web.AppKey("ui_charts", ChartCache)


async def charts_for(
    request: web.Request,
    snapshot: Snapshot,
    views: Sequence[SeriesView],
    history: timedelta,
    *,
    zoomed: bool,
    queued: Sequence[pd.Series | None] = (),
) -> list[str | None]:
    """``queued``: each view's record of GPUs waiting in Kueue's queues (``queued_views.queued_history``)."""
    cache = request.app[CHARTS]

    async def one(view: SeriesView, waiting: pd.Series | None) -> str | None:
        if not len(view.history) and view.forecast is None:
            return None
        key = (view.info.name, tuple(sorted(view.labels.items())), history.total_seconds(), zoomed)
        return await cache.get(snapshot, key, lambda: render_chart(view, zoomed=zoomed, queued=waiting))

    waiting = list(queued) or [None] * len(views)
    return list(await asyncio.gather(*(one(view, line) for view, line in zip(views, waiting, strict=True))))


# Chart colours: observed, forecast, band, windows, served value, time markers.
OBSERVED, FORECAST, WINDOW, SERVED, MARKER = "#1f4e79", "#e07b00", "#7b3fa0", "#c62828", "#5b6573"
QUEUED = "#2e7d32"  # GPUs waiting in Kueue's queues: a signal of its own


class TimeAxis:
    """Times as hours from the moment the forecast was made, labelled with UTC clock times.

    Plain floats keep matplotlib's date machinery (untyped) out; ticks fall on round clock times.
    """

    STEPS_HOURS = (0.25, 0.5, 1, 2, 3, 6, 12, 24, 48, 96, 168)

    def __init__(self, origin: datetime) -> None:
        self.origin = pd.Timestamp(origin).tz_convert("UTC")

    def hours(self, stamps: pd.DatetimeIndex) -> np.ndarray:
        stamps = stamps.tz_localize("UTC") if stamps.tz is None else stamps.tz_convert("UTC")
        return np.asarray((stamps - self.origin) / pd.Timedelta(hours=1), dtype=np.float64)

    def hour(self, moment: datetime) -> float:
        return float((pd.Timestamp(moment).tz_convert("UTC") - self.origin) / pd.Timedelta(hours=1))

    def apply(self, axes: Axes) -> None:
        low, high = axes.get_xlim()
        step = next((s for s in self.STEPS_HOURS if (high - low) / s <= 8), self.STEPS_HOURS[-1])
        # Offset the ticks so they land on multiples of the step in clock time, not relative to now.
        past_boundary = (self.origin - self.origin.floor(pd.Timedelta(hours=step))) / pd.Timedelta(hours=1)
        axes.xaxis.set_major_locator(MultipleLocator(step, offset=-past_boundary % step))
        clock_format = "%H:%M" if high - low <= 36 else "%d %b %H:%M"

        def label(hours: float, _position: int | None = None) -> str:
            # Rounded: float hours land a hair before the minute (03:59:59.99 must read 04:00).
            return f"{(self.origin + pd.Timedelta(hours=hours)).round('1min'):{clock_format}}"

        axes.xaxis.set_major_formatter(FuncFormatter(label))


def band_level(view: SeriesView) -> float | None:
    """The quantile drawn as the upper band: the policy's, else the highest one forecast."""
    if view.forecast is None or not view.forecast.quantiles:
        return None
    if view.quantile is not None and view.quantile in view.forecast.quantiles:
        return view.quantile
    return max(view.forecast.quantiles)


# Numbers on the page read exactly as the explanations write them (one function, the policy's).
number = figure


# The default view: the last hour of history and the forecast up to the lead time, where the value
# is decided. The whole history is the same chart unzoomed.
ZOOM_HOURS = 1.0


def render_chart(view: SeriesView, *, zoomed: bool = False, queued: pd.Series | None = None) -> str:
    """History, forecast mean, upper band, scheduled windows and the served value as inline SVG; with
    ``queued``, the GPUs waiting in Kueue's queues in the series' pool (``queued_views``) as a line of its own.

    ``zoomed``: the axes span the last ``ZOOM_HOURS`` and the lead time, and the forecast is drawn up to
    the lead time (the caller passes that much history). Uses a bare ``Figure`` (no pyplot), so nothing
    global is touched and threads may call it.
    """
    figure = Figure(figsize=(10, 3.6), dpi=96, layout="constrained")
    axes = figure.add_subplot()
    time_axis = TimeAxis(view.series.timestamp)
    lead_end = _lead_end(view, time_axis)
    until = (lead_end or 0.25) if zoomed else None  # no lead time known: a quarter of an hour ahead
    if len(view.history):
        history_hours = time_axis.hours(pd.DatetimeIndex(view.history.index))
        axes.plot(history_hours, view.history.to_numpy(dtype=float), color=OBSERVED, linewidth=1.4, label="observed")
    if queued is not None and len(queued) and float(queued.max()) > 0:  # no line of zeros where Kueue is idle
        hours = time_axis.hours(pd.DatetimeIndex(queued.index))
        axes.step(hours, queued.to_numpy(dtype=float), where="post", color=QUEUED, linewidth=1.2, label="Kueue waiting")
    _draw_forecast(axes, time_axis, view, until)
    _draw_windows(axes, time_axis, view)
    _draw_served(axes, view)
    axes.axvline(0.0, color=MARKER, linestyle=":", linewidth=1.2, label="forecast made")
    if view.lead_time_seconds:
        axes.axvline(lead_end, color=MARKER, linestyle="-.", linewidth=1.0, label="+ lead time")
    if until is not None:
        axes.set_xlim(-ZOOM_HOURS, until + 0.04 * (ZOOM_HOURS + until))
    time_axis.apply(axes)
    axes.set_xlabel("time (UTC)")
    axes.set_ylabel(view.info.unit or view.info.name)
    axes.grid(alpha=0.3)
    axes.margins(y=0.08)
    figure.legend(loc="outside upper center", fontsize=8, ncols=5, frameon=False)
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    return inline_svg(buffer.getvalue(), title=f"{view.info.name} {format_labels(view.labels)}")


def _lead_end(view: SeriesView, time_axis: TimeAxis) -> float:
    """Where the steps the value was decided on end, in the chart's hours: one lead time after the decision
    (which may come a little after the newest data point, the chart's origin)."""
    lead_hours = view.lead_time_seconds / 3600 if view.lead_time_seconds else 0.0
    decided = time_axis.hour(view.provenance.decided_at) if view.provenance is not None else 0.0
    return max(decided, 0.0) + lead_hours


def _draw_forecast(axes: Axes, time_axis: TimeAxis, view: SeriesView, until: float | None) -> None:
    """The forecast mean and its upper band; only the steps up to ``until`` hours, if given (the steps the
    served value is decided on; at least two, so that there is a line)."""
    if view.forecast is None:
        return
    steps = time_axis.hours(view.forecast.timestamps)
    shown = np.ones(len(steps), dtype=bool)
    if until is not None:
        shown = (steps <= until + 1e-9) | (np.arange(len(steps)) < 2)
    steps, mean = steps[shown], view.forecast.mean[shown]
    axes.plot(steps, mean, color=FORECAST, linestyle="--", linewidth=1.6, label="forecast mean")
    level = band_level(view)
    if level is not None:
        upper = view.forecast.quantiles[level][shown]
        axes.fill_between(steps, mean, upper, color=FORECAST, alpha=0.22, label=f"p{level * 100:g} band")
        axes.plot(steps, upper, color=FORECAST, linewidth=0.9)


def _draw_windows(axes: Axes, time_axis: TimeAxis, view: SeriesView) -> None:
    for position, window in enumerate(view.windows):
        start = time_axis.hour(window.start)
        axes.axvspan(
            start,
            time_axis.hour(window.end),
            color=WINDOW,
            alpha=0.14,
            label="scheduled window" if position == 0 else None,
        )
        # Named at the foot of its span (x in data units, y in axes units) so it stays clear of the lines.
        axes.text(
            start,
            0.02 + 0.07 * (position % 3),
            f" {window.name} +{window.gpus:g}",
            transform=axes.get_xaxis_transform(),
            color=WINDOW,
            fontsize=8,
            clip_on=True,
        )


def _draw_served(axes: Axes, view: SeriesView) -> None:
    """The served value where it belongs: a level on the demand axis, or for headroom, the gap.

    Headroom is GPUs on top of those requested now, so it is drawn as the band between requested-now
    and the demand it provisions for; a line at its own value would sit far below the demand curve.
    """
    served = view.series.value  # the snapshot's value: the chart is cached per snapshot, not per clock
    requested_now = view.provenance.requested_now if view.provenance else None
    if requested_now is None or not math.isfinite(requested_now):
        axes.axhline(served, color=SERVED, linewidth=1.6, label=f"served {number(served)}")
        return
    label = f"requested now {number(requested_now)}"
    axes.axhline(requested_now, color=OBSERVED, linestyle="--", linewidth=1.0, label=label)
    provisioned = requested_now + served
    axes.axhline(provisioned, color=SERVED, linewidth=1.2, label=f"provisioned for {number(provisioned)}")
    # The headroom is what is held from now until a node launched now would be ready.
    end = view.lead_time_seconds / 3600 if view.lead_time_seconds else 0.25
    # Hatched, not filled: a solid band would blend with the forecast's quantile band it overlaps.
    axes.fill_between(
        [0.0, end], requested_now, provisioned, facecolor="none", edgecolor=SERVED, hatch="///", linewidth=0.0,
        label=f"headroom served {number(served)}",
    )  # fmt: skip
    axes.annotate(
        f"headroom {number(served)}",
        xy=(0.0, provisioned),
        xytext=(-6, 4),
        textcoords="offset points",
        ha="right",
        color=SERVED,
        fontsize=8,
    )


def inline_svg(document: str, *, title: str) -> str:
    """An SVG file made fit to inline in HTML: no XML prolog, scales to its container, labelled."""
    svg = document[document.index("<svg") :]
    root_end = svg.index(">")
    root = re.sub(r'\s(width|height)="[^"]*"', "", svg[:root_end])
    return f'{root} role="img" aria-label="{escape(title)}"{svg[root_end:]}'


def format_labels(labels: Mapping[str, str]) -> str:
    return ", ".join(f"{key}={value}" for key, value in sorted(labels.items())) or "(no labels)"


def with_unit(value: float, unit: str) -> str:
    """``value`` as a person reads it: GPUs and percent after the number; a small rate per second
    on the scale where it is at least 0.1 (per minute, per hour), with the served number beside."""
    if unit != "1/s" or not math.isfinite(value) or value == 0 or abs(value) >= 0.1:
        return f"{number(value)} {_UNIT_WORDS.get(unit, unit)}".rstrip()
    per_minute = value * 60
    scaled, scale = (per_minute, "minute") if abs(per_minute) >= 0.1 else (per_minute * 60, "hour")
    return f"{number(scaled)} per {scale} ({number(value)} per second)"


_UNIT_WORDS = {"1/s": "per second", "%": "%"}
