"""Forecast engine benchmark: fit + selection seconds per series, and RSS for many series.

    .venv/bin/python benchmarks/bench_forecast.py [--series 200] [--workers 0]

Series are 14-day windows of 5-minute history cut from the real public traces (tests/data_helpers.py),
sliding by 6 hours so that every series differs. Goal: <= 2 s per series on 2 cores, < 400 MB RSS for
200 series. ``--workers N`` runs the series in a process pool like the service does.
"""

from __future__ import annotations

import argparse
import importlib.util
import resource
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forecast.engine import EngineResult, fit_select_predict
from tests import data_helpers, traces  # importable once the path above is set

STEPS_14D = 14 * 288
SLIDE = 72  # 6 h


def _series(count: int) -> list[tuple[str, pd.Series]]:
    traces = {name: data_helpers.trace(name) for name in data_helpers.TRACES}
    out: list[tuple[str, pd.Series]] = []
    offset = 0
    while len(out) < count:
        for name, trace in traces.items():
            end = len(trace) - offset * SLIDE
            if end - STEPS_14D >= 0 and len(out) < count:
                out.append((name, trace.iloc[end - STEPS_14D : end]))
        offset += 1
    return out


def _run(series: pd.Series) -> EngineResult:
    return fit_select_predict(series, horizon_steps=12, quantiles=(0.5, 0.9), policy_quantile=0.9, lead_steps=12)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument("--workers", type=int, default=0, help="0 = run in this process")
    args = parser.parse_args()
    if absent := traces.missing():
        sys.exit(traces.missing_message(absent))
    inputs = _series(args.series)
    print(f"{len(inputs)} series of {STEPS_14D} points (14 days at 5 min), horizon 12 steps, q=0.9")
    print(f"RSS after loading traces: {_rss_mb():.0f} MB")

    started = time.perf_counter()
    results: list[EngineResult] = []
    if args.workers:
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            results = list(pool.map(_run, [series for _, series in inputs]))
    else:
        results = [_run(series) for _, series in inputs]
    wall = time.perf_counter() - started

    per_trace: dict[str, list[float]] = {}
    chosen: dict[str, int] = {}
    for (name, _), result in zip(inputs, results, strict=True):
        per_trace.setdefault(name, []).append(result.fit_seconds)
        chosen[result.model] = chosen.get(result.model, 0) + 1
    print("fit + selection seconds per series (median / p95 / max):")
    for name, seconds in per_trace.items():
        ordered = sorted(seconds)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        print(f"  {name:32s} {statistics.median(seconds):6.2f} / {p95:6.2f} / {max(seconds):6.2f}  (n={len(seconds)})")
    every = [result.fit_seconds for result in results]
    print(f"  {'all':32s} {statistics.median(every):6.2f}   mean {statistics.mean(every):.2f}")
    print(f"wall time {wall:.1f} s for {len(results)} series ({args.workers or 1} process(es))")
    print(f"peak RSS of this process with {len(results)} results held: {_rss_mb():.0f} MB")
    if args.workers:
        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"peak RSS of the largest worker: {children:.0f} MB")
    print(f"models chosen: {dict(sorted(chosen.items()))}")
    if importlib.util.find_spec("statsforecast") is None:
        print("statsforecast is not installed: peer comparison skipped")
    else:
        _compare_statsforecast([series for _, series in inputs[:10]])


def _compare_statsforecast(inputs: list[pd.Series]) -> None:
    """Time statsforecast's AutoETS with a daily season on the same windows, when it is installed."""
    from statsforecast import StatsForecast
    from statsforecast.models import AutoETS

    frames = [
        pd.DataFrame({"unique_id": str(i), "ds": pd.DatetimeIndex(s.index).tz_localize(None), "y": s.to_numpy()})
        for i, s in enumerate(inputs)
    ]
    # The first call compiles statsforecast's numba code: time it apart from the steady cost.
    started = time.perf_counter()
    StatsForecast(models=[AutoETS(season_length=288)], freq="5min").forecast(df=frames[0], h=12)
    compile_s = time.perf_counter() - started
    started = time.perf_counter()
    StatsForecast(models=[AutoETS(season_length=288)], freq="5min").forecast(df=pd.concat(frames[1:]), h=12)
    per_series = (time.perf_counter() - started) / (len(frames) - 1)
    print(
        f"statsforecast AutoETS(288), one model, no selection: {per_series:.2f} s per series "
        f"(after a first call of {compile_s:.1f} s that compiles it)"
    )


if __name__ == "__main__":
    main()
