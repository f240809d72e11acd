"""The web page: server-side HTML, escaping, per-snapshot chart cache, and a real headless Chromium."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import shutil
import struct
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import pytest

from autoscaler.serving.provider import MetricInfo, ServedSeries, Snapshot
from autoscaler.web.ops import charts
from autoscaler.web.ops import page as ui
from autoscaler.web.ops.notes import plain_notes
from autoscaler.web.ops.scorecard_views import scorecard_panel, target_panel
from tests import ci
from tests.eventually import eventually_sync
from tests.inspection.conftest import NOW, TARGET, WINDOW, OpsServer, RealForecast, build_app, serve_in_thread

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def html_of(server: OpsServer, path: str, expected_status: int = 200) -> str:
    status, content_type, body = server.get(path)
    assert status == expected_status, (path, status, body[:300])
    assert content_type.startswith("text/html"), content_type
    return body.decode()


def assert_self_contained(html: str) -> None:
    """Nothing is fetched from anywhere: no scripts, stylesheets, fonts or images by URL."""
    assert "<script" not in html
    assert "<link" not in html
    assert "@import" not in html
    assert not re.search(r"url\((?!#)", html)  # SVG clip paths refer to ids in the page only
    assert not re.search(r"""\ssrc\s*=""", html)
    assert not re.search(r"""href\s*=\s*["'](?:https?:)?//""", html)
    assert '<meta http-equiv="refresh" content="30">' in html


def test_index_lists_and_links_every_metric(ops_server: OpsServer):
    html = html_of(ops_server, "/")
    assert_self_contained(html)
    for name in ("gpu_demand_forecast", "gpu_headroom", "request_rate_forecast"):
        assert f'<a href="/ui/{name}">{name}</a>' in html
    assert f"{ops_server.forecast.demand.value:.2f}" in html
    assert "no values yet" in html  # request_rate_forecast has no series


def test_metric_page_shows_chart_numbers_reasons_and_models(ops_server: OpsServer):
    html = html_of(ops_server, "/ui/gpu_demand_forecast")
    assert_self_contained(html)
    result = ops_server.forecast.result
    assert html.count("<svg") == 1  # the h100 series has no data to draw
    svg = html[html.index("<svg") : html.index("</svg>")]
    assert svg.count("<path") > 20 and 'role="img"' in svg and "width=" not in svg[: svg.index(">")]
    served = f"{ops_server.forecast.demand.value:.2f}"
    assert (
        f'<div class="fact served"><span class="name">Served value</span><span class="number">{served} GPUs</span>'
        in html
    )
    # The refresh's own time and each model's fit in the selection are told apart by name.
    assert '<span class="name">Forecast took</span>' in html and '<th class="num">Selection fit s</th>' in html
    selected_row = re.search(r'<tr class="selected"><td>([^<]+)<span class="badge">selected</span>', html)
    assert selected_row is not None and selected_row.group(1) == result.model
    assert html.count("<tr class=") == len(result.scores)  # one row per backtested model
    assert "research/nightly-train" in html and ">64<" in html
    assert "plus scheduled windows research/nightly-train (64 GPUs)" in html
    assert 'Age</span><span class="number">42 s' in html
    assert "No backtest scores yet." in html  # the h100 series


def test_unknown_metric_is_a_404_page_with_the_name_escaped(ops_server: OpsServer):
    html = html_of(ops_server, "/ui/" + quote("<b>nope</b>", safe=""), expected_status=404)
    assert "<b>nope</b>" not in html
    assert "&lt;b&gt;nope&lt;/b&gt;" in html
    assert "Metric not found" in html


def test_bad_history_is_a_400_page(ops_server: OpsServer):
    html = html_of(ops_server, "/ui/gpu_demand_forecast?history=soon", expected_status=400)
    assert "invalid history &#x27;soon&#x27;" in html


def test_every_text_is_escaped(real_forecast: RealForecast):
    hostile = '<script>alert("x")</script>&'
    info = MetricInfo("gpu_demand_forecast", f"description {hostile}", unit=hostile)
    window = dataclasses.replace(WINDOW, namespace=hostile, name=hostile)
    series = ServedSeries(
        "gpu_demand_forecast",
        {"pool": hostile},
        1.0,
        NOW,
        explanation=f"because {hostile}",
        provenance=dataclasses.replace(
            real_forecast.demand.provenance,
            model=hostile,
            notes=(hostile,),
            windows=(window,),
            scores={hostile: {"pinball": 1.0}},
        ),
    )
    snapshot = Snapshot(NOW, {info.name: info}, {info.name: (series,)}, last_error=hostile)
    app, _, _ = build_app(snapshot)
    with serve_in_thread(app) as url:
        server = OpsServer(url, app, None, None, None)  # type: ignore[arg-type]
        for path in ("/", "/ui/gpu_demand_forecast"):
            html = html_of(server, path)
            assert "<script" not in html, path
            assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in html, path


