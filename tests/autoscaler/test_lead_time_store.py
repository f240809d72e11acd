"""NodeClaim lead-time samples kept in the state directory: a restarted service without publication
still knows the lead times of NodeClaims consolidated away; a damaged file is said and skipped."""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from adapters.kubernetes.nodeclaims import LeadTimeHistory, LeadTimeSample
from autoscaler.app.restoring import restore_saved
from autoscaler.refresh.pipeline import Pipeline
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import ForecastPools
from autoscaler.replication import lead_time_store
from autoscaler.serving.provider import SnapshotProvider, empty_snapshot
from autoscaler.targets.plans import RefreshSettings
from autoscaler.web.readiness import Readiness
from tests.autoscaler.test_kubernetes_inputs import METRICS, PLANS

T0 = datetime(2026, 11, 20, 8, tzinfo=UTC)


def sample(name: str, minutes: float) -> LeadTimeSample:
    return LeadTimeSample("a100", name, f"uid-{name}", T0, T0 + timedelta(minutes=minutes), "Ready")


def test_samples_survive_a_restart_without_publication(tmp_path):
    before = LeadTimeHistory()
    for index, minutes in enumerate([4, 5, 7]):
        before.add(sample(f"n{index}", minutes))
    lead_time_store.save(tmp_path / lead_time_store.FILE_NAME, before.samples())

    after = LeadTimeHistory()
    pipeline = Pipeline(
        metrics=METRICS, plans=PLANS, sources=(),
        refresh=RefreshSettings(interval=timedelta(minutes=1), lead_time=timedelta(minutes=5)), lead_times=after,
    )  # fmt: skip
    with ThreadPoolExecutor(max_workers=1) as pool:
        provider = SnapshotProvider(empty_snapshot(METRICS))
        refresher = Refresher(provider=provider, inputs=pipeline, pools=ForecastPools([pool]))
        restore_saved(refresher, Readiness(), pipeline, tmp_path)
    assert [s.seconds for s in after.samples("a100")] == [240.0, 300.0, 420.0]


def test_a_damaged_file_or_sample_is_logged_and_skipped(tmp_path, caplog):
    path = tmp_path / lead_time_store.FILE_NAME
    path.write_text("{not json")
    with caplog.at_level(logging.ERROR):
        assert lead_time_store.load(path) == []
    assert str(path) in caplog.text
    lead_time_store.save(path, [sample("n0", 4)])
    document = json.loads(path.read_text())
    document["samples"].append(
        {"nodepool": "a100", "uid": "x", "created": "garbage", "ready": "2026", "condition": "Ready"}
    )
    path.write_text(json.dumps(document))
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        assert [s.name for s in lead_time_store.load(path)] == ["n0"]
    assert "lead-time sample 1" in caplog.text
    caplog.clear()
    path.write_text(json.dumps({**document, "samples": {"n0": document["samples"][0]}}))
    with caplog.at_level(logging.ERROR):
        assert lead_time_store.load(path) == []
    assert f"lead-time samples in {path} not restored: 'samples' is not a list" in caplog.text
