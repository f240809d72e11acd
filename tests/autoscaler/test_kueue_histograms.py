"""Kueue Workloads' queue waits from Kueue's own histograms (issue #39), where no Workload is watched: a
real Prometheus backfilled with ``kueue_quota_reserved_wait_time_seconds`` and
``kueue_admission_checks_wait_time_seconds`` as Kueue exports them (its buckets, per ``cluster_queue``
and ``priority_class``), read by the live scorecard and shown exactly on ``GET /api/v1/scorecard`` and
``/metrics``. The p50 and p95 are ``histogram_quantile``'s interpolation within a bucket, worked out
by hand below."""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from adapters.prometheus.client import PrometheusClientSettings, PrometheusSource
from autoscaler.scorecard.kueue_histograms import KueueWaitHistograms
from autoscaler.scorecard.live import LiveScorecard
from autoscaler.scorecard.workloads import WorkloadOutcomes
from autoscaler.web.ops.queued_metrics import KueueWaitMetrics
from autoscaler.web.ops.scorecard_views import cluster_queue_panel, scorecard_json
from tests.prometheus_fixture import BackfillSeries, PrometheusServer, binaries_or_skip, write_blocks

pytestmark = pytest.mark.prometheus

BUCKETS = (1.0, *(2.5 * 2**i for i in range(13)))  # Kueue's: 1, 2.5, 5, 10, ... 10240 s, then +Inf
STEP_S = 300
# Seconds each Workload waited, per (ClusterQueue, histogram), observed a day before the end.
WAITED = {
    ("gpu", "kueue_quota_reserved_wait_time_seconds"): [6, 7, 8, 9, 11, 12, 15, 19, 100, 150],
    ("gpu", "kueue_admission_checks_wait_time_seconds"): [3, 3, 30],
    ("cpu", "kueue_quota_reserved_wait_time_seconds"): [0.5],
}
OLD_WAIT_S = 5000.0  # gpu's quota wait observed 8 days before the end: outside the week read


def histogram_series(
    histogram: str, labels: Mapping[str, str], times: np.ndarray, observed: Sequence[tuple[int, float]]
) -> list[BackfillSeries]:
    """The histogram's ``_bucket``, ``_count`` and ``_sum`` counters at ``times``, each observation
    (time, seconds) counted from its time on, as a Kueue that started with the first of ``times``."""
    out = []
    for le in (*BUCKETS, np.inf):
        counts = sum((times >= at) * float(seconds <= le) for at, seconds in observed)
        bucket = {**labels, "le": "+Inf" if le == np.inf else f"{le:g}"}
        out.append(BackfillSeries(f"{histogram}_bucket", bucket, times, [f"{c:g}" for c in counts]))
    count = sum((times >= at) * 1.0 for at, _ in observed)
    total = sum((times >= at) * seconds for at, seconds in observed)
    out.append(BackfillSeries(f"{histogram}_count", labels, times, [f"{c:g}" for c in count]))
    out.append(BackfillSeries(f"{histogram}_sum", labels, times, [f"{s:g}" for s in total]))
    return out


@pytest.fixture(scope="module")
def kueue_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, datetime]]:
    prometheus, promtool = binaries_or_skip()
    end = pd.Timestamp.now(tz="UTC").floor("h") - pd.Timedelta(hours=1)
    times = np.arange(int((end - pd.Timedelta(days=9)).timestamp()), int(end.timestamp()) + 1, STEP_S)
    day_before = int((end - pd.Timedelta(days=1)).timestamp())
    series: list[BackfillSeries] = []
    for (queue, histogram), waits in WAITED.items():
        observed = [(day_before, float(seconds)) for seconds in waits]
        if (queue, histogram) == ("gpu", "kueue_quota_reserved_wait_time_seconds"):
            observed.append((int((end - pd.Timedelta(days=8)).timestamp()), OLD_WAIT_S))
        labels = {"cluster_queue": queue, "priority_class": "", "replica_role": "standalone"}
        series += histogram_series(histogram, labels, times, observed)
    work_dir = tmp_path_factory.mktemp("kueue-histograms")
    blocks = write_blocks(series, promtool, work_dir / "blocks")
    data_dir = work_dir / "server" / "data"
    data_dir.parent.mkdir(parents=True)
    shutil.copytree(blocks, data_dir)
    server = PrometheusServer(
        binary=prometheus, data_dir=data_dir, trace=None, probe_at=end,
        probe_query="count(kueue_quota_reserved_wait_time_seconds_count)",
    )  # fmt: skip
    server.start()
    try:
        yield server, end.to_pydatetime()
    finally:
        server.stop()