async def test_chart_cache_renders_once_per_snapshot_off_the_event_loop():
    cache = ui.ChartCache()
    loop_thread = threading.get_ident()
    threads: list[int] = []

    def render() -> str:
        threads.append(threading.get_ident())
        time.sleep(0.05)  # a rendering long enough for the five requests to overlap it
        return f"<svg>{len(threads)}</svg>"

    first = Snapshot(NOW, {}, {})
    key = ("m", (), 0.0)
    charts = await asyncio.gather(*(cache.get(first, key, render) for _ in range(5)))
    assert charts == ["<svg>1</svg>"] * 5  # concurrent requests share one rendering
    assert threads[0] != loop_thread
    assert await cache.get(first, key, render) == "<svg>1</svg>"
    assert await cache.get(Snapshot(NOW, {}, {}), key, render) == "<svg>2</svg>"  # a new snapshot object
    assert len(threads) == 2


async def test_a_failed_rendering_is_not_cached():
    cache = ui.ChartCache()
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("font cache busy")
        return "<svg/>"

    snapshot = Snapshot(NOW, {}, {})
    with pytest.raises(RuntimeError):
        await cache.get(snapshot, ("m", (), 0.0), flaky)
    assert await cache.get(snapshot, ("m", (), 0.0), flaky) == "<svg/>"


def test_page_reuses_charts_until_the_snapshot_changes(ops_server: OpsServer, monkeypatch: pytest.MonkeyPatch):
    rendered: list[str] = []
    real_render = charts.render_chart

    def counting(view, **options):
        rendered.append(view.info.name)
        return real_render(view, **options)

    monkeypatch.setattr(charts, "render_chart", counting)
    first = html_of(ops_server, "/ui/gpu_demand_forecast")
    second = html_of(ops_server, "/ui/gpu_demand_forecast")
    assert first == second and rendered == ["gpu_demand_forecast"]
    ops_server.provider.swap(dataclasses.replace(ops_server.provider.snapshot))  # same data, new snapshot
    html_of(ops_server, "/ui/gpu_demand_forecast")
    assert rendered == ["gpu_demand_forecast"] * 2


def test_a_slow_chart_does_not_block_the_other_endpoints(ops_server: OpsServer, monkeypatch: pytest.MonkeyPatch):
    rendering = threading.Event()

    def slow(view, **options):
        rendering.set()
        time.sleep(2.5)  # the slow chart is what the other endpoints must not wait for
        return "<svg></svg>"

    monkeypatch.setattr(charts, "render_chart", slow)
    with ThreadPoolExecutor(1) as pool:
        page = pool.submit(html_of, ops_server, "/ui/gpu_headroom")
        eventually_sync(rendering.is_set, message="the slow chart's rendering to start")
        started = time.perf_counter()
        assert ops_server.get("/healthz")[0] == 200
        assert ops_server.get("/api/v1/forecasts")[0] == 200
        assert time.perf_counter() - started < 1.0  # loopback answers take milliseconds; slack for a busy CI
        assert not page.done()
        assert "<svg></svg>" in page.result(timeout=10)


# --- a real browser ------------------------------------------------------------------------------


def chromium_binary() -> str:
    found = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if found is None:
        message = "headless Chromium is not installed (Debian package 'chromium'; make system-deps installs it)"
        ci.missing_tool(message)
    return found


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", header[16:24])
    return width, height


@pytest.mark.chromium
def test_page_in_headless_chromium(ops_server: OpsServer, tmp_path: Path):
    chromium = chromium_binary()
    ARTIFACTS.mkdir(exist_ok=True)
    screenshot = ARTIFACTS / "inspection-ui-gpu_demand_forecast.png"
    screenshot.unlink(missing_ok=True)
    completed = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={screenshot}",
            "--window-size=1280,900",
            "--dump-dom",
            ops_server.url + "/ui/gpu_demand_forecast",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    dom = completed.stdout
    # The DOM as the browser built it: the inline SVG chart with drawn paths, and the numbers.
    svg = dom[dom.index("<svg") : dom.index("</svg>")]
    assert len(re.findall(r"<path\b", svg)) > 20
    served = f"{ops_server.forecast.demand.value:.2f}"
    assert re.search(rf'class="fact served">.*?<span class="number">{re.escape(served)} GPUs</span>', dom)
    assert f"{ops_server.forecast.result.model}" in dom
    assert re.search(r'<tr class="selected"><td>' + re.escape(ops_server.forecast.result.model), dom)
    assert png_size(screenshot) == (1280, 900)
    assert screenshot.stat().st_size > 20_000  # a blank page compresses to a few kB
    # The a100 pool's live scorecard (tests.inspection.conftest.scored_pool), as the browser built it.
    assert "What happened in this pool (live scorecard)" in dom
    assert re.sub(r"\s+", " ", SCORECARD_ROW) in re.sub(r"\s+", " ", dom)


