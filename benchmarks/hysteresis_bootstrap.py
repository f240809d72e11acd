"""The 95 % intervals of docs/selection-hysteresis.md's hourly table: a paired circular moving-block
bootstrap over origins of the relative change of the 60-minute pinball loss (q = 0.9) with a margin
against without.

    git worktree add --detach /tmp/hysteresis c903bca   # the measured code (not merged)
    (cd /tmp/hysteresis && PYTHONPATH=. python benchmarks/hysteresis_measure.py backtest 1 0,0.1 TRACES) > hourly.jsonl
    python benchmarks/hysteresis_bootstrap.py hourly.jsonl [--block 24] [--resamples 2000] [--seed 0]

Reads the JSON lines ``hysteresis_measure.py backtest`` prints (each trace and margin: the 60-minute
actuals and upper forecasts of every origin); prints one line per trace.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from forecast.metrics import pinball

QUANTILE = 0.9
Run = tuple[np.ndarray, np.ndarray]  # one trace and margin: each origin's 60-minute actual and upper forecast


def run_of(record: dict[str, Any]) -> Run:
    return np.asarray(record["actual_60m"], dtype=float), np.asarray(record["upper_60m"], dtype=float)


def change(before: Run, after: Run, index: np.ndarray | slice = slice(None)) -> float:
    """Relative change of the 60-minute pinball loss (the backtest's own) over the origins ``index``."""
    (actual_before, upper_before), (actual_after, upper_after) = before, after
    loss_before = pinball(actual_before[index], upper_before[index], QUANTILE)
    return pinball(actual_after[index], upper_after[index], QUANTILE) / loss_before - 1


def interval(before: Run, after: Run, block: int, resamples: int, seed: int) -> tuple[float, float]:
    """2.5 % and 97.5 % of :func:`change` over resampled blocks of origins (days of 24 hourly
    origins, wrapped around: circular), the same origins for both (paired)."""
    rng = np.random.default_rng(seed)
    count = len(before[0])
    changes = []
    for _ in range(resamples):
        starts = rng.integers(0, count, size=-(-count // block))
        index = (starts[:, None] + np.arange(block)[None, :]).ravel()[:count] % count
        changes.append(change(before, after, index))
    low, high = np.percentile(changes, [2.5, 97.5])
    return float(low), float(high)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("records", type=Path)
    parser.add_argument("--block", type=int, default=24)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    runs: dict[str, dict[float, dict[str, Any]]] = {}
    for line in args.records.read_text().splitlines():
        record = json.loads(line)
        runs.setdefault(record["trace"], {})[float(record["margin"])] = record
    for trace, by_margin in runs.items():
        without = by_margin[0.0]
        for margin, record in sorted(by_margin.items()):
            if margin == 0.0:
                continue
            before, after = run_of(without), run_of(record)
            low, high = interval(before, after, args.block, args.resamples, args.seed)
            print(f"{trace} margin {margin:g}: {change(before, after):+.1%} ({low:+.1%} .. {high:+.1%})")


if __name__ == "__main__":
    main()