async def test_the_scorecard_reads_each_cluster_queues_waits_from_kueues_histograms(kueue_prometheus):
    server, end = kueue_prometheus
    scorecard = LiveScorecard(headroom_metrics=["gpu_headroom"])
    async with PrometheusSource(PrometheusClientSettings(url=server.url, timeout_s=10, retries=0)) as prometheus:
        scorecard.kueue_histograms = KueueWaitHistograms(prometheus)
        await scorecard.collect(end)
    unread = {"count": None, "p50": None, "p95": None}
    week = 7 * 86400.0
    # gpu, quota: 10 waits, 4 in (5, 10], 4 in (10, 20], 2 in (80, 160] (the old 5000 s one is outside
    # the week). p50: rank 5, the first of (10, 20]'s 4: 10 + 10 x 1/4 = 12.5. p95: rank 9.5, 1.5 of
    # (80, 160]'s 2: 80 + 80 x 1.5/2 = 140. Admission checks: 2 in (2.5, 5], 1 in (20, 40]: p50 at
    # rank 1.5: 2.5 + 2.5 x 1.5/2 = 4.375; p95 at rank 2.85: 20 + 20 x 0.85 = 37.
    # cpu, quota: one wait of 0.5 s, in the first bucket (0, 1]: p50 0.5, p95 0.95.
    assert scorecard_json(scorecard, end)["cluster_queues"] == [
        {"cluster_queue": "cpu", "window_seconds": week, "waits": {
            "quota": {"count": 1.0, "p50": 0.5, "p95": 0.95},
            "admission_check": unread, "admission": unread}},
        {"cluster_queue": "gpu", "window_seconds": week, "waits": {
            "quota": {"count": 10.0, "p50": 12.5, "p95": 140.0},
            "admission_check": {"count": 3.0, "p50": 4.375, "p95": 37.0},
            "admission": unread}},
    ]  # fmt: skip
    registry = CollectorRegistry()
    registry.register(KueueWaitMetrics(lambda: scorecard.cluster_queue_waits))
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
    }
    assert samples[("gpu_autoscaler_kueue_wait_seconds", (("cluster_queue", "gpu"), ("quantile", "0.95"),
                                                          ("wait", "quota")))] == 140.0  # fmt: skip
    assert samples[("gpu_autoscaler_kueue_waits", (("cluster_queue", "gpu"), ("wait", "admission_check")))] == 3.0
    assert len(samples) == 3 * 3  # cpu quota, gpu quota and gpu admission_check: a count and two quantiles each
    assert (  # the index page's table: minutes, as the scorecard's other waits
        "<tr><td>gpu</td><td>0.2 min / 2.3 min (10 Workloads)</td><td>0.1 min / 0.6 min (3 Workloads)</td>"
        "<td>- / -</td></tr>"
    ) in cluster_queue_panel(scorecard)


async def test_a_scorecard_that_watches_workloads_does_not_read_the_histograms(kueue_prometheus):
    """Where Workloads are watched, their own waits are exact and per pool: the histograms are not read."""
    server, end = kueue_prometheus
    scorecard = LiveScorecard(headroom_metrics=["gpu_headroom"])
    scorecard.workloads = WorkloadOutcomes(pools=lambda workload: [], record=scorecard.record_queue_wait)
    async with PrometheusSource(PrometheusClientSettings(url=server.url, timeout_s=10, retries=0)) as prometheus:
        scorecard.kueue_histograms = KueueWaitHistograms(prometheus)
        await scorecard.collect(end)
    assert scorecard_json(scorecard, end)["cluster_queues"] == []
    assert cluster_queue_panel(scorecard) == ""


class CountingPrometheus:
    """Answers nothing, and counts the queries."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    async def query_range(self, promql: str, *args: object) -> list[object]:
        self.queries.append(promql)
        return []


async def test_the_histograms_are_read_again_every_ten_minutes_only():
    prometheus = CountingPrometheus()
    reader = KueueWaitHistograms(prometheus)  # type: ignore[arg-type]
    start = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
    for minute in (0, 1, 9, 10, 11):
        assert await reader.read(start + timedelta(minutes=minute)) == {}
    assert len(prometheus.queries) == 2 * 9  # at 0 and at 10: three histograms, a count and two quantiles each
