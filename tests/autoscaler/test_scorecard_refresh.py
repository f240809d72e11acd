"""The live scorecard on the service's refresh: the real refresher on a real Prometheus serves headroom,
``after_refresh`` scores each refresh, and each served headroom is judged once its lead time has passed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from autoscaler.app.factory import after_refresh
from autoscaler.refresh.pipeline import open_pipeline
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import ForecastPools
from autoscaler.serving.provider import SnapshotProvider, empty_snapshot
from autoscaler.web.shared.readiness import Readiness
from tests.autoscaler.live_cluster import Clock
from tests.autoscaler.test_live_scorecard import (
    MINUTE,
    api_answer,
    busy,
    cluster,
    every_period,
    period,
    sample,
    settings,
)
from tests.eventually import eventually
from tests.prometheus_fixture import PrometheusServer

pytestmark = pytest.mark.prometheus
__all__ = ["cluster"]  # the fixture, imported so that pytest finds it (this module starts its own Prometheus)
FORECAST = {"lookback": "3h", "interval": "1m", "default_lead_time": "5m", "reselect_every": "1d"}
SIGNAL = [{"name": "gpus_requested", "preset": "gpus_requested", "by": ["nodepool"], "step": "1m"}]


async def test_each_refresh_is_scored_and_its_headroom_judged_after_the_lead_time(
    cluster: tuple[PrometheusServer, pd.Timestamp], kube_api: Any, tmp_path: Path
) -> None:
    server, t0 = cluster
    configured = settings(server.url, tmp_path, forecast=FORECAST, signals=SIGNAL)
    clock = Clock()
    readiness = Readiness()
    async with open_pipeline(configured, kube_api) as pipeline:
        scorecard = pipeline.scorecard
        assert scorecard is not None
        with ThreadPoolExecutor(max_workers=1) as pool:
            refresher = Refresher(
                provider=SnapshotProvider(empty_snapshot(pipeline.metrics), clock=clock),
                inputs=pipeline,
                pools=ForecastPools([pool]),
                clock=clock,
                on_success=lambda snapshot: after_refresh(snapshot, readiness, refresher, pipeline, configured),
            )
            # Decisions at minutes 60-68; those of 60-63 have had their 5-minute lead time by 68.
            for minute in range(60, 69):
                clock.now = t0 + minute * MINUTE
                snapshot = await refresher.refresh_once()
                assert {s.labels["nodepool"] for s in snapshot.series["gpu_headroom"]} == {"a100", "h100", "l4"}
                await eventually(
                    lambda: all(card.last_sample and card.last_sample[0] == clock.now.timestamp()
                                for card in scorecard.cards.values()) and len(scorecard.cards) == 3,
                    message="this refresh scored", timeout=10,
                )  # fmt: skip
        status, body, metrics = await api_answer(pipeline, (t0 + 68 * MINUTE).to_pydatetime())
    # Demand held steady: every served headroom covered the (zero) rise over its lead time.
    covered = {"gpu_headroom": {"covered": 4, "judged": 4, "coverage": 1.0}}
    a100, h100, l4_idle = busy(6, 16), busy(8, 8), round(8 * 8 / 60, 6)  # DCGM: the scenario's pods' GPUs
    assert (status, body) == (
        200,
        {
            "at": f"{t0 + 68 * MINUTE:%Y-%m-%dT%H:%M:%SZ}",
            "cluster_queues": [],
            "pools": [
                {
                    "pool": "a100",
                    "periods": every_period(period(8, 0, 0.0, 1.6, 0.25, coverage=covered, busy=a100)),
                    "targets": {},
                },
                {
                    "pool": "h100",
                    "periods": every_period(period(8, 0, 0.0, 0.0, 1.0, coverage=covered, busy=h100)),
                    "targets": {},
                },
                {
                    "pool": "l4",
                    "periods": every_period(period(8, 0, 0.0, l4_idle, 0.0, coverage=covered, busy=0.0)),
                    "targets": {},
                },
            ],
        },
    )
    assert sample(metrics, "gpu_autoscaler_coverage_judged_total", "a100") == 4
    assert (tmp_path / "scorecard.json").exists()
