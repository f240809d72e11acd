"""The page shows the decision (issue #29 item 5): the chart zooms on the last hour and the lead time, the
whole history is one click away, and every number in the explanation reads as the served value does."""

from __future__ import annotations

import dataclasses
import html as html_text
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from autoscaler import policy
from autoscaler.quantity import format_quantity
from autoscaler.serving.provenance import Provenance
from autoscaler.serving.provider import ServedSeries, Snapshot
from tests.inspection.conftest import (
    LEAD_TIME,
    NOW,
    QUANTILE,
    OpsServer,
    RealForecast,
    build_app,
    serve_in_thread,
)
from tests.inspection.test_page import ARTIFACTS, chromium_binary, html_of, png_size


def tick_labels(html: str) -> list[str]:
    """The chart's x tick labels: matplotlib writes each text as a comment in its SVG."""
    svg = html[html.index("<svg") : html.index("</svg>")]
    return re.findall(r"<!-- ((?:\d{2} \w{3} )?\d{2}:\d{2}) -->", svg)


def test_the_chart_zooms_on_the_last_hour_and_the_lead_time_by_default(ops_server: OpsServer):
    html = html_of(ops_server, "/ui/gpu_demand_forecast")
    # NOW is 00:00 and the lead time 30 min: ticks every 15 min from 23:00 to 00:30, nothing older.
    assert tick_labels(html) == ["23:00", "23:15", "23:30", "23:45", "00:00", "00:15", "00:30"]
    assert "Charts show the last hour and the lead time, where the served value is decided." in html
    assert "The last hour of observed history, forecast mean and p90 band up to the lead time" in html


def test_the_whole_history_is_one_click_away_and_keeps_the_selector(ops_server: OpsServer):
    html = html_of(ops_server, "/ui/gpu_demand_forecast?labelSelector=nodepool%3Da100")
    link = re.search(r'<a href="([^"]+)">Show the whole history \(3 days\)</a>', html)
    assert link is not None, html[:2000]
    href = html_text.unescape(link.group(1))
    assert href == "/ui/gpu_demand_forecast?labelSelector=nodepool%3Da100&history=72h"
    whole = html_of(ops_server, href)
    labels = tick_labels(whole)
    assert labels[0].endswith("May 00:00") and labels[0][:2] in ("26", "27")  # three days back, 12-hour ticks
    assert "Charts show 72.0 h of history and the whole forecast." in whole
    assert "nodepool=h100" not in whole  # the selector still applies
    back = re.search(r'<a href="([^"]+)">Zoom on the last hour and the lead time</a>', whole)
    assert back is not None
    assert html_text.unescape(back.group(1)) == "/ui/gpu_demand_forecast?labelSelector=nodepool%3Da100"


# A request rate forecast scaled to a few thousandths per second (the issue's "peaks at 0.01" while 0.00633
# was served), and to larger values.
SCALES = (1e-5, 1e-4, 1e-2, 1.0)


def rate_series(real: RealForecast, scale: float) -> ServedSeries:
    """``request_rate_forecast`` made by ``policy.decide`` from the real forecast times ``scale``."""
    forecast = real.result.forecast
    scaled = dataclasses.replace(
        forecast, mean=forecast.mean * scale, quantiles={q: v * scale for q, v in forecast.quantiles.items()}
    )
    lead_time = policy.LeadTime(LEAD_TIME, "configured")
    situation = policy.Situation(forecast=scaled, now=NOW, lead_time=lead_time)
    decision = policy.decide(policy.Rule(kind="rate", quantile=QUANTILE), situation)
    assert decision is not None and not decision.adjustments
    assert real.demand.provenance is not None
    history = real.demand.provenance.history * scale
    provenance = Provenance(
        model=real.result.model, quantile=QUANTILE, forecast=scaled, history=history, scores={}, notes=(),
        work="select", fit_seconds=None, lead_time=lead_time, decided_at=NOW, windows=(), peak_at=decision.peak_at,
        requested_now=None, adjustments=(),
    )  # fmt: skip
    labels = {"service": "inference"}
    return ServedSeries(
        "request_rate_forecast", labels, decision.value, NOW, explanation=decision.explanation, provenance=provenance
    )


