"""The web page: ``/`` lists the metrics, ``/ui/{metric}`` shows each series with its chart and reasons.

Everything is rendered on the server: charts are matplotlib SVGs inlined into the HTML (``charts``)
and the stylesheet is inlined too, so the page works with no internet access. Charts are drawn in a
worker thread (one at a time: matplotlib is not thread-safe) and cached per snapshot object, so
reloading a page costs nothing until the refresher swaps in a new snapshot. All text is HTML-escaped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

import pandas as pd
from aiohttp import web

from adapters.kubernetes.pool_matching import UnplacedDemand
from autoscaler.quantity import format_quantity
from autoscaler.serving.provider import MetricInfo, Snapshot, not_served
from autoscaler.web.ops.buffer_views import buffers_section
from autoscaler.web.ops.charts import (
    CHARTS,
    ZOOM_HOURS,
    ChartCache,
    band_level,
    charts_for,
    format_labels,
    number,
    with_unit,
)
from autoscaler.web.ops.launch_views import launch_panel, launches_json
from autoscaler.web.ops.notes import notes_html
from autoscaler.web.ops.queued_views import queued_histories, queued_panel
from autoscaler.web.ops.scorecard_views import cluster_queue_panel, scorecard_panel, series_target_json, target_panel
from autoscaler.web.ops.views import (
    DEFAULT_HISTORY,
    InspectionError,
    SeriesView,
    find_metric,
    parse_history,
    views_of,
)
from autoscaler.web.shared.keys import BUFFERS, CLOCK, LAUNCHES, NOTICE, READINESS, SCORECARD, SNAPSHOTS, UNPLACED

REFRESH_SECONDS = 30
STYLESHEET = web.AppKey("ui_stylesheet", str)


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
    if NOTICE in request.app:
        body = f'<p class="notice">{escape(request.app[NOTICE])}</p>\n{body}'
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


def unplaced_note(unplaced: Sequence[UnplacedDemand]) -> str:
    """Demand no pool's headroom counts, named so that nobody is surprised by it."""
    if not unplaced:
        return ""
    gpus = sum(item.gpus for item in unplaced)
    items = "".join(f"<li>{escape(str(item))}</li>" for item in unplaced)
    return (
        f'<div class="warning"><p>{escape(f"{gpus:g}")} GPUs of demand fit no NodePool, so no pool\'s '
        f"headroom provisions for them:</p><ul>{items}</ul></div>"
    )


def _unplaced(request: web.Request) -> Sequence[UnplacedDemand]:
    source = request.app.get(UNPLACED)
    return source() if source is not None else ()


def index_body(
    snapshot: Snapshot, now: datetime, unplaced: Sequence[UnplacedDemand] = (), missing: Mapping[str, str] | None = None
) -> str:
    """The metrics table; ``missing`` says why a metric has no value (``readiness.metric_states``)."""
    rows = []
    for info in snapshot.metrics.values():
        views = views_of(snapshot, info, now, timedelta(0))
        values = (
            "<br>".join(
                f"{escape(with_unit(view.value, info.unit))} "
                f'<span class="muted">{escape(format_labels(view.labels))}</span>'
                for view in views
            )
            or f'<span class="muted">{escape((missing or {}).get(info.name, "no values yet"))}</span>'
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
        + unplaced_note(unplaced)
        + (table if rows else "<p>No metrics are configured.</p>")
    )


def _fact(name: str, value: str, css: str = "") -> str:
    return (
        f'<div class="fact {css}"><span class="name">{escape(name)}</span>'
        f'<span class="number">{escape(value)}</span></div>'
    )


def _windows_table(view: SeriesView) -> str:
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
    ("fit_seconds", "Selection fit s", 3),
)


def _models_table(view: SeriesView) -> str:
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
        '<p class="muted">Scores from the last selection\'s backtest; "Selection fit s" is each model\'s fit '
        'there. "Forecast took" above is the latest refresh\'s work: a selection, a refit, or a forecast '
        "from the models held (milliseconds).</p>"
    )


