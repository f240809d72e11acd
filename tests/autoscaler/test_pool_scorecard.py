"""A pool's live scorecard: samples integrated into minutes, bounded lists, totals, its document."""

from __future__ import annotations

import json

import numpy as np
import pytest

from autoscaler.scorecard.columns import KEEP_S, WAIT_BUCKETS_S
from autoscaler.scorecard.pools import MAX_HOLD_S, MINUTE_COLUMNS, PoolScorecard

T0 = 1_800_000_000.0  # a whole minute
COLUMNS = MINUTE_COLUMNS[1:]


def short_for_twenty_minutes() -> PoolScorecard:
    card = PoolScorecard()
    for minute in range(21):  # 12 GPUs short from T0 to T0 + 20 min, sampled once a minute
        card.sample(T0 + minute * 60, 12.0 if minute < 20 else 0.0, 16.0, 4.0)
    return card


def test_twelve_gpus_short_for_twenty_minutes_are_240_gpu_minutes_in_20_short_minutes() -> None:
    card = short_for_twenty_minutes()
    hour = card.figures(T0 + 20 * 60)["1h"]
    assert (hour["short_gpu_minutes"], hour["minutes_short"], hour["minutes_scored"]) == (240.0, 20, 20)
    assert hour["idle_gpu_hours"] == pytest.approx(12 * 20 / 60)
    assert hour["gpu_allocation"] == 0.25
    assert (card.totals.short_gpu_seconds, card.totals.minutes_short, card.totals.minutes_scored) == (
        240 * 60.0,
        20,
        20,
    )
    assert card.totals.idle_gpu_seconds == 12 * 20 * 60.0


def test_a_sample_holds_at_most_max_hold_so_a_restart_gap_is_not_scored() -> None:
    card = PoolScorecard()
    card.sample(T0, 5.0, 8.0, 8.0)
    card.sample(T0 + 3600, 0.0, 8.0, 8.0)
    assert card.totals.short_gpu_seconds == 5 * MAX_HOLD_S
    assert card.totals.minutes_scored == MAX_HOLD_S / 60


def test_figures_have_every_field_for_each_period() -> None:
    card = short_for_twenty_minutes()
    card.record_wait(T0 + 60, 90.0)
    card.record_wait(T0 + 120, 30.0)
    card.record_window_delay(T0 + 300, 420.0)
    card.record_queue_wait("quota", T0 + 60, 600.0)
    card.record_queue_wait("quota", T0 + 120, 200.0)
    card.record_queue_wait("capacity", T0 + 180, 240.0)
    card.record_judgment("gpu_headroom", T0, 10.0, 12.0)
    card.record_judgment("gpu_headroom", T0 + 60, 10.0, 8.0)
    card.record_judgment("gpu_headroom", T0 + 120, 10.0, float("nan"))  # not judged
    card.record_busy(T0 + 60, 0.2)
    card.record_busy(T0 + 120, 0.3)
    with pytest.raises(ValueError, match=r"busy share at .*: 1\.5 is not between 0 and 1"):
        card.record_busy(T0 + 180, 1.5)
    figures = card.figures(T0 + 20 * 60)
    assert list(figures) == ["1h", "24h", "7d"]
    assert figures["7d"] == figures["1h"]
    assert figures["1h"] == {
        "minutes_scored": 20,
        "minutes_short": 20,
        "minutes_short_fraction": 1.0,
        "short_gpu_minutes": 240.0,
        "idle_gpu_hours": 4.0,
        "gpu_allocation": 0.25,
        "busy_utilization": 0.25,  # the mean of DCGM's samples in the period
        "capacity_wait_seconds": {"count": 2, "p50": 60.0, "p95": 87.0, "max": 90.0},
        "window_start_delay_seconds": {"count": 1, "p50": 420.0, "p95": 420.0, "max": 420.0},
        "queue_wait_seconds": {
            "quota": {"count": 2, "p50": 400.0, "p95": 580.0, "max": 600.0},
            "admission_check": {"count": 0, "p50": None, "p95": None, "max": None},
            "capacity": {"count": 1, "p50": 240.0, "p95": 240.0, "max": 240.0},
        },
        "coverage": {"gpu_headroom": {"covered": 1, "judged": 2, "coverage": 0.5}},
    }
    assert card.queue.histograms["quota"].cumulative()[5:7] == [(600, 2), (900, 2)]
    assert card.coverage_totals == {"gpu_headroom": [1, 2]}
    assert card.wait_histogram.cumulative()[:4] == [(15, 0), (30, 1), (60, 1), (120, 2)]
    assert card.wait_histogram.cumulative()[-1] == (float("inf"), 2)


def test_the_hour_leaves_out_what_is_older() -> None:
    card = short_for_twenty_minutes()
    later = T0 + 2 * 3600
    card.sample(later, 0.0, 16.0, 16.0)
    figures = card.figures(later + 60)
    assert figures["1h"]["short_gpu_minutes"] == 0.0
    assert figures["24h"]["short_gpu_minutes"] == 240.0


def test_minutes_and_events_older_than_seven_days_are_dropped() -> None:
    card = short_for_twenty_minutes()
    card.record_wait(T0, 10.0)
    card.record_queue_wait("admission_check", T0, 10.0)
    card.sample(T0 + KEEP_S + 3600, 0.0, 1.0, 1.0)
    assert (len(card.minutes), len(card.waits), len(card.queue.events["admission_check"])) == (0, 0, 0)
    assert card.totals.minutes_short == 20  # the counters keep counting


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf")])
def test_a_sample_that_is_not_a_count_is_refused_by_name(bad: float) -> None:
    card = PoolScorecard()
    with pytest.raises(ValueError, match="is not a finite number >= 0"):
        card.sample(T0, bad, 1.0, 1.0)
    assert card.last_sample is None


