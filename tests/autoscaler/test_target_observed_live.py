"""The target observed on a real Prometheus (issue #36, item 4): the service's own ``/metrics``, scraped
each minute of a three-hour scenario and backfilled into Prometheus, gives in PromQL the attainment the
service shows, and the shipped burn-rate rules fire and stay quiet as their promtool cases say
(tests/manifests/alerts_test.yaml).

Pool a100 serves ``gpu_headroom`` to 1 % of minutes short. It is scored every minute for 180 minutes;
5 minutes are short early on (minutes 10-14) and ``BURST`` in a row from minute 130.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.app import scoring
from autoscaler.app.factory import build_ops_app
from autoscaler.scorecard.live import LiveScorecard
from autoscaler.serving.provider import Snapshot, SnapshotProvider
from autoscaler.web.shared.readiness import Readiness
from autoscaler.web.shared.self_metrics import SelfMetrics
from tests.inspection.conftest import TARGET, build_real_forecast
from tests.prometheus_fixture import BackfillSeries, PrometheusServer, binaries_or_skip, write_blocks

pytestmark = pytest.mark.prometheus
RULES = Path(__file__).resolve().parents[2] / "manifests" / "monitoring" / "prometheusrule.yaml"
MINUTES = 180
BURST = 12  # minutes short in a row from minute 130
SHORT_MINUTES = {*range(10, 15), *range(130, 130 + BURST)}
EXPORTED = (
    "gpu_autoscaler_minutes_short_total",
    "gpu_autoscaler_minutes_scored_total",
    "gpu_autoscaler_target_ratio",
    "gpu_autoscaler_target_attained_ratio",
    "gpu_autoscaler_error_budget_remaining_ratio",
)


def served_snapshot() -> Snapshot:
    """The headroom of pool a100 served to 1 % (the inspection tests' target), as the refresher makes it."""
    forecast = build_real_forecast()
    assert forecast.headroom.provenance is not None and TARGET.pool == "a100"
    return replace(forecast.snapshot, series={"gpu_headroom": (forecast.headroom,)})


Scraped = dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, float]]]  # series -> (at, value)


async def scrape_each_minute(start: pd.Timestamp) -> Scraped:
    """Score the pool each minute through the service's own collection, then scrape its /metrics."""
    short_now = {"a100": 0.0}
    scorecard = LiveScorecard(headroom_metrics=["gpu_headroom"], short_gpus=lambda: short_now)
    snapshot = served_snapshot()
    moment = [start]
    self_metrics = SelfMetrics()
    app = build_ops_app(
        provider=SnapshotProvider(snapshot),
        readiness=Readiness(ready=True, reason="test"),
        self_metrics=self_metrics,
        clock=lambda: moment[0].to_pydatetime(),
    )
    scoring.attach(scorecard, (), app, self_metrics)
    scraped: Scraped = {}
    async with TestClient(TestServer(app)) as client:
        for minute in range(MINUTES + 1):
            moment[0] = start + pd.Timedelta(minutes=minute)
            short_now["a100"] = 4.0 if minute in SHORT_MINUTES else 0.0
            await scoring.score(scorecard, replace(snapshot, created_at=moment[0].to_pydatetime()))
            text = await (await client.get("/metrics")).text()
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if sample.name in EXPORTED:
                        key = (sample.name, tuple(sorted(sample.labels.items())))
                        scraped.setdefault(key, []).append((int(moment[0].timestamp()), sample.value))
    return scraped


