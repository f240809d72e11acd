"""Where a forecast worker's memory goes per series it holds (issue #37: lean replicas).

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_memory [--series 300] [--days 3]

Runs what a forecast worker runs (``autoscaler.refresh.fitting.work_in_worker``) in this process,
on ``--series`` series of Helios Earth per-VC running GPUs (5-minute means, ``--days`` long; as
``benchmarks/bench_failover.py`` backfills them): a full selection of each, then one refresh that
forecasts from the held models (what every refresh between selections does), with the service's
defaults (lead time 5 minutes: one step; quantile 0.9). Prints this process's resident size
(VmRSS, peak VmHWM) before and after, per series, and which models the selections hold.

Then the held models are pickled and unpickled under ``tracemalloc`` (what Python and NumPy
allocate for them, not the allocator's slack), forecast from once more (what a further refresh
adds), and taken apart, part by part over every held model, each part's freed bytes printed per
series: the calibration ledgers (the backtest arrays selection scored), the forecast caches, the
history and the arrays as long as it, the fitted trees, and the rest (parameters, conformal
offsets, scores and notes).
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import re
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from autoscaler.refresh import fitting
from autoscaler.serving.provenance import WorkKind
from forecast import trees
from forecast.base import CalibratedModel
from tests.service_replicas import real_series

SCOPE = "bench"
MB = 1024 * 1024


def resident_mb() -> tuple[float, float]:
    """This process's VmRSS and VmHWM (peak), in MiB."""
    status = Path("/proc/self/status").read_text()
    found = [re.search(rf"^{name}:\s+(\d+) kB", status, re.M) for name in ("VmRSS", "VmHWM")]
    rss, hwm = (int(match.group(1)) / 1024 if match else 0.0 for match in found)
    return rss, hwm


def request(index: int, series: Any, work: WorkKind) -> fitting.WorkRequest:
    key: fitting.SeriesKey = ("gpus", (("pool", f"pool-{index}"),))
    return fitting.WorkRequest(scope=SCOPE, key=key, series=series, lead_steps=1, quantiles=(0.9,), work=work)


def members(held: Iterable[fitting.HeldModels]) -> list[CalibratedModel]:
    return [member for models in held for member in models.selection.members]


def drop(models: list[CalibratedModel], names: tuple[str, ...]) -> None:
    for model in models:
        for name in names:
            if hasattr(model, name):
                setattr(model, name, None)


def freed(action: Callable[[], None]) -> int:
    """Bytes ``tracemalloc`` sees freed by ``action``."""
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    action()
    gc.collect()
    return before - tracemalloc.get_traced_memory()[0]


def breakdown(series: list[Any]) -> list[tuple[str, int]]:
    """Each part's bytes over every held model, by taking the parts away in order."""
    pickled = pickle.dumps(dict(fitting._HELD))
    tracemalloc.start()
    try:
        loaded = tracemalloc.get_traced_memory()[0]
        held: dict[Any, fitting.HeldModels] = pickle.loads(pickled)  # noqa: S301 (pickled just above)
        loaded = tracemalloc.get_traced_memory()[0] - loaded
        before_caches = tracemalloc.get_traced_memory()[0]
        for models, values in zip(held.values(), series, strict=True):
            models.selection.forecast(values, 2, (0.9,))
        caches = tracemalloc.get_traced_memory()[0] - before_caches
        fitted = members(held.values())

        def drop_caches() -> None:
            drop(fitted, ("recent_",))
            trees._flat.clear()

        def drop_the_rest() -> None:
            fitted.clear()
            held.clear()

        parts = [
            ("held after a selection and a refresh", loaded),
            ("grown by one more refresh", caches),
            ("calibration ledgers", freed(lambda: drop(fitted, ("actual_", "mean_paths_", "raw_paths_", "origins_")))),
            ("forecast caches", freed(drop_caches)),
            ("history and history-length arrays", freed(lambda: drop(fitted, HISTORY_PARTS))),
            ("fitted trees (gbm)", freed(lambda: drop(fitted, ("models_",)))),
        ]
        rest = freed(drop_the_rest)
        parts.append(("parameters, offsets, scores, notes", rest))
        return parts
    finally:
        tracemalloc.stop()


# The fitted history, and the arrays as long as it that models keep to forecast from the next one.
HISTORY_PARTS = ("history_", "features_", "states_", "filter_cache_")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--series", type=int, default=300)
    parser.add_argument("--days", type=int, default=3)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"{args.series} series, {args.days} days of 5-minute history; {os.cpu_count()} cores, load {load:.1f}")
    series = [raw.fillna(0) + 1 for raw in real_series(args.series, args.days)]  # as backfilled
    fitting.work_in_worker(request(-1, series[0], "select"))  # imports and first-call caches
    fitting._HELD.clear()
    rss_before, hwm_before = resident_mb()
    started = time.perf_counter()
    for index, values in enumerate(series):
        fitting.work_in_worker(request(index, values, "select"))
    selected_s = time.perf_counter() - started
    rss_selected, hwm_selected = resident_mb()
    for index, values in enumerate(series):
        fitting.work_in_worker(request(index, values, "update"))
    rss_after, hwm_after = resident_mb()
    count = len(series)
    print(f"selection of {count} series: {selected_s:.0f} s; models held: {held_models()}")
    print(f"resident before: {rss_before:.0f} MiB (peak {hwm_before:.0f})")
    print(
        f"after the selection: {rss_selected:.0f} MiB (peak {hwm_selected:.0f}); after a refresh from held models: "
        f"{rss_after:.0f} MiB (peak {hwm_after:.0f}); {(rss_after - rss_before) * 1024 / count:.1f} KiB resident "
        f"and {(hwm_after - rss_before) * 1024 / count:.1f} KiB peak per series"
    )
    print("held models by tracemalloc, per series:")
    for label, size in breakdown(series):
        print(f"  {label:<40} {size / count / 1024:8.1f} KiB")


def held_models() -> str:
    counts = Counter(type(member).name for member in members(fitting._HELD.values()))
    return ", ".join(f"{name} {count}" for name, count in counts.most_common())


if __name__ == "__main__":
    main()
