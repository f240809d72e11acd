"""What the live scorecard costs with a full week per pool (docs/scorecard.md, "Bounds and cost").

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_scorecard [--pools 20] [--repeat 5]

Each pool is sampled once a minute for 7 days (10,080 minutes; short, held and used GPUs drawn at
random, so the file is as large as random floats make it), with 2,000 capacity waits and 2,000
judgments. Prints, per pool, the best of ``--repeat`` timings of: one sample, the saved document
built (on the event loop after each refresh), that document written as JSON (off the loop), the
figures of ``GET /api/v1/scorecard`` (first after a change, and again before the next one: each
pool's arrays are built once per change), the ``/metrics`` collector, the targets' collector (one headroom
with a 1 % target per pool: attained over 4 windows and the budget), and reading the file back at start.
One process, one core.
"""

from __future__ import annotations

import argparse
import json
import time
import timeit
from datetime import UTC, datetime

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest

from autoscaler.scorecard.live import LiveScorecard
from autoscaler.scorecard.pools import PoolScorecard
from autoscaler.scorecard.target_status import target_status
from autoscaler.serving.provenance import TargetChoice
from autoscaler.web.ops.scorecard_metrics import ScorecardMetrics
from autoscaler.web.ops.target_metrics import TargetMetrics

T0 = 1_800_000_000.0
MINUTES = 7 * 24 * 60


def filled(live: LiveScorecard, pools: int) -> float:
    rng = np.random.default_rng(0)
    for pool in range(pools):
        card = live.card(f"pool-{pool}")
        for minute in range(MINUTES + 1):
            card.sample(T0 + 60 * minute, float(rng.integers(0, 3)), 64.0, float(rng.integers(20, 64)))
        for event in range(2000):
            card.record_wait(T0 + 300 * event, float(rng.exponential(60)))
            card.record_judgment("gpu_headroom", T0 + 300 * event, 4.0, float(rng.normal(2, 2)))
    return T0 + 60 * MINUTES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pools", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    live = LiveScorecard(headroom_metrics=["gpu_headroom"])
    started = time.perf_counter()
    end = filled(live, args.pools)
    print(f"{args.pools} pools x {MINUTES} minutes filled in {time.perf_counter() - started:.1f} s")
    document = live.document()
    text = json.dumps(document)
    registry = CollectorRegistry()
    registry.register(ScorecardMetrics(live.owned_cards, {"gpu_headroom": 0.9}))
    card = live.cards["pool-0"]
    targets = CollectorRegistry()
    choices = {pool: TargetChoice("minutes_short_fraction", 0.01, pool, 7 * 86400.0, "p97", None, "", None)
               for pool in live.cards}  # fmt: skip
    targets.register(
        TargetMetrics(lambda: {(p, "gpu_headroom"): target_status(choices[p], c, end) for p, c in live.cards.items()})
    )
    now = datetime.fromtimestamp(end, UTC)

    def restore() -> None:
        for entry in json.loads(text)["pools"].values():
            PoolScorecard.from_document(entry)

    def figures_after_a_change() -> None:
        for pool_card in live.cards.values():  # an event in every pool: each rebuilds its arrays
            pool_card.record_wait(end, 1.0)
        live.figures(now)

    timings = {
        "document built (event loop)": live.document,
        "document written as JSON (off the loop)": lambda: json.dumps(document),
        "GET /api/v1/scorecard figures, first after a change in every pool": figures_after_a_change,
        "GET /api/v1/scorecard figures, again before the next change": lambda: live.figures(now),
        "/metrics collector": lambda: generate_latest(registry),
        "/metrics targets' collector": lambda: generate_latest(targets),
        "file read back at start": restore,
    }
    minutes = iter(range(1, args.repeat + 1))  # each sample a minute after the last, as refreshes come
    sample_s = min(
        timeit.repeat(lambda: card.sample(end + 60 * next(minutes), 1.0, 64.0, 30.0), number=1, repeat=args.repeat)
    )
    print(f"one sample: {sample_s * 1000:.2f} ms")
    for name, call in timings.items():
        best = min(timeit.repeat(call, number=1, repeat=args.repeat))
        print(f"{name}: {best * 1000 / args.pools:.1f} ms per pool ({best * 1000:.0f} ms for {args.pools})")
    print(f"file size: {len(text) / args.pools / 1e6:.2f} MB per pool")


if __name__ == "__main__":
    main()
