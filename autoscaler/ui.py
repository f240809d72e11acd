"""The web page: ``/`` lists the metrics, ``/ui/{metric}`` shows each series with its chart and reasons.

Everything is rendered on the server: charts are matplotlib SVGs inlined into the HTML and the
stylesheet is inlined too, so the page works with no internet access. Charts are drawn in a worker
thread (one at a time: matplotlib is not thread-safe) and cached per snapshot object, so reloading a
page costs nothing until the refresher swaps in a new snapshot. All text is HTML-escaped.
"""

from __future__ import annotations

import asyncio
import io
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from html import escape
from importlib import resources
from urllib.parse import quote

import numpy as np
import pandas as pd
from aiohttp import web
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MultipleLocator

from autoscaler import inspection
from autoscaler.provider import MetricInfo, Snapshot

REFRESH_SECONDS = 30
MAX_CACHED_CHARTS = 256

ChartKey = tuple[str, tuple[tuple[str, str], ...], float]


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
STYLESHEET = web.AppKey("ui_stylesheet", str)

# Chart colours: observed, forecast, band, windows, served value, time markers.
OBSERVED, FORECAST, WINDOW, SERVED, MARKER = "#1f4e79", "#e07b00", "#7b3fa0", "#c62828", "#5b6573"


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


def band_level(view: inspection.SeriesView) -> float | None:
    """The quantile drawn as the upper band: the policy's, else the highest one forecast."""
    if view.forecast is None or not view.forecast.quantiles:
        return None
    if view.quantile is not None and view.quantile in view.forecast.quantiles:
        return view.quantile
    return max(view.forecast.quantiles)


def number(value: float | None, digits: int = 2) -> str:
    """Fixed decimals; small values (request rates) keep three significant digits instead."""
    if value is None or not math.isfinite(value):
        return "n/a"
    if 0 < abs(value) < 1:
        return f"{value:.{max(digits, 3)}g}"
    return f"{value:.{digits}f}"


def render_chart(view: inspection.SeriesView) -> str:
    """History, forecast mean, upper band, scheduled windows and the served value as inline SVG.

    Uses a bare ``Figure`` (no pyplot), so nothing global is touched and threads may call it.
    """
    figure = Figure(figsize=(10, 3.6), dpi=96, layout="constrained")
    axes = figure.add_subplot()
    computed_at = view.series.timestamp
    time_axis = TimeAxis(computed_at)
    if len(view.history):
        history_hours = time_axis.hours(pd.DatetimeIndex(view.history.index))
        axes.plot(history_hours, view.history.to_numpy(dtype=float), color=OBSERVED, linewidth=1.4, label="observed")
    level = band_level(view)
    if view.forecast is not None:
        steps = time_axis.hours(view.forecast.timestamps)
        axes.plot(steps, view.forecast.mean, color=FORECAST, linestyle="--", linewidth=1.6, label="forecast mean")
        if level is not None:
            upper = view.forecast.quantiles[level]
            axes.fill_between(
                steps, view.forecast.mean, upper, color=FORECAST, alpha=0.22, label=f"p{level * 100:g} band"
            )
            axes.plot(steps, upper, color=FORECAST, linewidth=0.9)
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
    served = view.series.value  # the snapshot's value: the chart is cached per snapshot, not per clock
    axes.axhline(served, color=SERVED, linewidth=1.6, label=f"served {number(served)}")
    axes.axvline(0.0, color=MARKER, linestyle=":", linewidth=1.2, label="forecast made")
    if view.lead_time_seconds:
        axes.axvline(view.lead_time_seconds / 3600, color=MARKER, linestyle="-.", linewidth=1.0, label="+ lead time")
    time_axis.apply(axes)
    axes.set_xlabel("time (UTC)")
    axes.set_ylabel(view.info.unit or view.info.name)
    axes.grid(alpha=0.3)
    axes.margins(y=0.08)
    figure.legend(loc="outside upper center", fontsize=8, ncols=7, frameon=False)
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    return inline_svg(buffer.getvalue(), title=f"{view.info.name} {format_labels(view.labels)}")


def inline_svg(document: str, *, title: str) -> str:
    """An SVG file made fit to inline in HTML: no XML prolog, scales to its container, labelled."""
    svg = document[document.index("<svg") :]
    root_end = svg.index(">")
    root = re.sub(r'\s(width|height)="[^"]*"', "", svg[:root_end])
    return f'{root} role="img" aria-label="{escape(title)}"{svg[root_end:]}'


def format_labels(labels: Mapping[str, str]) -> str:
    return ", ".join(f"{key}={value}" for key, value in sorted(labels.items())) or "(no labels)"


def metric_href(name: str) -> str:
    return "/ui/" + quote(name, safe="")


def _when(moment: datetime) -> str:
    return f"{pd.Timestamp(moment).tz_convert('UTC'):%Y-%m-%d %H:%M:%S} UTC"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def page(request: web.Request, title: str, body: str, *, status: int = 200) -> web.Response:
    html = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="{REFRESH_SECONDS}">
