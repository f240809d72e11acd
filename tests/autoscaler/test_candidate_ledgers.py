"""What a target keeps between choices, compactly: each candidate's short and held GPU-seconds per
minute (rebuilt exactly), and the record of refreshes as a ring of rows."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from autoscaler.scorecard.figures import ShortFigures, parse_fraction_target
from autoscaler.simulation.replay import replay_levels
from autoscaler.targets.candidate_ledgers import CandidateLedger
from autoscaler.targets.records import Record
from autoscaler.targets.service_levels import LedgerPrefix, ReplayRequest


def test_a_candidates_minutes_are_rebuilt_bit_for_bit() -> None:
    rng = np.random.default_rng(5)
    starts = 60.0 * np.arange(500)
    short = np.where(rng.random(500) < 0.1, rng.random(500) * 100, 0.0)
    short[7] = 1e-9  # short GPU-seconds too few to count the minute short still sum
    held = np.repeat(rng.integers(0, 20, 25) * 480.0 + rng.random(25) / 3, 20)
    ledger = CandidateLedger.of(starts, short, held)
    assert ledger.short_gpu_seconds.tobytes() == short.tobytes()
    assert ledger.held_gpu_seconds.tobytes() == held.tobytes()
    assert ledger.starts is starts and len(ledger) == 500
    assert len(ledger.short_at) == np.count_nonzero(short) and len(ledger.held_from) <= 25
    empty = CandidateLedger.of(np.zeros(0), np.zeros(0), np.zeros(0))
    assert len(empty.short_gpu_seconds) == len(empty.held_gpu_seconds) == 0
    with pytest.raises(ValueError, match="differ in length"):
        CandidateLedger.of(starts, short[:3], held)


@pytest.mark.parametrize("dropped", [0, 1, 119, 120, 200, 300])
def test_a_day_joins_the_days_kept_and_the_oldest_minutes_go(dropped: int) -> None:
    """Joined compactly, a candidate's kept minutes and a new day's, past the dropped ones, are the
    per-minute arrays joined and cut, bit for bit (a run of held GPU-seconds across the join too)."""
    rng = np.random.default_rng(dropped)

    def minutes(count: int) -> tuple[np.ndarray, np.ndarray]:
        short = np.where(rng.random(count) < 0.2, rng.random(count) * 60, 0.0)
        return short, np.repeat(rng.choice([480.0, 960.0, 1000.5], size=count // 10 + 1), 10)[:count]

    (old_short, old_held), (new_short, new_held) = minutes(120), minutes(180)
    new_held[:7] = old_held[-1]
    kept = CandidateLedger.of(60.0 * np.arange(120), old_short, old_held)
    day = CandidateLedger.of(60.0 * np.arange(120, 300), new_short, new_held)
    joined = kept.then(day, 60.0 * np.arange(dropped, 300), dropped)
    assert joined.short_gpu_seconds.tobytes() == np.concatenate([old_short, new_short])[dropped:].tobytes()
    assert joined.held_gpu_seconds.tobytes() == np.concatenate([old_held, new_held])[dropped:].tobytes()
    with pytest.raises(ValueError, match="not those of both ledgers"):
        kept.then(day, 60.0 * np.arange(10), dropped)


def test_the_replay_sends_compact_ledgers_that_judge_as_the_dense_ones() -> None:
    """The worker's ledgers share one array of minute starts and pickle to a few bytes a minute; a
    window judged on them gives the figures of the dense ledger it was made from."""
    rng = np.random.default_rng(11)
    requested = np.clip(200 + np.cumsum(rng.choice([0.0, 0.0, 8.0, -8.0, 24.0, -24.0], size=1440)), 0, 600)
    headroom = {f"buffer:{gpus}": np.full(1440, float(gpus)) for gpus in range(0, 40, 4)}
    ledgers = replay_levels(ReplayRequest(60.0, requested, headroom, 300.0, 8))
    assert len({id(ledger.starts) for ledger in ledgers.values()}) == 1
    dense_bytes = 4 * 8 * 1440 * len(ledgers)
    assert len(pickle.dumps(ledgers)) < dense_bytes / 5
    target = parse_fraction_target("1%")
    for ledger in ledgers.values():
        compact, dense = LedgerPrefix(ledger), LedgerPrefix(_Dense(ledger))
        for start, end in ((0.0, 86400.0), (3600.0, 7200.0), (1234.0, 50000.0)):
            assert compact.window(start, end) == dense.window(start, end) == _summed(ledger, start, end)
            assert compact.attained(target, start, end, np.zeros(0)) == dense.attained(target, start, end, np.zeros(0))


def _summed(ledger: CandidateLedger, start_s: float, end_s: float) -> tuple[ShortFigures, float]:
    """A window's figures from prefix sums over every minute, zeros included."""
    first, last = np.searchsorted(ledger.starts, (start_s, end_s), side="left").tolist()
    short = np.concatenate([[0.0], np.cumsum(ledger.short_gpu_seconds)])
    minutes = np.concatenate([[0], np.cumsum(ledger.short_gpu_seconds > 1e-6)])
    held = np.concatenate([[0.0], np.cumsum(ledger.held_gpu_seconds)])
    figures = ShortFigures(
        short_gpu_minutes=float(short[last] - short[first]) / 60.0,
        minutes_short=int(minutes[last] - minutes[first]),
        minutes_scored=last - first,
    )
    return figures, float(held[last] - held[first])


class _Dense:
    """A ledger's minutes as plain arrays, as a ``MinuteLedger`` holds them."""

    def __init__(self, ledger: CandidateLedger) -> None:
        self.starts = ledger.starts.copy()
        self.short_gpu_seconds = ledger.short_gpu_seconds
        self.held_gpu_seconds = ledger.held_gpu_seconds


def test_a_record_keeps_its_last_rows_in_order() -> None:
    record = Record(4)
    assert len(record) == 0 and record.highest(0) == 0.0 and record.times().tolist() == []
    for time_s in range(1, 4):
        record.append(float(time_s), np.array([10.0 * time_s, 1.0]))
    assert (record.first_time, record.last_time, record.full) == (1.0, 3.0, False)
    assert record.rows().tolist() == [[10.0, 1.0], [20.0, 1.0], [30.0, 1.0]]
    for time_s in range(4, 7):
        record.append(float(time_s), np.array([70.0 - 10.0 * time_s, 2.0]))
    assert (record.first_time, record.last_time, record.full, len(record)) == (3.0, 6.0, True, 4)
    assert record.times().tolist() == [3.0, 4.0, 5.0, 6.0]
    assert record.rows()[:, 0].tolist() == [30.0, 30.0, 20.0, 10.0]
    assert record.highest(0) == 30.0
    with pytest.raises(ValueError, match="a row of 3 values in a record of rows of 2"):
        record.append(7.0, np.zeros(3))