SCORECARD_ROW = (
    "<tr><td>1h</td><td>1 of 3</td><td>2.0</td><td>0.8 min / 0.8 min / 0.8 min (1 pod)</td>"
    "<td>7.0 min (1 run)</td><td>0.1</td><td>75 %</td><td>-</td><td>gpu_headroom: 0/1 (0 %)</td></tr>"
)


def test_each_pool_shows_its_live_scorecard_and_an_unscored_pool_none(ops_server: OpsServer):
    html = html_of(ops_server, "/ui/gpu_headroom")
    assert_self_contained(html)
    assert html.count("What happened in this pool (live scorecard)") == 1  # a100's; h100 is not scored
    a100 = html[html.index("<h2>nodepool=a100</h2>") :]
    assert SCORECARD_ROW in a100 and a100.index(SCORECARD_ROW) < a100.index("Why this value")
    for period in ("7d", "24h"):
        assert SCORECARD_ROW.replace("<td>1h</td>", f"<td>{period}</td>") in a100


def test_headroom_is_drawn_as_the_gap_above_the_gpus_requested_now(ops_server: OpsServer):
    headroom = ops_server.forecast.headroom
    assert headroom.provenance is not None and headroom.provenance.requested_now is not None
    requested_now = headroom.provenance.requested_now
    html = html_of(ops_server, "/ui/gpu_headroom")
    svg = html[html.index("<svg") : html.index("</svg>")]
    # matplotlib writes legend texts as comments in its SVG.
    assert f"requested now {requested_now:.2f}" in svg
    assert f"provisioned for {requested_now + headroom.value:.2f}" in svg
    assert f"headroom served {headroom.value:.2f}" in svg
    # The headroom band is hatched (an SVG pattern), so that it stays apart from the quantile band.
    assert "<pattern" in svg and "red hatched band" in html
    assert f"minus the {requested_now:.2f} GPUs requested now (the headroom is the gap)" in html
    # A demand metric is a level on the same axis as demand: a line, no requested-now.
    demand_html = html_of(ops_server, "/ui/gpu_demand_forecast")
    demand_svg = demand_html[demand_html.index("<svg") : demand_html.index("</svg>")]
    assert "requested now" not in demand_svg and f"served {ops_server.forecast.demand.value:.2f}" in demand_svg


def test_served_values_carry_their_unit_and_a_small_rate_is_shown_on_a_readable_scale():
    assert ui.with_unit(12.0, "GPUs") == "12.00 GPUs"
    assert ui.with_unit(0.000306, "1/s") == "1.10 per hour (0.000306 per second)"
    assert ui.with_unit(0.05, "1/s") == "3.00 per minute (0.05 per second)"
    assert ui.with_unit(3.2, "1/s") == "3.20 per second"
    assert ui.with_unit(0.3, "") == "0.3"