<title>{escape(title)} · gpu-autoscaler</title>
<style>{request.app[STYLESHEET]}</style>
</head>
<body>
<main>
{body}
</main>
</body>
</html>
"""
    return web.Response(text=html, content_type="text/html", status=status)


def _nav() -> str:
    return (
        '<nav><a href="/">All metrics</a><a href="/api/v1/forecasts">JSON API</a>'
        '<a href="/openapi.json">OpenAPI</a><a href="/metrics">/metrics</a></nav>'
    )


def _snapshot_line(snapshot: Snapshot) -> str:
    line = f"Snapshot made {escape(_when(snapshot.created_at))}; this page reloads every {REFRESH_SECONDS} s."
    if snapshot.last_error:
        line += f' <span class="warning">Last refresh problem: {escape(snapshot.last_error)}</span>'
    return line


def index_body(snapshot: Snapshot, now: datetime) -> str:
    rows = []
    for info in snapshot.metrics.values():
        views = inspection.views_of(snapshot, info, now, timedelta(0))
        values = (
            "<br>".join(
                f'{escape(number(view.value))} <span class="muted">{escape(format_labels(view.labels))}</span>'
                for view in views
            )
            or '<span class="muted">no values yet</span>'
        )
        models = ", ".join(sorted({view.model for view in views if view.model})) or "-"
        oldest = max((view.stale_seconds for view in views), default=None)
        rows.append(
            f'<tr><td><a href="{escape(metric_href(info.name))}">{escape(info.name)}</a></td>'
            f"<td>{escape(info.description)}</td><td>{values}</td><td>{escape(models)}</td>"
            f'<td class="num">{escape(_duration(oldest)) if oldest is not None else "-"}</td></tr>'
        )
    table = (
        '<div class="table-wrap"><table><thead><tr><th>Metric</th><th>Description</th><th>Served value</th>'
        '<th>Model</th><th class="num">Oldest</th></tr></thead><tbody>' + "".join(rows) + "</tbody></table></div>"
    )
    return (
        f'<header class="page"><h1>gpu-autoscaler forecasts</h1><p>{_snapshot_line(snapshot)}</p>{_nav()}</header>'
        + (table if rows else "<p>No metrics are configured.</p>")
    )


def _fact(name: str, value: str, css: str = "") -> str:
    return (
        f'<div class="fact {css}"><span class="name">{escape(name)}</span>'
        f'<span class="number">{escape(value)}</span></div>'
    )


def _windows_table(view: inspection.SeriesView) -> str:
    if not view.windows:
        return '<p class="muted">No scheduled windows within the look-ahead.</p>'
    rows = "".join(
        f"<tr><td>{escape(w.namespace)}/{escape(w.name)}</td><td>{escape(w.source)}</td>"
        f"<td>{escape(_when(w.start))}</td><td>{escape(_when(w.end))}</td>"
        f'<td class="num">{escape(f"{w.gpus:g}")}</td></tr>'
        for w in view.windows
    )
    return (
        '<div class="table-wrap"><table><thead><tr><th>Window</th><th>Source</th><th>Start</th><th>End</th>'
        f'<th class="num">GPUs</th></tr></thead><tbody>{rows}</tbody></table></div>'
    )


SCORE_COLUMNS = (
    ("pinball", "Pinball loss", 3),
    ("mae", "MAE", 2),
    ("coverage", "Coverage", 3),
    ("under_provision_rate", "Under-provision rate", 3),
    ("fit_seconds", "Fit s", 3),
)


def _models_table(view: inspection.SeriesView) -> str:
    if not view.scores:
        return '<p class="muted">No backtest scores yet.</p>'

    def rank(model: str) -> float:
        pinball = view.scores[model].get("pinball", math.inf)
        return pinball if math.isfinite(pinball) else math.inf

    rows = []
    for model in sorted(view.scores, key=rank):
        selected = model == view.model
        badge = '<span class="badge">selected</span>' if selected else ""
        cells = "".join(
            f'<td class="num">{escape(number(view.scores[model].get(key), digits))}</td>'
            for key, _, digits in SCORE_COLUMNS
        )
        rows.append(f'<tr class="{"selected" if selected else ""}"><td>{escape(model)}{badge}</td>{cells}</tr>')
    head = "".join(f'<th class="num">{escape(title)}</th>' for _, title, _ in SCORE_COLUMNS)
    return (
        f'<div class="table-wrap"><table class="models"><thead><tr><th>Model</th>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _in_words(view: inspection.SeriesView) -> str:
    """A sentence a person can check against the chart, then the policy's own explanation."""
    level = view.quantile if view.quantile is not None else band_level(view)
    parts = [f"HPAs read {number(view.value)}."]
    if view.lead_time_seconds is not None and level is not None:
        source = f": {view.lead_time_source}" if view.lead_time_source else ""
        parts.append(
            f"It comes from the p{level * 100:g} forecast peak over the next {_duration(view.lead_time_seconds)} "
            f"(the lead time a node needs to be ready{source})"
            + (", plus the GPUs of the scheduled windows open then." if view.windows else ".")
        )
    return " ".join(parts)


