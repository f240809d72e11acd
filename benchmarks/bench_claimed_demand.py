"""What recording DRA-claimed GPUs costs a pull (docs/kubernetes.md, "Dynamic Resource Allocation").

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_claimed_demand [--pools 2] [--repeat 5]

A ``gpus_requested`` signal with a 1-minute step and the default 14-day lookback, whose every pool had
claims at every minute (20,160 points each: the most the record holds). Prints the best of
``--repeat`` timings of what a pull does on the event loop (record the claims now, build the saved
document, add the record to each pool's two-week series) and of writing the file (off the loop), and
the file's size. One process, one core.
"""

from __future__ import annotations

import argparse
import tempfile
import timeit
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from adapters.prometheus import presets
from adapters.types import Signal
from autoscaler.refresh.claimed_demand import ClaimedDemandSource

NOW = datetime(2026, 11, 20, tzinfo=UTC)
LOOKBACK = timedelta(days=14)
POINTS = int(LOOKBACK / timedelta(minutes=1))


class NoSource:
    """The wrapped Prometheus source: never pulled here."""

    name = "gpus_requested"

    async def pull(self, now: datetime) -> list[Signal]:
        return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    pools = [f"pool-{i}" for i in range(args.pools)]
    index = pd.date_range(end=pd.Timestamp(NOW), periods=POINTS, freq="1min")
    step = pd.Timedelta(minutes=1)
    series = [Signal("gpus_requested", {"nodepool": p}, pd.Series(np.full(POINTS, 4.0), index=index), step)
              for p in pools]  # fmt: skip
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "claimed_demand-gpus_requested.json"
        query = presets.gpus_requested(step=timedelta(minutes=1), per_step="last")
        source = ClaimedDemandSource(NoSource(), query, lambda: dict.fromkeys(pools, 2.0), LOOKBACK, path)
        for pool in pools:
            source.recorded[pool] = {int((NOW - timedelta(minutes=m)).timestamp()): 2.0 for m in range(POINTS, 0, -1)}
        minute = iter(range(1_000_000))

        def on_the_loop() -> None:
            source.record(NOW + timedelta(minutes=next(minute)))
            source._document()
            for signal in series:
                source._with_claims(signal)

        loop_s = min(timeit.repeat(on_the_loop, number=1, repeat=args.repeat))
        write_s = min(timeit.repeat(lambda: source._save(source._document()), number=1, repeat=args.repeat))
        size = path.stat().st_size
    print(f"{args.pools} pools x {POINTS} points: on the event loop {loop_s * 1000:.1f} ms per pull; "
          f"writing the file (off the loop) {write_s * 1000:.1f} ms; file {size / 1e6:.2f} MB")  # fmt: skip


if __name__ == "__main__":
    main()