def test_notes_are_plain_words_with_repeats_grouped():
    notes = [
        "window 2026-11-10T02:00:00+00:00 (64 GPUs) not identifiable in history; kept",
        "removed 64 GPUs of a known job from 2026-11-16T02:00:00+00:00 to 2026-11-16T04:00:00+00:00",
        "window 2026-11-11T02:00:00+00:00 (64 GPUs) not identifiable in history; kept",
        "window 2026-11-12T02:00:00+00:00 (64 GPUs) not identifiable in history; kept",
        "window 2026-11-12T02:00:00+00:00 (32 GPUs) not identifiable in history; kept",
        "models fitted 12 min ago forecast from the newest data",
        "held models could not forecast (ValueError: x) at 2026-11-12T03:00:00+00:00",
        "held models could not forecast (ValueError: x) at 2026-11-12T04:00:00+00:00",
    ]
    assert plain_notes(notes) == [
        "3 scheduled runs of 64 GPUs, the first at 2026-11-10 02:00 UTC and the last at 2026-11-12 02:00 UTC, "
        "do not show in the observed history (demand rose by less than half of that during each), so nothing "
        "was taken out of the history for them before fitting.",
        "The scheduled run of 64 GPUs from 2026-11-16 02:00 UTC to 2026-11-16 04:00 UTC was taken out of the "
        "history before fitting, so the model does not learn it; the schedule adds its future runs on top of "
        "the forecast.",
        "The scheduled run of 32 GPUs at 2026-11-12 02:00 UTC does not show in the observed history (demand rose "
        "by less than half of that), so nothing was taken out of the history for it before fitting.",
        "models fitted 12 min ago forecast from the newest data",
        "held models could not forecast (ValueError: x) at … (2 times, from 2026-11-12 03:00 UTC to "
        "2026-11-12 04:00 UTC)",
    ]
    # No note is left with an ISO time or the engine's shorthand.
    assert not any(re.search(r"\d{2}:\d{2}:\d{2}|not identifiable|; kept", note) for note in plain_notes(notes))


def test_the_scorecard_panel_counts_pods_and_runs_and_escapes_metric_names():
    waits = {"count": 2, "p50": 30.0, "p95": 57.0, "max": 60.0}
    none = {"count": 0, "p50": None, "p95": None, "max": None}
    figures = {
        "minutes_scored": 0, "minutes_short": 0, "minutes_short_fraction": 0.0, "short_gpu_minutes": 0.0,
        "idle_gpu_hours": 0.0, "gpu_allocation": None, "busy_utilization": 0.356, "capacity_wait_seconds": waits,
        "window_start_delay_seconds": none, "coverage": {"<b>": {"covered": 0, "judged": 0, "coverage": None}},
        "queue_wait_seconds": {"quota": none, "admission_check": none, "capacity": none},
    }  # fmt: skip
    html = scorecard_panel({"1h": figures})
    assert "Kueue" not in html  # no Workload's queue wait recorded: no table of them
    assert "<td>0.5 min / 0.9 min / 1.0 min (2 pods)</td><td>- (0 runs)</td>" in html
    # Allocation unknown; GPUs busy, from DCGM; the metric's name escaped.
    assert "<td>-</td><td>36 %</td><td>&lt;b&gt;: 0/0</td>" in html
    assert scorecard_panel(None) == ""


def test_a_headroom_served_to_a_target_shows_it_observed_first(ops_server: OpsServer):
    """The conftest's target (1 %) on pool a100, which had 1 of its 3 scored minutes short."""
    html = html_of(ops_server, "/ui/gpu_headroom")
    a100 = html[html.index("<h2>nodepool=a100</h2>") :]
    assert "<h3>Target: at most 1 % of minutes with any GPU short</h3>" in a100
    assert a100.index("Target: at most 1 %") < a100.index("What happened in this pool (live scorecard)")
    header = "".join(f"<th>Live, {window}</th>" for window in ("tune window", "last 1h", "last 6h", "last 24h"))
    assert f"{header}<th>Replay (tune window)</th><th>Error budget left</th>" in a100
    # Live a third of the minutes short, 0.40 % in the replay, the budget overspent 32 times over.
    assert "<td>33.33 %</td>" * 4 + "<td>0.40 %</td><td>-3233.33 %</td>" in a100
    assert (
        f"Serving <strong>{TARGET.chosen}</strong> (at 2020-05-28T23:00:00Z): {TARGET.reason}. "
        "Live and replayed over a tune window of 7 days." in a100
    )
    # A demand forecast has no target: no panel.
    assert "<h3>Target:" not in html_of(ops_server, "/ui/gpu_demand_forecast")


def test_the_target_panel_before_any_choice_in_the_targets_own_unit_and_escaped():
    target = {
        "kind": "window_start_delay_p95_s", "value": 300.0, "description": "window pods started within 300 s at p95",
        "tune_window_seconds": 86400.0,
        "attained": {"live": {"tune": 402.0, "1h": None, "6h": 420.0, "24h": 420.0}, "replay": None},
        "error_budget_remaining": None, "chosen": "p95", "chosen_at": None, "reason": "no choice yet <b>",
    }  # fmt: skip
    html = target_panel(target)
    assert "<td>402 s</td><td>-</td><td>420 s</td><td>420 s</td><td>-</td><td>-</td>" in html
    assert "Serving <strong>p95</strong> (no choice yet): no choice yet &lt;b&gt;." in html
    assert "tune window of 1 day." in html
    assert target_panel(None) == ""