def rule_exprs() -> tuple[dict[str, str], dict[str, str]]:
    """The shipped recording rules (record -> expr) and alerts (alert -> expr, recorded names inlined)."""
    groups = yaml.safe_load(RULES.read_text())["spec"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    records = {rule["record"]: rule["expr"] for rule in rules if "record" in rule}
    alerts = {}
    for rule in rules:
        if "alert" in rule:
            expr = rule["expr"]
            for name, recorded in records.items():
                expr = re.sub(rf"\b{re.escape(name)}\b", f"({recorded})", expr)
            alerts[rule["alert"]] = expr
    return records, alerts


ScrapedPrometheus = tuple[PrometheusServer, pd.Timestamp, Scraped]


@pytest.fixture(scope="module")
def scraped_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScrapedPrometheus]:
    start = pd.Timestamp.now(tz="UTC").floor("min") - pd.Timedelta(hours=4)
    scraped = asyncio.run(scrape_each_minute(start))
    prometheus, promtool = binaries_or_skip()
    series = [
        BackfillSeries(name, dict(labels), np.array([at for at, _ in samples]), [repr(v) for _, v in samples])
        for (name, labels), samples in sorted(scraped.items())
    ]
    work = tmp_path_factory.mktemp("target-observed")
    end = start + pd.Timedelta(minutes=MINUTES)
    server = PrometheusServer(
        binary=prometheus,
        data_dir=write_blocks(series, promtool, work),
        trace=None,
        probe_at=end,
        probe_query="count(gpu_autoscaler_minutes_scored_total)",
    )
    server.start()
    yield server, start, scraped
    server.stop()


def test_the_attainment_over_an_hour_is_the_share_of_its_minutes_short(scraped_prometheus: ScrapedPrometheus) -> None:
    server, start, scraped = scraped_prometheus
    records, _ = rule_exprs()
    at = start + pd.Timedelta(minutes=150)  # the hour of minutes 90-149 holds the whole burst
    (ratio,) = server.instant(records["nodepool:gpu_autoscaler_minutes_short:ratio_rate1h"], at)
    assert ratio[0] == {"nodepool": "a100"} and ratio[1] == pytest.approx(BURST / 60, abs=1e-12)
    # The service's own gauge, as Prometheus scraped it, says the same.
    (gauge,) = server.instant('gpu_autoscaler_target_attained_ratio{window="1h"}', at)
    assert gauge[1] == pytest.approx(BURST / 60, abs=1e-12)
    assert gauge[0] == {"__name__": "gpu_autoscaler_target_attained_ratio", "metric": "gpu_headroom",
                        "nodepool": "a100", "window": "1h"}  # fmt: skip
    (target,) = server.instant("gpu_autoscaler_target_ratio", at)
    assert target[1] == TARGET.value
    # Over the whole scenario (the tune window is 7 days: all of it), 17 of 180 minutes short: the budget
    # of 1 % is overspent 9.4 times over.
    budget = scraped["gpu_autoscaler_error_budget_remaining_ratio", (("metric", "gpu_headroom"), ("nodepool", "a100"))]
    assert budget[-1][1] == pytest.approx(1 - (len(SHORT_MINUTES) / MINUTES) / TARGET.value)
    end = start + pd.Timedelta(minutes=MINUTES)
    (window_6h,) = server.instant(records["nodepool:gpu_autoscaler_minutes_short:ratio_rate6h"], end)
    assert window_6h[1] == pytest.approx(len(SHORT_MINUTES) / MINUTES, abs=1e-12)


@pytest.mark.parametrize(
    ("minute", "fast", "slow"),
    [
        (100, False, False),  # 5 short minutes 90 minutes ago: within budget over 30 minutes and 1 hour
        (142, True, True),  # the burst: 12 of the last 60 minutes, all of the last 5: 20x over 1 h, 100x over 5 min
        (160, False, True),  # 18 minutes past it: the 5-minute window is clear, the 30-minute one is not
        (180, False, False),  # 38 minutes past it: both short windows are clear
    ],
)
def test_the_burn_rate_alerts_fire_and_clear_as_their_promtool_cases_say(
    scraped_prometheus: ScrapedPrometheus, minute: int, fast: bool, slow: bool
) -> None:
    server, start, _ = scraped_prometheus
    _, alerts = rule_exprs()
    at = start + pd.Timedelta(minutes=minute)
    labels = {"nodepool": "a100", "metric": "gpu_headroom"}
    for alert, firing in (("GpuAutoscalerErrorBudgetBurnFast", fast), ("GpuAutoscalerErrorBudgetBurnSlow", slow)):
        answer = server.instant(alerts[alert], at)
        assert [found for found, _ in answer] == ([labels] if firing else []), (alert, minute, answer)
