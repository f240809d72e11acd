"""A snapshot with real forecast arrays (the demo's Helios trace) and the ops app serving it.

The server runs in its own thread and event loop so that synchronous clients (schemathesis'
requests, a Chromium subprocess) and asynchronous ones can all talk to it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web

from adapters.types import ScheduledWindow
from autoscaler import policy
from autoscaler.app.factory import build_ops_app
from autoscaler.policy import PlanKind
from autoscaler.scorecard.live import LiveScorecard
from autoscaler.serving.provenance import Provenance, TargetChoice
from autoscaler.serving.provider import MetricInfo, ServedSeries, Snapshot, SnapshotProvider
from autoscaler.web.shared.keys import SCORECARD
from autoscaler.web.shared.readiness import Readiness
from autoscaler.web.shared.self_metrics import SelfMetrics
from forecast.engine import EngineResult, fit_select_predict
from forecast.io import read_series_csv

TRACE = Path(__file__).resolve().parents[2] / "autoscaler" / "demo_data" / "helios_earth_running_gpus_5m.csv.gz"
# The trace ends at 2020-05-28T23:55Z; the refresh happens one step later.
NOW = datetime(2020, 5, 29, 0, 0, tzinfo=UTC)
SCRAPE_DELAY = timedelta(seconds=42)
LEAD_TIME = timedelta(minutes=30)
QUANTILE = 0.9
# Points of the served history that are gaps (NaN), counted from the end.
GAP_POSITIONS = (-20, -19, -18)

METRICS = (
    MetricInfo("gpu_demand_forecast", "GPUs expected within the lead time", unit="GPUs"),
    MetricInfo("gpu_headroom", "Placeholder GPUs to hold", unit="GPUs"),
    MetricInfo("request_rate_forecast", "Requests per second", unit="req/s"),
)
WINDOW = ScheduledWindow(
    source="cronjob",
    namespace="research",
    name="nightly-train",
    start=NOW + timedelta(minutes=10),
    end=NOW + timedelta(minutes=70),
    gpus=64.0,
    labels={"nodepool": "a100"},
)
# The headroom is served to a target: what its tuner chose an hour before the refresh, and why.
TARGET = TargetChoice(
    kind="minutes_short_fraction",
    value=0.01,
    pool="a100",
    window_s=7 * 86400.0,
    chosen="a buffer of 4 GPUs with the windows due",
    chosen_at=NOW - timedelta(hours=1),
    reason="chosen by replaying 8 levels and 40 buffers over the last 6.0 days: it met the level asked",
    replay_attained=0.004,
)


@dataclass(frozen=True)
class RealForecast:
    snapshot: Snapshot
    result: EngineResult
    demand: ServedSeries
    headroom: ServedSeries


def served(
    metric: str,
    kind: PlanKind,
    result: EngineResult,
    history: Any,
    requested_now: float,
    target: TargetChoice | None = None,
) -> ServedSeries:
    """A series as the refresher makes it: ``policy.decide`` and its provenance record."""
    lead_time = policy.LeadTime(LEAD_TIME, "configured")
    situation = policy.Situation(
        forecast=result.forecast, now=NOW, lead_time=lead_time, windows=[WINDOW], requested_now=requested_now
    )
    decision = policy.decide(policy.Rule(kind=kind, quantile=QUANTILE), situation)
    assert decision is not None
    provenance = Provenance(
        model=result.model,
        quantile=QUANTILE,
        forecast=result.forecast,
        history=history,
        scores=result.scores,
        notes=tuple(result.notes),
        work="select",
        fit_seconds=result.fit_seconds,
        lead_time=lead_time,
        decided_at=NOW,
        windows=(WINDOW,),
        peak_at=decision.peak_at,
        requested_now=requested_now if kind == "headroom" else None,
        adjustments=decision.adjustments,
        target=target,
    )
    return ServedSeries(
        metric, {"nodepool": "a100"}, decision.value, NOW, explanation=decision.explanation, provenance=provenance
    )


def build_real_forecast() -> RealForecast:
    series = read_series_csv(TRACE).iloc[-3 * 288 :]  # three days of 5-minute points: a fast fit
    lead_steps = int(LEAD_TIME / timedelta(minutes=5))
    result = fit_select_predict(
        series, horizon_steps=lead_steps + 1, quantiles=(QUANTILE,), policy_quantile=QUANTILE, lead_steps=lead_steps
    )
    history = series.copy()
    history.iloc[list(GAP_POSITIONS)] = np.nan  # gaps stay gaps: the API must answer null for them
    requested_now = policy.last_observed(series)
    demand_series = served("gpu_demand_forecast", "demand", result, history, requested_now)
    headroom_series = served("gpu_headroom", "headroom", result, history, requested_now, TARGET)
    # A series whose first forecast has not been made: no provenance at all.
    bare = ServedSeries("gpu_demand_forecast", {"nodepool": "h100"}, 3.0, NOW - timedelta(minutes=2))
    snapshot = Snapshot(
        created_at=NOW,
        metrics={info.name: info for info in METRICS},
        series={
            "gpu_demand_forecast": (demand_series, bare),
            "gpu_headroom": (headroom_series,),
            "request_rate_forecast": (),
        },
    )
    return RealForecast(snapshot, result, demand_series, headroom_series)


@pytest.fixture(scope="session")
def real_forecast() -> RealForecast:
    return build_real_forecast()


@dataclass
class OpsServer:
    url: str
    app: web.Application
    self_metrics: SelfMetrics
    provider: SnapshotProvider
    forecast: RealForecast

    def get(self, path: str) -> tuple[int, str, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=30) as response:  # noqa: S310 - loopback
                return response.status, response.headers.get("Content-Type", ""), response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers.get("Content-Type", ""), error.read()

    def get_json(self, path: str) -> tuple[int, Any]:
        status, content_type, body = self.get(path)
        assert content_type.startswith("application/json"), (path, content_type, body[:200])
        return status, json.loads(body)


def build_app(snapshot: Snapshot) -> tuple[web.Application, SelfMetrics, SnapshotProvider]:
    provider = SnapshotProvider(snapshot, clock=lambda: NOW + SCRAPE_DELAY)
    self_metrics = SelfMetrics()
    self_metrics.watch_snapshots(lambda: provider.snapshot, clock=lambda: NOW + SCRAPE_DELAY)
    app = build_ops_app(
        provider=provider,
        readiness=Readiness(ready=True, reason="test"),
        self_metrics=self_metrics,
        clock=lambda: NOW + SCRAPE_DELAY,  # staleness is then exactly SCRAPE_DELAY
    )
    app[SCORECARD] = scored_pool()
    return app, self_metrics, provider


def scored_pool() -> LiveScorecard:
    """Pool a100 over the 3 minutes before NOW: 2 GPUs short in the first, a wait, a late run, a judgment."""
    scorecard = LiveScorecard(headroom_metrics=["gpu_headroom"])
    card = scorecard.card("a100")
    start = NOW.timestamp() - 180
    for minute, short in enumerate((2.0, 0.0, 0.0, 0.0)):
        card.sample(start + 60 * minute, short, 8.0, 6.0)
    card.record_wait(start + 30, 45.0)
    card.record_window_delay(start + 60, 420.0)
    card.record_judgment("gpu_headroom", start, 4.0, 5.0)
    return scorecard


@contextmanager
def serve_in_thread(app: web.Application) -> Iterator[str]:
    """Serve ``app`` on a free loopback port from a thread of its own; yields the base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.SockSite(runner, sock).start())
    thread = threading.Thread(target=loop.run_forever, name="ops-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.run_until_complete(runner.cleanup())
        loop.close()
        sock.close()


@pytest.fixture
def ops_server(real_forecast: RealForecast) -> Iterator[OpsServer]:
    app, self_metrics, provider = build_app(real_forecast.snapshot)
    with serve_in_thread(app) as url:
        yield OpsServer(url, app, self_metrics, provider, real_forecast)
