"""What a takeover's refit costs against a full selection, per series (docs/high-availability.md).

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_refit [--series 6] [--days 3]

Helios Earth per-VC running GPUs (the series ``bench_failover`` backfills, 5-minute steps), each
one selected (``fit_select_predict``, every candidate) and then refitted with the model it selected
(``candidates=(model,)``, as a new shard owner does with the model its object names). Prints the
model, both wall times and the size of the fitted selection, and of the slimmed selection a worker
holds per series (``Selection.slimmed``), pickled and allocated when unpickled (by ``tracemalloc``);
one process, one core.
"""

from __future__ import annotations

import argparse
import pickle
import time

from benchmarks.unpickled import unpickled_bytes
from forecast.engine import fit_select_predict
from tests.service_replicas import real_series


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--series", type=int, default=6)
    parser.add_argument("--days", type=int, default=3)
    args = parser.parse_args()
    for raw in real_series(args.series, args.days):
        series = raw.fillna(0) + 1  # as backfilled: no gap, no 0
        started = time.perf_counter()
        selected = fit_select_predict(series, horizon_steps=2, quantiles=(0.9,), policy_quantile=0.9, lead_steps=1)
        select_s = time.perf_counter() - started
        started = time.perf_counter()
        fit_select_predict(
            series, horizon_steps=2, quantiles=(0.9,), policy_quantile=0.9, lead_steps=1, candidates=(selected.model,)
        )
        refit_s = time.perf_counter() - started
        assert selected.selection is not None  # fit_select_predict always sets it
        pickled = pickle.dumps(selected.selection)
        held = pickle.dumps(selected.selection.slimmed((0.9,)))
        print(
            f"{selected.model}: select {select_s:.2f} s, refit {refit_s:.2f} s; fitted selection "
            f"{len(pickled) / 1e6:.2f} MB pickled, {unpickled_bytes(pickled) / 1e6:.2f} MB unpickled; "
            f"slimmed as a worker holds it {len(held) / 1e6:.3f} MB pickled, {unpickled_bytes(held) / 1e6:.3f} MB "
            "unpickled"
        )


if __name__ == "__main__":
    main()
