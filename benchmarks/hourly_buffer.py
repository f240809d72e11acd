"""Would a buffer per hour of day beat one tuned buffer? Walk-forward, on a demand series, without the
cluster: a candidate measured before it is built (docs/service-levels.md).

    .venv/bin/python tests/data_helpers.py --out /tmp/traces
    PYTHONPATH=. .venv/bin/python -m benchmarks.hourly_buffer /tmp/traces/helios_running_gpus.csv.gz [--lead-minutes 5]

For each minute, the GPUs the demand rises by over the lead time (the peak of the next ``lead``
minutes above the demand now). Each day from the eighth, both rules are tuned on the 7 days before
and run on the day: one buffer, the smallest whose misses (a rise above the buffer) stayed within
the target; or a buffer per hour of day, each hour's quantile q of the rises, q the cheapest level
(0.5 to 1) that met the target over the week. Prints each rule's mean buffer and the share of minutes
missed on the days it ran, for targets of 1 % and 0.3 %. No node rounding, no controller: a bound on
what the candidate could save, not a simulation.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

LEVELS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999, 1.0)
TARGETS = (0.01, 0.003)


def rises(values: np.ndarray, lead_steps: int) -> np.ndarray:
    """The peak over the next ``lead_steps`` above each value; NaN where the series ends first."""
    padded = np.append(values, [np.nan] * lead_steps)
    ahead = np.lib.stride_tricks.sliding_window_view(padded, lead_steps + 1)[: len(values), 1:]
    rise = np.full(len(values), np.nan)
    whole = ~np.isnan(ahead).any(axis=1)
    rise[whole] = ahead[whole].max(axis=1) - values[whole]
    return rise


def one_buffer(past: np.ndarray, target: float) -> float:
    grid = np.arange(0, int(past.max()) + 2)
    missed = np.array([(past > buffer).mean() for buffer in grid])
    return float(grid[np.argmax(missed <= target)])


def hourly_buffers(past: np.ndarray, past_hours: np.ndarray, target: float, fallback: float) -> np.ndarray:
    best: tuple[float, np.ndarray] | None = None
    for level in LEVELS:
        profile = np.array(
            [
                np.ceil(np.quantile(past[past_hours == hour], level)) if (past_hours == hour).any() else fallback
                for hour in range(24)
            ]
        )
        held = profile[past_hours]
        if (past > held).mean() <= target and (best is None or held.mean() < best[0]):
            best = (float(held.mean()), profile)
    return best[1] if best is not None else np.full(24, fallback)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", help="a timestamp,value CSV of GPUs requested")
    parser.add_argument("--lead-minutes", type=float, default=5.0)
    args = parser.parse_args()
    frame = pd.read_csv(args.input)
    times = pd.to_datetime(frame.iloc[:, 0], utc=True)
    values = frame.iloc[:, 1].to_numpy(dtype=np.float64)
    step_minutes = (times.iloc[1] - times.iloc[0]).total_seconds() / 60.0
    rise = rises(values, round(args.lead_minutes / step_minutes))
    day = ((times - times.iloc[0]).dt.total_seconds() // 86400).to_numpy().astype(int)
    hour = times.dt.hour.to_numpy()
    for target in TARGETS:
        held = {"one buffer": 0.0, "a buffer per hour": 0.0}
        missed = dict.fromkeys(held, 0)
        minutes = 0
        for today in range(7, int(day.max()) + 1):
            past = (day >= today - 7) & (day < today) & ~np.isnan(rise)
            now = (day == today) & ~np.isnan(rise)
            buffer = one_buffer(rise[past], target)
            profile = hourly_buffers(rise[past], hour[past], target, buffer)
            for rule, served in (("one buffer", np.full(now.sum(), buffer)), ("a buffer per hour", profile[hour[now]])):
                held[rule] += float(served.sum())
                missed[rule] += int((rise[now] > served).sum())
            minutes += int(now.sum())
        for rule in held:
            mean, share = held[rule] / minutes, missed[rule] / minutes
            print(f"target {target:.1%}, {rule}: mean buffer {mean:.2f} GPUs, {share:.3%} of minutes missed")


if __name__ == "__main__":
    main()
