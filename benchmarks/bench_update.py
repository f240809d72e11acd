"""What a steady refresh costs a worker per series: an update (forecast from the held models).

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_update [--series 20] [--days 3] [--rounds 10] [--profile]

Helios Earth per-VC running GPUs (the series ``bench_failover`` backfills, 5-minute steps): each one
selected once in this process (``fitting.work_in_worker``, as a forecast worker runs it), then
updated ``--rounds`` times. Prints the models selected and the mean time of an update, and of an
update with its request and result pickled both ways (what travels to and from a worker process);
``--profile`` adds cProfile's top entries by cumulative time. One process, one core.
"""

from __future__ import annotations

import argparse
import cProfile
import pickle
import pstats
import time
from collections import Counter

from autoscaler.refresh import fitting
from autoscaler.refresh.fitting import WorkRequest
from tests.service_replicas import real_series


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--series", type=int, default=20)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    updates, models = [], Counter[str]()
    for number, raw in enumerate(real_series(args.series, args.days)):
        series = raw.fillna(0) + 1  # as backfilled: no gap, no 0
        request = WorkRequest(
            scope="bench", key=("gpus", (("pool", f"p{number}"),)), series=series, lead_steps=2, quantiles=(0.9,),
            work="select",
        )  # fmt: skip
        selected = fitting.work_in_worker(request)
        models[selected.engine.model] += 1
        updates.append(WorkRequest(**{**vars(request), "work": "update", "model": selected.engine.model}))
    print(", ".join(f"{model} x{count}" for model, count in models.most_common()))
    runs = updates * args.rounds
    for request in updates:  # warm: the first update of each series builds its feature caches
        fitting.work_in_worker(request)
    started = time.perf_counter()
    for request in runs:
        fitting.work_in_worker(request)
    print(f"update: {(time.perf_counter() - started) / len(runs) * 1000:.2f} ms per series")
    started = time.perf_counter()
    for request in runs:
        # Bytes this process just pickled, as the process pool does: nothing untrusted is loaded.
        sent = pickle.loads(pickle.dumps(request))  # noqa: S301
        pickle.loads(pickle.dumps(fitting.work_in_worker(sent)))  # noqa: S301
    print(f"update with request and result pickled: {(time.perf_counter() - started) / len(runs) * 1000:.2f} ms")
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(lambda: [fitting.work_in_worker(request) for request in runs])
        pstats.Stats(profile).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
