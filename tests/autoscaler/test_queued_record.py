"""The record of GPUs waiting in Kueue's queues (``autoscaler.refresh.queued_record``): one point per
refresh, 0 for a pool where nothing waits, bounded by the lookback."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from autoscaler.refresh.queued_record import QueuedWorkloadRecord

T0 = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


def values(record: QueuedWorkloadRecord, pool: str) -> list[tuple[str, float]]:
    series = record.history(pool)
    assert series is not None
    return [(f"{at:%H:%M:%S}", float(gpus)) for at, gpus in series.items()]


def test_each_refresh_is_a_point_and_a_pool_no_longer_named_is_0():
    waiting = [{"a100": 16.0}, {"a100": 16.0, "": 8.0}, {}]
    record = QueuedWorkloadRecord(lambda: waiting.pop(0), timedelta(hours=1))
    assert record.history("a100") is None  # nothing recorded yet
    for minute in range(3):
        record.record(T0 + timedelta(minutes=minute))
    assert values(record, "a100") == [("09:00:00", 16.0), ("09:01:00", 16.0), ("09:02:00", 0.0)]
    assert values(record, "") == [("09:00:00", 0.0), ("09:01:00", 8.0), ("09:02:00", 0.0)]
    assert values(record, "h100") == [("09:00:00", 0.0), ("09:01:00", 0.0), ("09:02:00", 0.0)]
    assert record.newest() == {"": 0.0, "a100": 0.0}


def test_the_record_keeps_the_lookback_and_a_refresh_in_the_same_second_replaces_its_point():
    waiting = {"a100": 1.0}
    record = QueuedWorkloadRecord(lambda: waiting, timedelta(minutes=10))
    for minute in range(0, 30, 5):
        waiting = {"a100": float(minute)}
        record.record(T0 + timedelta(minutes=minute))
    waiting = {"a100": 99.0, "h100": float("nan")}  # not a count: left out
    record.record(T0 + timedelta(minutes=25))
    assert values(record, "a100") == [("09:20:00", 20.0), ("09:25:00", 99.0)]
    assert record.newest() == {"a100": 99.0}


def test_a_clock_that_goes_back_restarts_the_record():
    record = QueuedWorkloadRecord(lambda: {"a100": 4.0}, timedelta(hours=1))
    record.record(T0)
    record.record(T0 - timedelta(minutes=1))
    assert values(record, "a100") == [("08:59:00", 4.0)]