@contextmanager
def rate_server(real: RealForecast, scale: float) -> Iterator[tuple[str, ServedSeries]]:
    series = rate_series(real, scale)
    snapshot = Snapshot(NOW, real.snapshot.metrics, {**real.snapshot.series, "request_rate_forecast": (series,)})
    app, _, _ = build_app(snapshot)
    with serve_in_thread(app) as url:
        yield url, series


def explained_numbers(page: str) -> tuple[str, str, str, str]:
    """The served value's fact, and the numbers the words and the explanation give for it."""
    served = re.search(r'class="fact served"><span class="name">Served value</span><span class="number">([^<]+)<', page)
    read = re.search(r"HPAs read (\S+) \(the quantity (\S+):", page)
    peak = re.search(r"peaks at (\S+) at \d{2}:\d{2} UTC", page)
    assert served and read and peak, page[:3000]
    # The fact carries its unit ("0.00712 req/s"; a small rate per second reads "1.10 per hour (0.000306
    # per second)"): the number served is the first, or the one in parentheses.
    shown = served.group(1)
    number = shown[shown.index("(") + 1 :] if "(" in shown else shown
    return number.split()[0], read.group(1), read.group(2), peak.group(1)


@pytest.mark.parametrize("scale", SCALES)
def test_every_number_in_the_explanation_is_the_served_value(real_forecast: RealForecast, scale: float):
    with rate_server(real_forecast, scale) as (url, series):
        server = OpsServer(url, None, None, None, real_forecast)  # type: ignore[arg-type]
        page = html_of(server, "/ui/request_rate_forecast")
        status, body = server.get_json("/api/v1/forecasts/request_rate_forecast")
    assert status == 200
    [item] = body  # a list of series
    value = item["value"]
    assert value == series.value  # what the inspection API serves
    fact, read, quantity, peak = explained_numbers(page)
    # The same text, exactly: the explanation's peak (the whole served value: no windows, no limits), the
    # sentence above it and the fact read one number.
    assert peak == read == fact == policy.figure(value)
    assert quantity == format_quantity(value)  # what the external metrics API serves an HPA
    assert f"peaks at {peak} at" in item["explanation"]  # the API's explanation says the same
    # And that number is the served value rounded to the digits it shows, not another value's rounding.
    shown = Decimal(peak)
    exponent = shown.as_tuple().exponent
    assert isinstance(exponent, int)
    assert abs(Decimal(repr(value)) - shown) <= Decimal(5) * Decimal(10) ** (exponent - 1)


def test_the_issues_rate_reads_as_served():
    """The figure the issue saw: 0.00633 requests/s served, explained as "peaks at 0.01"."""
    assert policy.figure(0.00633) == "0.00633"
    assert policy.figure(0.0063312345) == "0.00633"
    assert policy.figure(729.9327) == "729.93"
    assert policy.figure(float("nan")) == "n/a"


@pytest.mark.chromium
def test_the_decision_in_headless_chromium(real_forecast: RealForecast, tmp_path: Path):
    """A request rate of a few thousandths, as a browser builds the page: zoomed chart, link, numbers."""
    chromium = chromium_binary()
    ARTIFACTS.mkdir(exist_ok=True)
    screenshot = ARTIFACTS / "inspection-ui-request_rate_forecast.png"
    screenshot.unlink(missing_ok=True)
    with rate_server(real_forecast, 1e-5) as (url, series):
        completed = subprocess.run(
            [
                chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={screenshot}", "--window-size=1280,900",
                "--dump-dom", url + "/ui/request_rate_forecast",
            ],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-2000:]
    dom = completed.stdout
    assert 0 < series.value < 0.01  # the issue's case: below the two decimals that read 0.01
    fact, read, quantity, peak = explained_numbers(dom)
    assert peak == read == fact == policy.figure(series.value)
    assert quantity == format_quantity(series.value)
    assert tick_labels(dom)[0] == "23:00"  # zoomed: the chart starts an hour before the forecast
    assert re.search(r'<a href="[^"]+history=72h">Show the whole history \(3 days\)</a>', dom)
    svg = dom[dom.index("<svg") : dom.index("</svg>")]
    assert len(re.findall(r"<path\b", svg)) > 20
    assert png_size(screenshot) == (1280, 900)
    assert screenshot.stat().st_size > 20_000
    assert np.isfinite(series.value)