def test_the_document_round_trips_through_json() -> None:
    card = short_for_twenty_minutes()
    card.record_wait(T0 + 60, 90.0)
    card.record_queue_wait("admission_check", T0 + 60, 45.0)
    card.record_judgment("gpu_headroom", T0, 10.0, 12.0)
    card.record_judgment("gpu_headroom", T0 + 60, 10.0, -3.0)  # demand fell over the lead time
    restored = PoolScorecard.from_document(json.loads(json.dumps(card.document())))
    assert restored.document() == card.document()
    assert restored.figures(T0 + 1200) == card.figures(T0 + 1200)
    restored.sample(T0 + 21 * 60, 12.0, 16.0, 4.0)  # minute 20 had none short
    restored.sample(T0 + 22 * 60, 0.0, 16.0, 4.0)
    assert (restored.totals.minutes_short, restored.totals.minutes_scored) == (21, 22)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"minutes": "many"}, "minutes: not a JSON object"),
        ({"minutes": {"start": [T0], "short_gpu_seconds": ["x"]}}, r"minutes.short_gpu_seconds: 'x' is not a finite"),
        ({"minutes": {"start": [T0, T0 - 60]} | {k: [0, 0] for k in COLUMNS}}, "minutes.start: not in time order"),
        ({"minutes": {"start": [T0], "short_gpu_seconds": []}}, "minutes: columns start, .* differ in length"),
        ({"minutes": {"start": [T0] * 30_081}}, "minutes.start: not a list of at most 30080 numbers"),
        ({"waits": {"at": [T0], "seconds": [-5.0]}}, r"waits.seconds: -5.0 is not a finite number >= 0"),
        ({"totals": {"short_gpu_seconds": float("nan")}}, "totals.short_gpu_seconds: nan"),
        ({"totals": {"bogus": 1.0}}, "totals: unknown fields"),
        ({"wait_histogram": {"counts": [1], "total_s": 1.0}}, "wait_histogram.counts"),
        ({"coverage_totals": {"m": [3, 2]}}, "coverage_totals.m: 3 covered of 2 judged"),
        ({"queue_quota_waits": {"at": [T0], "seconds": [None]}}, "queue_quota_waits.seconds: None is not a finite"),
        ({"queue_capacity_wait_histogram": {"counts": [1]}}, "queue_capacity_wait_histogram.counts"),
        ({"judgments": []}, "judgments: not a JSON object"),
        ({"judgments": {"m": {"at": [T0], "served": [1.0], "realized": [float("inf")]}}}, "judgments.m.realized: inf"),
        ({"totals": {"short_gpu_seconds": 1e-320}}, r"totals.short_gpu_seconds: 1e-320 is not a finite number \(nor "),
    ],
)
def test_a_corrupt_document_is_refused_naming_the_field(change: dict[str, object], message: str) -> None:
    document = short_for_twenty_minutes().document() | change
    with pytest.raises(ValueError, match=message):
        PoolScorecard.from_document(json.loads(json.dumps(document)))


def test_wait_buckets_are_sorted() -> None:
    assert list(WAIT_BUCKETS_S) == sorted(WAIT_BUCKETS_S)
    assert np.all(np.diff(WAIT_BUCKETS_S) > 0)


def test_minutes_with_gpus_short_unknown_count_held_and_used_but_are_not_scored() -> None:
    card = PoolScorecard()
    for minute in range(10):  # no Pending-pod watch for 10 minutes, then one: 4 GPUs short for 5
        card.sample(T0 + minute * 60, None, 8.0, 6.0)
    for minute in range(10, 16):
        card.sample(T0 + minute * 60, 4.0 if minute < 15 else 0.0, 8.0, 6.0)
    hour = card.figures(T0 + 15 * 60)["1h"]
    assert (hour["minutes_scored"], hour["minutes_short"], hour["minutes_short_fraction"]) == (5, 5, 1.0)
    assert hour["short_gpu_minutes"] == 20.0
    assert hour["idle_gpu_hours"] == pytest.approx(2 * 15 / 60)  # every minute's held and used
    assert (card.totals.minutes_scored, card.totals.minutes_short, card.totals.held_gpu_seconds) == (5, 5, 8 * 900.0)
    assert np.isnan(card.ledger().between(T0, T0 + 600).short_gpu_seconds).all()
    early = PoolScorecard()
    for minute in range(3):
        early.sample(T0 + minute * 60, None, 8.0, 6.0)
    figures = early.figures(T0 + 3 * 60)["1h"]
    assert (figures["minutes_scored"], figures["minutes_short"]) == (0, None)
    assert (figures["minutes_short_fraction"], figures["short_gpu_minutes"]) == (None, None)
    assert figures["gpu_allocation"] == 0.75
    # On disk an unknown minute's short GPU-seconds are null, and they come back unknown.
    document = json.loads(json.dumps(early.document(), allow_nan=False))
    assert document["minutes"]["short_gpu_seconds"] == [None, None]
    assert document["last_sample"] == [T0 + 120, None, 8.0, 6.0]
    restored = PoolScorecard.from_document(document)
    assert restored.figures(T0 + 3 * 60) == early.figures(T0 + 3 * 60)
