"""The live scorecard's collection without a cluster: samples, judgments of served headroom, pod outcomes,
ownership, /metrics, and bad input (garbled answers, malformed pods, a corrupt saved file)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry, generate_latest

from adapters.kubernetes.watch import WatchCache, WatchEvent
from adapters.prometheus.client import PrometheusClientSettings, PrometheusSource, PrometheusUnavailable
from autoscaler.app import scoring
from autoscaler.policy import LeadTime
from autoscaler.scorecard.capacity import PoolCapacity
from autoscaler.scorecard.live import LiveScorecard
from autoscaler.scorecard.pods import PodOutcomes
from autoscaler.serving.provenance import Provenance
from autoscaler.serving.provider import MetricInfo, ServedSeries, Snapshot
from autoscaler.targets.plans import MetricPlan
from autoscaler.web.ops.scorecard_metrics import ScorecardMetrics
from forecast.types import Forecast

NOW = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


class Capacity:
    """Stands in for ``PoolCapacity``: held and used GPUs per pool, or a failure."""

    def __init__(self, held: dict[str, float], used: dict[str, float]) -> None:
        self.held, self.used = held, used
        self.error: Exception | None = None
        self.pod_waits: list[tuple[str, str, float]] = []
        self.busy_shares: dict[str, float] = {}  # DCGM's busy share per pool; none: no dcgm-exporter

    async def waits(self, now: datetime) -> list[tuple[str, str, float]]:
        return list(self.pod_waits)

    async def read(self, now: datetime) -> tuple[dict[str, float], dict[str, float]]:
        if self.error is not None:
            raise self.error
        return dict(self.held), dict(self.used)

    async def busy(self, now: datetime) -> dict[str, float]:
        if self.error is not None:
            raise self.error
        return dict(self.busy_shares)


def scorecard(short: dict[str, float], capacity: Capacity | None = None, path: Path | None = None) -> LiveScorecard:
    return LiveScorecard(
        headroom_metrics=["gpu_headroom"],
        short_gpus=lambda: short,
        capacity=capacity,  # type: ignore[arg-type]
        state_path=path,
    )


async def test_each_pool_is_sampled_and_a_pool_without_a_name_is_not() -> None:
    card = scorecard({"a100": 3.0, "": 5.0}, Capacity({"a100": 8.0, "h100": 8.0}, {"a100": 8.0, "h100": 2.0}))
    for minute in range(3):
        await card.collect(NOW + minute * MINUTE)
    assert sorted(card.cards) == ["a100", "h100"]
    assert card.cards["a100"].totals.short_gpu_seconds == 2 * 60 * 3.0
    assert card.cards["h100"].totals.idle_gpu_seconds == 2 * 60 * 6.0


async def test_dcgm_busy_shares_are_recorded_per_pool_and_bad_ones_refused(caplog: pytest.LogCaptureFixture) -> None:
    capacity = Capacity({"a100": 8.0, "h100": 8.0}, {"a100": 4.0, "h100": 8.0})
    card = scorecard({}, capacity)
    capacity.busy_shares = {"a100": 0.5, "h100": 0.9, "": 0.1}
    await card.collect(NOW)
    capacity.busy_shares = {"a100": 0.3, "h100": float("nan")}
    with caplog.at_level(logging.ERROR):
        await card.collect(NOW + MINUTE)
    capacity.busy_shares = {}  # dcgm-exporter gone: nothing recorded
    await card.collect(NOW + 2 * MINUTE)
    figures = card.figures(NOW + 3 * MINUTE)
    assert figures["a100"]["1h"]["busy_utilization"] == 0.4
    assert figures["h100"]["1h"]["busy_utilization"] == 0.9
    assert "scorecard: pool h100: busy share at" in caplog.text and "nan is not between 0 and 1" in caplog.text
    assert scorecard({}, Capacity({"l4": 8.0}, {})).cards == {}  # no sample yet, no figure
    restored = PoolCapacityDocument.round_trip(card.cards["a100"])
    assert list(restored.busy) == list(card.cards["a100"].busy)


class PoolCapacityDocument:
    @staticmethod
    def round_trip(card: Any) -> Any:
        from autoscaler.scorecard.pools import PoolScorecard

        return PoolScorecard.from_document(json.loads(json.dumps(card.document())))


async def test_a_nan_answer_skips_the_pool_and_says_which(caplog: pytest.LogCaptureFixture) -> None:
    card = scorecard({}, Capacity({"a100": float("nan"), "h100": 8.0}, {"h100": 8.0}))
    with caplog.at_level(logging.ERROR):
        await card.collect(NOW)
    assert sorted(card.cards) == ["h100"]
    assert "scorecard: pool a100 at 2026-11-20 09:00:00+00:00: short, held, used (0.0, nan, 0.0): not counts" in (
        caplog.text
    )


async def test_prometheus_down_skips_the_minute_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    capacity = Capacity({"a100": 8.0}, {"a100": 8.0})
    card = scorecard({"a100": 2.0}, capacity)
    await card.collect(NOW)
    capacity.error = PrometheusUnavailable("connection refused")
    with caplog.at_level(logging.ERROR):
        await card.collect(NOW + MINUTE)
    assert "GPUs held and used not read (connection refused)" in caplog.text
    assert card.cards["a100"].totals.minutes_scored == 0  # the first sample waits for the next one


async def test_without_a_pod_watch_each_wait_prometheus_shows_counts_once_across_a_restart(tmp_path: Path) -> None:
    capacity = Capacity({"a100": 8.0}, {"a100": 8.0})
    capacity.pod_waits = [("uid-1", "a100", 90.0), ("uid-2", "a100", 30.0)]
    card = scorecard({}, capacity, tmp_path / "scorecard.json")
    await card.collect(NOW)
    await card.collect(NOW + MINUTE)  # the same pods again: within the query's window
    assert list(card.cards["a100"].waits) == [(NOW.timestamp(), 90.0), (NOW.timestamp(), 30.0)]
    card.save(card.document())
    restarted = scorecard({}, capacity, tmp_path / "scorecard.json")
    restarted.restore()
    capacity.pod_waits.append(("uid-3", "a100", 600.0))
    await restarted.collect(NOW + 2 * MINUTE)
    assert [seconds for _, seconds in restarted.cards["a100"].waits] == [90.0, 30.0, 600.0]


async def test_with_shards_only_owned_pools_are_scored_and_exported() -> None:
    card = scorecard({"a100": 1.0, "h100": 1.0})
    card.owns_pool = lambda pool: pool == "a100"
    await card.collect(NOW)
    await card.collect(NOW + MINUTE)
    assert sorted(card.cards) == ["a100"]
    card.cards["h100"] = card.cards["a100"]  # e.g. scored before its shard moved away
    assert sorted(card.owned_cards()) == ["a100"]
    assert sorted(card.figures(NOW)) == ["a100"]


def headroom(value: float, requested: float, at: datetime, lead: timedelta) -> ServedSeries:
    forecast = Forecast(model="m", timestamps=pd.DatetimeIndex([]), mean=np.zeros(0))
    provenance = Provenance(
        model="m", quantile=0.9, forecast=forecast, history=pd.Series(dtype=float), scores={}, notes=(),
        work="update", fit_seconds=0.0, lead_time=LeadTime(lead, "test"), decided_at=at, windows=(), peak_at=None,
        requested_now=requested, adjustments=(),
    )  # fmt: skip
    return ServedSeries("gpu_headroom", {"nodepool": "a100"}, value, at, "", provenance=provenance)


def snapshot_at(at: datetime, value: float, requested: float) -> Snapshot:
    series = headroom(value, requested, at, 2 * MINUTE)
    return Snapshot(at, {"gpu_headroom": MetricInfo("gpu_headroom", "")}, {"gpu_headroom": (series,)})


async def test_each_served_headroom_is_judged_once_its_lead_time_has_passed() -> None:
    card = scorecard({})
    # Requested GPUs 10, 12, 17, 13, 13; headroom 4 served each minute, lead time 2 minutes.
    for minute, requested in enumerate((10.0, 12.0, 17.0, 13.0, 13.0)):
        await card.collect(NOW + minute * MINUTE, snapshot_at(NOW + minute * MINUTE, 4.0, requested))
    judged = [
        (at - NOW.timestamp(), served, realized)
        for at, served, realized in card.cards["a100"].judgments["gpu_headroom"]
    ]
    # At 0: peak 17 over (0, 2 min] rose 7 > 4 (missed); at 1: 17 - 12 = 5 (missed); at 2: 13 - 17 < 0 (covered).
    assert judged == [(0.0, 4.0, 7.0), (60.0, 4.0, 5.0), (120.0, 4.0, -4.0)]
    assert card.cards["a100"].coverage_totals == {"gpu_headroom": [1, 3]}


async def test_the_scorecard_carries_on_across_a_restart_and_a_corrupt_pool_starts_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "scorecard.json"
    card = scorecard({"a100": 2.0, "h100": 1.0}, path=path)
    for minute in range(3):
        await card.collect(NOW + minute * MINUTE)
    card.save(card.document())
    document = json.loads(path.read_text())
    document["pools"]["h100"]["waits"] = {"at": [0], "seconds": ["soon"]}
    path.write_text(json.dumps(document))
    restored = scorecard({"a100": 2.0}, path=path)
    with caplog.at_level(logging.WARNING):
        restored.restore()
    assert (
        f"{path}: dropped pool h100: waits.seconds: 'soon' is not a finite number (nor subnormal) "
        "(its scorecard starts empty)" in caplog.text
    )
    assert sorted(restored.cards) == ["a100"]
    assert restored.cards["a100"].document() == card.cards["a100"].document()


@pytest.mark.parametrize("content", ["{not json", "[]", '{"version": 9}', '{"version": 1, "pools": []}'])
def test_an_unusable_saved_file_is_said_and_the_scorecard_starts_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str
) -> None:
    path = tmp_path / "scorecard.json"
    path.write_text(content)
    card = scorecard({}, path=path)
    with caplog.at_level(logging.ERROR):
        card.restore()
    assert card.cards == {}
    assert str(path) in caplog.text and "scorecard" in caplog.text


def unschedulable_pod(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", **extra.get("metadata", {})},
        "spec": {"containers": []},
        "status": extra.get("status", {"phase": "Pending"}),
    }


def test_a_malformed_pod_is_logged_by_name_and_the_others_count(caplog: pytest.LogCaptureFixture) -> None:
    recorded: list[tuple[str, str, float, float]] = []
    outcomes = PodOutcomes(
        pod_pool=lambda pod: (1.0, "a100"), job=lambda key: None, record=lambda *args: recorded.append(args)
    )
    scheduled = {
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-20T09:05:00Z"}]
    }
    good = unschedulable_pod("good", metadata={"creationTimestamp": "2026-11-20T09:00:00Z"}, status=scheduled)
    bad = unschedulable_pod("bad", metadata={"creationTimestamp": "yesterday"}, status=scheduled)
    cache = WatchCache("pending pods")
    with caplog.at_level(logging.WARNING):
        outcomes.on_change(cache, WatchEvent("DELETED", bad))
        outcomes.on_change(cache, WatchEvent("DELETED", good))
        outcomes.on_change(cache, WatchEvent("DELETED", good))  # seen once
    assert "scorecard: pod ml/bad: metadata.creationTimestamp: 'yesterday' is not a timestamp" in caplog.text
    assert recorded == [("a100", "capacity_wait", datetime(2026, 11, 20, 9, 5, tzinfo=UTC).timestamp(), 300.0)]


def test_metrics_are_counters_and_histograms_per_pool() -> None:
    card = scorecard({})
    pool = card.card("a100")
    for minute, short in enumerate((12.0, 0.0)):
        pool.sample(NOW.timestamp() + 60 * minute, short, 16.0, 4.0)
    pool.record_wait(NOW.timestamp(), 45.0)
    pool.record_judgment("gpu_headroom", NOW.timestamp(), 4.0, 3.0)
    registry = CollectorRegistry()
    registry.register(ScorecardMetrics(card.owned_cards, {"gpu_headroom": 0.9}))
    text = generate_latest(registry).decode()
    for line in (
        'gpu_autoscaler_gpus_short{nodepool="a100"} 0.0',
        'gpu_autoscaler_short_gpu_seconds_total{nodepool="a100"} 720.0',
        'gpu_autoscaler_minutes_short_total{nodepool="a100"} 1.0',
        'gpu_autoscaler_idle_gpu_seconds_total{nodepool="a100"} 720.0',
        'gpu_autoscaler_capacity_wait_seconds_bucket{le="60.0",nodepool="a100"} 1.0',
        'gpu_autoscaler_capacity_wait_seconds_bucket{le="30.0",nodepool="a100"} 0.0',
        'gpu_autoscaler_capacity_wait_seconds_count{nodepool="a100"} 1.0',
        'gpu_autoscaler_capacity_wait_seconds_sum{nodepool="a100"} 45.0',
        'gpu_autoscaler_coverage_covered_total{metric="gpu_headroom",nodepool="a100"} 1.0',
        'gpu_autoscaler_coverage_judged_total{metric="gpu_headroom",nodepool="a100"} 1.0',
        'gpu_autoscaler_coverage_quantile{metric="gpu_headroom",nodepool="a100"} 0.9',
    ):
        assert line in text.splitlines(), line


def test_with_shards_a_pool_belongs_to_the_owner_of_its_headroom_series() -> None:
    card = scorecard({})
    asked: list[tuple[str, dict[str, str]]] = []

    def owns_series(metric: str, labels: Mapping[str, str]) -> bool:
        asked.append((metric, dict(labels)))
        return labels["nodepool"] == "a100"

    plans = (MetricPlan("gpu_demand_forecast", "gpus", "demand"), MetricPlan("gpu_headroom", "gpus", "headroom"))
    scoring.follow_shards(card, owns_series, plans)
    assert (card.owns("a100"), card.owns("h100"), card.owns("")) == (True, False, False)
    assert asked == [("gpu_headroom", {"nodepool": "a100"}), ("gpu_headroom", {"nodepool": "h100"})]


@pytest.mark.parametrize(
    ("body", "logged"),
    [
        # kube-state-metrics answered, but a100's allocatable GPUs are NaN: a100 is skipped, h100 sampled.
        (
            {"status": "success", "data": {"resultType": "matrix", "result": [
                {"metric": {"nodepool": "a100"}, "values": [[NOW.timestamp(), "NaN"]]},
                {"metric": {"nodepool": "h100"}, "values": [[NOW.timestamp(), "8"]]},
            ]}},
            "scorecard: pool a100 at 2026-11-20 09:00:00+00:00: short, held, used (2.0, nan, nan): not counts",
        ),
        ("<html>502 Bad Gateway</html>", "scorecard: GPUs held and used not read ("),
        ({"status": "success", "data": {"resultType": "matrix", "result": "many"}}, "GPUs held and used not read ("),
    ],
)  # fmt: skip
async def test_a_garbled_prometheus_answer_is_logged_and_costs_the_minute_only(
    body: Any, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def query_range(request: web.Request) -> web.Response:
        return web.json_response(body) if isinstance(body, dict) else web.Response(text=body)

    app = web.Application()
    app.router.add_route("*", "/api/v1/query_range", query_range)
    async with (
        TestServer(app) as server,
        PrometheusSource(PrometheusClientSettings(url=str(server.make_url("")), retries=0, timeout_s=5)) as prometheus,
    ):
        card = scorecard({"a100": 2.0}, PoolCapacity(prometheus))  # type: ignore[arg-type]
        card.pods = PodOutcomes(pod_pool=lambda pod: None, job=lambda key: None, record=card.record)
        with caplog.at_level(logging.ERROR):
            await card.collect(NOW)
    assert logged in caplog.text
    assert sorted(card.cards) == (["h100"] if "nan" in logged else [])


async def test_a_minute_is_skipped_while_the_previous_one_still_waits_for_prometheus(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    class Slow(Capacity):
        async def read(self, now: datetime) -> tuple[dict[str, float], dict[str, float]]:
            await release.wait()
            return await super().read(now)

    card = scorecard({"a100": 1.0}, Slow({"a100": 8.0}, {"a100": 8.0}))
    first = asyncio.create_task(card.collect(NOW))
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING):
        await card.collect(NOW + MINUTE)
    release.set()
    await first
    assert "the previous minute is still being collected; 2026-11-20 09:01:00+00:00 not sampled" in caplog.text
    assert card.cards["a100"].last_sample == (NOW.timestamp(), 1.0, 8.0, 8.0)


async def test_without_a_pod_watch_short_is_unknown_and_a_target_calibrates_on_no_minute_of_it() -> None:
    from adapters.kubernetes.dra_allocations import PoolGpus

    card = LiveScorecard(
        headroom_metrics=["gpu_headroom"],
        capacity=Capacity({"a100": 8.0}, {"a100": 4.0}),  # type: ignore[arg-type]
        dra_gpus=lambda: PoolGpus(held={"a100": 8.0, "dra": 4.0}, used={"a100": 2.0, "dra": 1.0}),
    )
    for minute in range(3):
        await card.collect(NOW + minute * MINUTE)
    figures = card.figures(NOW + 2 * MINUTE)
    hour = {
        pool: (f["1h"]["minutes_scored"], f["1h"]["minutes_short"], f["1h"]["gpu_allocation"])
        for pool, f in figures.items()
    }
    # DRA's devices and claims add to what kube-state-metrics shows: a100 holds 16 and uses 6.
    assert hour == {"a100": (0, None, 6 / 16), "dra": (0, None, 0.25)}
    ledger = card.pool_ledger("a100")
    assert ledger is not None and len(ledger) == 0 and len(card.cards["a100"].ledger()) == 2