def _in_words(view: SeriesView) -> str:
    """A sentence a person can check against the chart, then the policy's own explanation."""
    level = view.quantile if view.quantile is not None else band_level(view)
    parts = [f"HPAs read {number(view.value)} (the quantity {format_quantity(view.value)}: milli-units, rounded up)."]
    if view.lead_time_seconds is not None and level is not None:
        source = f": {view.lead_time_source}" if view.lead_time_source else ""
        parts.append(
            f"It comes from the p{level * 100:g} forecast peak over the next {_duration(view.lead_time_seconds)} "
            f"(the lead time a node needs to be ready{source})"
            + (", plus the GPUs of the scheduled windows open then" if view.windows else "")
            + (
                f", minus the {number(requested_now)} GPUs requested now (the headroom is the gap)."
                if (requested_now := view.provenance.requested_now if view.provenance else None) is not None
                else "."
            )
        )
    return " ".join(parts)


def series_section(view: SeriesView, chart: str | None, panel: str = "", *, zoomed: bool = False) -> str:
    facts = [
        _fact("Served value", with_unit(view.value, view.info.unit), "served"),
        _fact("Model", view.model or "-", "model"),
        _fact("Lead time", _duration(view.lead_time_seconds) if view.lead_time_seconds is not None else "-"),
        _fact("Age", _duration(view.stale_seconds)),
    ]
    if view.fit_seconds is not None:
        # The worker's time for the forecast served (milliseconds once models are held), not a
        # model's fit in the selection's backtest (the models table's "Selection fit s").
        facts.append(_fact("Forecast took", f"{view.fit_seconds:.2f} s"))
    notes = notes_html(view.notes)
    level = band_level(view)
    caption = (
        ("The last hour of observed history, forecast mean" if zoomed else "Observed history, forecast mean")
        + (f" and p{level * 100:g} band" if level is not None else "")
        + (" up to the lead time" if zoomed else "")
        + ", scheduled windows (shaded) and the served value: a red line, or for headroom the red "
        "hatched band above the GPUs requested now."
    )
    figure = (
        f'<figure class="chart">{chart}<figcaption>{escape(caption)}</figcaption></figure>'
        if chart is not None
        else '<p class="muted">No history or forecast for this series yet.</p>'
    )
    return (
        f'<section class="series"><h2>{escape(format_labels(view.labels))}</h2>'
        f'<div class="facts">{"".join(facts)}</div>{figure}'
        f"{panel}<h3>Why this value</h3><p>{escape(_in_words(view))}</p>"
        f'<p class="explanation">{escape(view.explanation or "no explanation recorded")}</p>'
        + notes
        + f"<h3>Scheduled windows</h3>{_windows_table(view)}"
        + f"<h3>Models by backtest (pinball loss at the policy quantile; lower is better)</h3>{_models_table(view)}"
        + "</section>"
    )


@dataclass(frozen=True)
class ChartSpan:
    """What the charts show: by default the last hour and the lead time (zoomed), else the ``history`` asked
    for and the whole forecast. Either way the page links to the other, keeping the label selector."""

    history: timedelta
    zoomed: bool
    selector: str | None = None

    @classmethod
    def of(cls, history: str | None, selector: str | None) -> ChartSpan:
        """From the page's query; raises InspectionError for a bad ``history``."""
        if history is None:
            return cls(timedelta(hours=ZOOM_HOURS), True, selector)
        return cls(parse_history(history), False, selector)

    def href(self, metric: str, history: str | None) -> str:
        query = {key: value for key, value in (("labelSelector", self.selector), ("history", history)) if value}
        return metric_href(metric) + (f"?{urlencode(query)}" if query else "")

    def controls(self, metric: str, views: Sequence[SeriesView]) -> str:
        if not self.zoomed:
            shown = f"Charts show {_duration(self.history.total_seconds())} of history and the whole forecast."
            link = f'<a href="{escape(self.href(metric, None))}">Zoom on the last hour and the lead time</a>'
            return f'<p class="chart-span">{escape(shown)} {link}</p>'
        # The longest history any series holds (at least the inspection API's default), in whole hours.
        spans = [view.provenance.history.index for view in views if view.provenance and len(view.provenance.history)]
        longest = max((float((index[-1] - index[0]) / pd.Timedelta(hours=1)) for index in spans), default=0.0)
        hours = max(math.ceil(longest), round(DEFAULT_HISTORY.total_seconds() / 3600))
        whole = f'<a href="{escape(self.href(metric, f"{hours}h"))}">Show the whole history ({_hours(hours)})</a>'
        shown = "Charts show the last hour and the lead time, where the served value is decided."
        return f'<p class="chart-span">{escape(shown)} {whole}</p>'


def _hours(hours: int) -> str:
    return f"{hours / 24:g} days" if hours >= 48 else f"{hours} h"


