"""How far a tuned policy's run is from its stitched view: each day, the chosen candidate's own
ledger (what the walk-forward choice judged) against the tuned run's ledger (the stitched metric run
through the cluster again, transitions and all).

    PYTHONPATH=. .venv/bin/python -m benchmarks.slo_stitching --out /tmp/slo-stitching [--trace helios] [--target 1%]
        [--policies auto-slo:T,static_buffer@T]

Runs ``simulate`` as ``benchmarks/slo_attainment.py`` does, for ``static_buffer@T`` and
``scheduled_buffer@T`` (or ``--policies``), recording the tuned runs and the candidates' runs as the runner returns
them (nothing is replaced). Prints, per policy and day, the held GPU-hours and minutes short of the
run and of the candidate, where in the day (hour from the decision) the held GPU-hours differ most,
and the totals. A difference confined to the first hour is the switch between candidates; one spread
over the day is the cluster's state (nodes, placeholders) having taken another path.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path
from typing import Any

import numpy as np

import autoscaler.simulation.runner as runner
from autoscaler.scorecard.figures import MinuteLedger
from benchmarks.slo_attainment import simulate_arguments


def _day(ledger: MinuteLedger, start_s: float, end_s: float) -> tuple[np.ndarray, int]:
    inside = (ledger.starts >= start_s) & (ledger.starts < end_s)
    return ledger.held_gpu_seconds[inside], int((ledger.short_gpu_seconds[inside] > 1e-6).sum())


def record_runs(
    name: str, target: str, out: Path, policies: str = "static_buffer@T,scheduled_buffer@T"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tuned runs and every run the batches made, from one ``simulate``."""
    tuned: dict[str, Any] = {}
    batched: dict[str, Any] = {}
    run_tuned, call_batches = runner._run_tuned, runner._SweepBatches.__call__

    def recording_tuned(*args: Any) -> Any:
        tuned.update(run_tuned(*args))
        return tuned

    def recording_batches(self: Any, texts: Any) -> Any:
        outcomes = call_batches(self, texts)
        batched.update(outcomes)
        return outcomes

    runner._run_tuned = recording_tuned  # type: ignore[assignment]  # recorded, then handed back
    runner._SweepBatches.__call__ = recording_batches  # type: ignore[method-assign]
    from autoscaler.commands.cli import main

    tuned_policies = ",".join(text.replace("T", target) for text in policies.split(","))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            main.main(args=simulate_arguments(name, out, tuned_policies), standalone_mode=False)
    finally:
        runner._run_tuned, runner._SweepBatches.__call__ = run_tuned, call_batches  # type: ignore[method-assign]
    return tuned, batched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--trace", default="helios")
    parser.add_argument("--target", default="1%")
    parser.add_argument("--policies", default="static_buffer@T,scheduled_buffer@T", help="tuned policies, T the target")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tuned, batched = record_runs(args.trace, args.target, args.out, args.policies)
    for text, run in tuned.items():
        print(f"{text}: day, candidate, held GPU-h run / candidate, minutes short run / candidate, hours most apart")
        total_run = total_candidate = 0.0
        for choice in run.choices:
            held_run, short_run = _day(run.outcome.ledger, choice.start_s, choice.end_s)
            held_candidate, short_candidate = _day(batched[choice.candidate].ledger, choice.start_s, choice.end_s)
            apart = held_run - held_candidate
            hourly = np.add.reduceat(apart, np.arange(0, len(apart), 60)) / 3600 if len(apart) else np.zeros(0)
            worst = np.argsort(-np.abs(hourly))[:3]
            total_run, total_candidate = (
                total_run + held_run.sum() / 3600,
                total_candidate + held_candidate.sum() / 3600,
            )
            print(
                f"  {choice.start_s / 86400:4.0f} {choice.candidate:22s} {held_run.sum() / 3600:9.1f} / "
                f"{held_candidate.sum() / 3600:9.1f} {short_run:4d} / {short_candidate:4d}  "
                + ", ".join(f"h{hour}: {hourly[hour]:+.1f}" for hour in worst if abs(hourly[hour]) >= 0.05)
            )
        apart_total = total_run - total_candidate
        print(f"  total held GPU-h: run {total_run:,.1f}, candidates {total_candidate:,.1f}, apart {apart_total:+,.1f}")


if __name__ == "__main__":
    main()
