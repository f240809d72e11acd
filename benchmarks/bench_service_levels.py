"""What choosing a target's candidate costs per series: the replay of every candidate (the quantile
levels and the buffer grid) through the simulator's controller model, and the choice on the ledgers.

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_service_levels [--days 7] [--step 1m] [--window-gpus 16]
        [--learned-failure-rate 0.05]

Helios Earth running GPUs (the real trace, per minute, from ../shared/data), the last ``--days``
of it as the record a tuner keeps (GPUs requested at every refresh), with each candidate level's
headroom made as a rising share of the rise over the next 10 minutes (the replay's cost depends on
how often capacity and placeholders change, not on where the numbers came from). A declared window
of ``--window-gpus`` (the README's nightly 16 GPUs at 02:00) is due over the 5-minute lead time
before each start, so the buffers are replayed with and without it (0: no window, half the
buffers). Prints the time of
``replay_levels`` plus ``LevelTuner.take`` for each choice, and the level
chosen for a 1 % target. The record is fed step by step and a choice made each time one is due
(daily), as the service does: the first replays the first day, each later one only the new day (and
a settling hour). One process, one core: what one forecast worker spends per series each
``tune_every``. With ``--learned-failure-rate``, the pool replayed is one a pool's NodeClaims taught
(autoscaler/targets/launches.py): 37 lead times from 4 to 11 minutes, and that share of launches
failed (0: none failed); without it, the fixed 5-minute lead time.

What a target series costs, per choice: the process CPU seconds (``time.process_time``, not wall)
of the replay and of ``LevelTuner.take``; the bytes pickled to the worker (the ``ReplayRequest``) and
back (the replayed ledgers), as the worker pool pickles them (default protocol); and after the last
choice, the bytes the tuner keeps resident between choices (its record and the candidates' ledgers):
what ``tracemalloc`` counts for an unpickled copy of the tuner.
"""

from __future__ import annotations

import argparse
import os
import pickle
import time

import numpy as np
import pandas as pd

from autoscaler.scorecard.figures import parse_fraction_target
from autoscaler.simulation.replay import replay_levels
from autoscaler.targets.launches import LearnedLaunches
from autoscaler.targets.target_levels import CANDIDATE_LEVELS, LevelTuner, describe
from autoscaler.targets.tuning import TuningSettings
from benchmarks.unpickled import unpickled_bytes
from forecast.durations import parse_positive_duration
from tests.data_helpers import helios_running_gpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--step", default="1m", help="the refresh interval (the record's step)")
    parser.add_argument("--window-gpus", type=float, default=16.0, help="a nightly window's GPUs (0: none)")
    parser.add_argument("--learned-failure-rate", type=float, default=None, help="replay on learned launches")
    args = parser.parse_args()
    step_s = parse_positive_duration(args.step).total_seconds()
    series = helios_running_gpus()
    if step_s > 60:
        series = series.resample(pd.Timedelta(seconds=step_s)).mean()
    record = series.iloc[-int(args.days * 86400 / step_s) :].to_numpy()
    ahead_steps = max(1, int(600 / step_s))
    rise = pd.Series(record[::-1]).rolling(ahead_steps, min_periods=1).max().to_numpy()[::-1] - record
    start = 1_700_000_000.0
    tuner = LevelTuner(parse_fraction_target("1%"), TuningSettings(), gpus_per_node=8, step_s=step_s)
    if args.learned_failure_rate is not None:
        lead_times = np.linspace(240.0, 660.0, 37)
        tuner.pool_replayed.launches = LearnedLaunches(
            tuple(np.quantile(lead_times, np.linspace(0, 1, 21))), 37, args.learned_failure_rate
        )
    times, replayed_steps, cpu_replay, cpu_take, sent, received = [], [], [], [], [], []
    chosen: list[str] = []
    for index, requested in enumerate(record):
        now = start + index * step_s
        shares = [rise[index] * (0.5 + index_level * 0.15) for index_level in range(len(CANDIDATE_LEVELS))]
        due = args.window_gpus if (now - 7200) % 86400 >= 86400 - 300 else 0.0  # due before 02:00
        tuner.record(now, float(requested), shares, 300.0, due)
        if tuner.due(now):
            began, cpu_began = time.perf_counter(), time.process_time()
            request = tuner.replay_request()
            ledgers = replay_levels(request)
            cpu_replayed = time.process_time()
            tuner.take(now, ledgers, request)
            times.append(time.perf_counter() - began)
            cpu_replay.append(cpu_replayed - cpu_began)
            cpu_take.append(time.process_time() - cpu_replayed)
            replayed_steps.append(len(request.requested))
            sent.append(len(pickle.dumps(request)))
            received.append(len(pickle.dumps(ledgers)))
            chosen.append(tuner.chosen)
    print(
        f"record: {len(record)} steps of {step_s:g} s ({args.days:g} days), {len(CANDIDATE_LEVELS)} levels "
        f"and {len(tuner.buffers())} buffers ({'with and without' if args.window_gpus else 'no'} windows); "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    rows = zip(times, replayed_steps, cpu_replay, cpu_take, sent, received, chosen, strict=True)
    for number, (seconds, steps, replay_cpu, take_cpu, to_worker, from_worker, text) in enumerate(rows, start=1):
        print(
            f"choice {number}: replayed {steps} steps per level, replay + choice {seconds:.3f} s wall, "
            f"CPU {replay_cpu + take_cpu:.3f} s (replay {replay_cpu:.3f}, take {take_cpu:.3f}), "
            f"pickled {to_worker / 1e6:.2f} MB to the worker, {from_worker / 1e6:.2f} MB back; chose {text}"
        )
    steady = slice(1, None) if len(times) > 1 else slice(None)
    cpu = np.add(cpu_replay, cpu_take)[steady]
    print(f"per choice after the first: mean {np.mean(times[steady]):.3f} s, max {np.max(times[steady]):.3f} s wall")
    print(f"CPU per choice after the first: mean {np.mean(cpu):.3f} s, max {np.max(cpu):.3f} s")
    print(
        f"pickled per choice after the first: {np.mean(sent[steady]) / 1e6:.2f} MB to the worker, "
        f"{np.mean(received[steady]) / 1e6:.2f} MB back"
    )
    print(f"resident between choices: {resident_bytes(tuner) / 1e6:.2f} MB (tracemalloc, the tuner unpickled)")
    print(
        "goal (issue 36): at most 5 MB resident and 0.3 s of CPU per choice; before the compact ledgers and "
        "the fluid replay loop (40b3a4f, --days 9, 2 cores, docs/service-levels.md): 40.7 MB resident, "
        "0.59-0.60 s of CPU per choice, 4.87 MB pickled back"
    )
    print(f"last choice: {describe(tuner.chosen)} ({tuner.reason})")


def resident_bytes(tuner: LevelTuner) -> int:
    """What a copy of ``tuner`` (its record, the candidates' ledgers and its few scalars) allocates."""
    return unpickled_bytes(pickle.dumps(tuner))


if __name__ == "__main__":
    main()