SHOWN_NOTES = 3


def _notes(notes: Sequence[str]) -> str:
    """The forecast's notes; past a few, the rest fold away (``<details>`` needs no script)."""
    if not notes:
        return ""
    items = [f"<li>{escape(note)}</li>" for note in notes]
    shown = f'<ul class="notes">{"".join(items[:SHOWN_NOTES])}</ul>'
    if len(items) <= SHOWN_NOTES:
        return shown
    rest = len(items) - SHOWN_NOTES
    return f"{shown}<details><summary>{rest} more notes</summary><ul>{''.join(items[SHOWN_NOTES:])}</ul></details>"


def series_section(view: inspection.SeriesView, chart: str | None) -> str:
    facts = [
        _fact("Served value", number(view.value), "served"),
        _fact("Model", view.model or "-", "model"),
        _fact("Lead time", _duration(view.lead_time_seconds) if view.lead_time_seconds is not None else "-"),
        _fact("Age", _duration(view.stale_seconds)),
    ]
    if view.fit_seconds is not None:
        facts.append(_fact("Fit", f"{view.fit_seconds:.2f} s"))
    notes = _notes(view.notes)
    level = band_level(view)
    caption = (
        "Observed history, forecast mean"
        + (f" and p{level * 100:g} band" if level is not None else "")
        + ", scheduled windows (shaded) and the served value (red line)."
    )
    figure = (
        f'<figure class="chart">{chart}<figcaption>{escape(caption)}</figcaption></figure>'
        if chart is not None
        else '<p class="muted">No history or forecast for this series yet.</p>'
    )
    return (
        f'<section class="series"><h2>{escape(format_labels(view.labels))}</h2>'
        f'<div class="facts">{"".join(facts)}</div>{figure}'
        f"<h3>Why this value</h3><p>{escape(_in_words(view))}</p>"
        f'<p class="explanation">{escape(view.explanation or "no explanation recorded")}</p>'
        + notes
        + f"<h3>Scheduled windows</h3>{_windows_table(view)}"
        + f"<h3>Models by backtest (pinball loss at the policy quantile; lower is better)</h3>{_models_table(view)}"
        + "</section>"
    )


async def charts_for(
    request: web.Request, snapshot: Snapshot, views: Sequence[inspection.SeriesView], history: timedelta
) -> list[str | None]:
    cache = request.app[CHARTS]

    async def one(view: inspection.SeriesView) -> str | None:
        if not len(view.history) and view.forecast is None:
            return None
        key = (view.info.name, tuple(sorted(view.labels.items())), history.total_seconds())
        return await cache.get(snapshot, key, lambda: render_chart(view))

    return list(await asyncio.gather(*(one(view) for view in views)))


def metric_body(
    snapshot: Snapshot, info: MetricInfo, views: Sequence[inspection.SeriesView], charts: Sequence[str | None]
) -> str:
    unit = f" ({escape(info.unit)})" if info.unit else ""
    header = (
        f'<header class="page"><h1>{escape(info.name)}</h1><p>{escape(info.description)}{unit}</p>'
        f"<p>{_snapshot_line(snapshot)}</p>{_nav()}</header>"
    )
    if not views:
        return header + "<p>No series yet: the first forecast has not been made.</p>"
    return header + "".join(series_section(view, chart) for view, chart in zip(views, charts, strict=True))


async def index_page(request: web.Request) -> web.Response:
    snapshot = inspection.current_snapshot(request.app)
    return page(request, "forecasts", index_body(snapshot, request.app[inspection.CLOCK]()))


def _error_body(title: str, message: str) -> str:
    return f'<header class="page"><h1>{escape(title)}</h1>{_nav()}</header><p>{escape(message)}</p>'


async def metric_page(request: web.Request) -> web.Response:
    snapshot = inspection.current_snapshot(request.app)  # one read for the whole page
    name = request.match_info["metric"]
    info = inspection.find_metric(snapshot, name)
    if info is None:
        message = f"The metric {name!r} is not served by gpu-autoscaler."
        return page(request, "not found", _error_body("Metric not found", message), status=404)
    try:
        history = inspection.parse_history(request.query.get("history"))
        views = inspection.views_of(
            snapshot, info, request.app[inspection.CLOCK](), history, request.query.get("labelSelector")
        )
    except inspection.InspectionError as error:
        return page(request, "bad request", _error_body("Bad request", str(error)), status=400)
    charts = await charts_for(request, snapshot, views, history)
    return page(request, info.name, metric_body(snapshot, info, views, charts))


def add_ui_routes(app: web.Application) -> None:
    app[CHARTS] = ChartCache()
    app[STYLESHEET] = resources.files("autoscaler").joinpath("static/ui.css").read_text(encoding="utf-8")
    app.router.add_get("/", index_page)
    app.router.add_get("/ui/{metric}", metric_page)