def metric_body(
    snapshot: Snapshot,
    info: MetricInfo,
    views: Sequence[SeriesView],
    charts: Sequence[str | None],
    unplaced: Sequence[UnplacedDemand] = (),
    scored: Mapping[str, Mapping[str, Mapping[str, object]]] | None = None,
    launched: Mapping[str, Mapping[str, object]] | None = None,
    span: ChartSpan | None = None,
    targets: Sequence[Mapping[str, Any] | None] = (),
    queued: Sequence[pd.Series | None] = (),
) -> str:
    """``targets``: each view's target observed (``scorecard_views.series_target_json``), shown first;
    ``queued``: each view's record of GPUs waiting in Kueue's queues (``queued_views``), shown next;
    ``scored``: each pool's scorecard periods (``scorecard_views.scorecard_json``), shown with its series;
    ``launched``: each pool's launch record (``launch_views.pool_json``), likewise; ``span``: what the
    charts show, and the link to the other view (none: the whole history asked for)."""
    unit = f" ({escape(info.unit)})" if info.unit else ""
    header = (
        f'<header class="page"><h1>{escape(info.name)}</h1><p>{escape(info.description)}{unit}</p>'
        f"<p>{_snapshot_line(snapshot)}</p>{_nav()}</header>"
    ) + unplaced_note(unplaced)
    if not views:
        return header + "<p>No series yet: the first forecast has not been made.</p>"
    zoomed = span is not None and span.zoomed
    targets = list(targets) or [None] * len(views)
    waiting = list(queued) or [None] * len(views)
    panels = [
        target_panel(target)
        + queued_panel(line)
        + scorecard_panel((scored or {}).get(view.labels.get("nodepool", "")))
        + launch_panel((launched or {}).get(view.labels.get("nodepool", "")))
        for view, target, line in zip(views, targets, waiting, strict=True)
    ]
    sections = (
        series_section(view, chart, panel, zoomed=zoomed)
        for view, chart, panel in zip(views, charts, panels, strict=True)
    )
    return header + (span.controls(info.name, views) if span is not None else "") + "".join(sections)


async def index_page(request: web.Request) -> web.Response:
    snapshot = request.app[SNAPSHOTS].snapshot
    actuator = request.app.get(BUFFERS)
    buffers = buffers_section(actuator) if actuator is not None else ""
    states = request.app[READINESS].metric_states() if READINESS in request.app else ()
    missing = {state.metric: state.missing for state in states if state.missing is not None}
    body = index_body(snapshot, request.app[CLOCK](), _unplaced(request), missing)
    return page(request, "forecasts", body + buffers + cluster_queue_panel(request.app.get(SCORECARD)))


def _error_body(title: str, message: str) -> str:
    return f'<header class="page"><h1>{escape(title)}</h1>{_nav()}</header><p>{escape(message)}</p>'


async def metric_page(request: web.Request) -> web.Response:
    snapshot = request.app[SNAPSHOTS].snapshot  # one read for the whole page
    name = request.match_info["metric"]
    info = find_metric(snapshot, name)
    if info is None:
        message = not_served(name, snapshot.metrics, noun="The metric") + "."
        return page(request, "not found", _error_body("Metric not found", message), status=404)
    selector = request.query.get("labelSelector")
    try:
        span = ChartSpan.of(request.query.get("history"), selector)
        views = views_of(snapshot, info, request.app[CLOCK](), span.history, selector)
    except InspectionError as error:
        return page(request, "bad request", _error_body("Bad request", str(error)), status=400)
    queued = queued_histories(request.app, views, span.history)
    charts = await charts_for(request, snapshot, views, span.history, zoomed=span.zoomed, queued=queued)
    scorecard, now = request.app.get(SCORECARD), request.app[CLOCK]()
    scored = scorecard.figures(now) if scorecard is not None else None
    launches = launches_json(request.app.get(LAUNCHES), now)["pools"]
    launched = {pool["pool"]: pool for pool in launches}
    targets = [series_target_json(scorecard, view.target, now) for view in views]
    body = metric_body(snapshot, info, views, charts, _unplaced(request), scored, launched, span, targets, queued)
    return page(request, info.name, body)


def add_page_routes(app: web.Application) -> None:
    """``/`` and ``/ui/{metric}``."""
    app[CHARTS] = ChartCache()
    app[STYLESHEET] = resources.files("autoscaler").joinpath("static/ui.css").read_text(encoding="utf-8")
    app.router.add_get("/", index_page)
    app.router.add_get("/ui/{metric}", metric_page)
