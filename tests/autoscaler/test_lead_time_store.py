"""NodeClaim lead-time samples kept in the state directory: a restarted service without publication
still knows the lead times of NodeClaims consolidated away; a damaged file is said and skipped."""

from __future__ import annotations

import json
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

from adapters.kubernetes.nodeclaims import LeadTimeHistory, LeadTimeSample
from autoscaler.app.restoring import restore_saved
from autoscaler.refresh.pipeline import Pipeline
from autoscaler.refresh.refresher import Refresher
from autoscaler.refresh.workers import ForecastPools
from autoscaler.replication import lead_time_store
from autoscaler.serving.provider import SnapshotProvider, empty_snapshot
from autoscaler.targets.plans import RefreshSettings
from autoscaler.web.shared.readiness import Readiness
from tests.autoscaler.test_kubernetes_inputs import METRICS, PLANS

T0 = datetime(2026, 11, 20, 8, tzinfo=UTC)


def sample(name: str, minutes: float) -> LeadTimeSample:
    return LeadTimeSample("a100", name, f"uid-{name}", T0, T0 + timedelta(minutes=minutes), "Ready")


def restored(state_dir: Path) -> LeadTimeHistory:
    """The samples the service's own restore at start reads from ``state_dir``."""
    after = LeadTimeHistory()
    pipeline = Pipeline(
        metrics=METRICS, plans=PLANS, sources=(),
        refresh=RefreshSettings(interval=timedelta(minutes=1), lead_time=timedelta(minutes=5)), lead_times=after,
    )  # fmt: skip
    with ThreadPoolExecutor(max_workers=1) as pool:
        provider = SnapshotProvider(empty_snapshot(METRICS))
        refresher = Refresher(provider=provider, inputs=pipeline, pools=ForecastPools([pool]))
        restore_saved(refresher, Readiness(), pipeline, state_dir)
    return after


def test_samples_survive_a_restart_without_publication(tmp_path):
    before = LeadTimeHistory()
    for index, minutes in enumerate([4, 5, 7]):
        before.add(sample(f"n{index}", minutes))
    lead_time_store.save(tmp_path / lead_time_store.FILE_NAME, before.samples())
    assert [s.seconds for s in restored(tmp_path).samples("a100")] == [240.0, 300.0, 420.0]


def test_a_sample_ready_in_2099_is_dropped_at_start_naming_the_file_and_the_field(tmp_path, caplog):
    """Kept, it would never age out of the history."""
    future = LeadTimeSample("a100", "ahead", "uid-ahead", T0, datetime(2099, 1, 1, tzinfo=UTC), "Ready")
    path = tmp_path / lead_time_store.FILE_NAME
    lead_time_store.save(path, [sample("n0", 4), future])
    with caplog.at_level(logging.WARNING, logger=lead_time_store.log.name):
        assert [s.name for s in restored(tmp_path).samples("a100")] == ["n0"]
    assert re.search(
        rf"{re.escape(str(path))}: dropped lead-time sample 1: ready 2099-01-01T00:00:00\+00:00 is \d+ s in the "
        r"future \(a clock ahead when it was saved\?\); at most 60 s of skew is accepted",
        caplog.text,
    ), caplog.text


def test_60_s_of_clock_skew_is_accepted(tmp_path):
    path = tmp_path / lead_time_store.FILE_NAME
    lead_time_store.save(path, [sample("n0", 4)])
    ready_s = (T0 + timedelta(minutes=4)).timestamp()
    assert [s.name for s in lead_time_store.load(path, now_s=ready_s - 60)] == ["n0"]
    assert lead_time_store.load(path, now_s=ready_s - 61) == []


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
    with caplog.at_level(logging.WARNING):
        assert [s.name for s in lead_time_store.load(path)] == ["n0"]
    assert f"{path}: dropped lead-time sample 1: created 'garbage' and ready '2026' are not two times" in caplog.text
    caplog.clear()
    path.write_text(json.dumps({**document, "samples": {"n0": document["samples"][0]}}))
    with caplog.at_level(logging.ERROR):
        assert lead_time_store.load(path) == []
    assert f"lead-time samples in {path} not restored: 'samples' is not a list" in caplog.text
