"""Sweeps of the operators' heuristics over their settings: ``static_buffer:N`` for N = 0, 1, 2, ...
and ``reactive_max:W`` for W = 5m, 10m, 15m, ..., each up to the first setting that provisions more
GPU-hours than the costliest ``auto:Q``.

Whether a forecast beats a heuristic depends on every setting an operator could have chosen, not only
the ones given. This module says which settings a sweep tries and when it stops; the runner runs them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from autoscaler.simulation.engine import Outcome

# Rolling-max windows are swept in the service's default forecast step: an operator sets a window
# in minutes, and windows a few minutes apart give nearly the same run.
ROLLING_MAX_STEP_S = 300

# Runs the given policies (by text) and returns each one's outcome.
RunBatch = Callable[[Sequence[str]], dict[str, Outcome]]


def static_buffer_settings(provisioned_limit: float, scored_s: float, gpus_per_node: int) -> list[str]:
    """``static_buffer:0, 1, 2, ...`` up to a buffer no sweep needs to pass.

    A buffer of N holds at least about N GPUs through the scored period, so N never needs to pass
    ``provisioned_limit / scored seconds`` plus a node: the sweep ends even if a buffer's GPU-hours
    were not to grow with N.
    """
    ceiling = math.ceil(provisioned_limit / scored_s) + gpus_per_node
    return [f"static_buffer:{gpus}" for gpus in range(ceiling + 1)]


def rolling_max_settings(trace_s: float) -> list[str]:
    """``reactive_max:5m, 10m, 15m, ...`` up to the first window that covers the whole trace.

    Such a window serves, at every step, the running maximum since the trace's first step, and so
    does every longer window: past it a sweep would only repeat the same run. The headroom served
    grows with the window, so in practice the sweep ends far sooner, at the first window whose
    GPU-hours pass the costliest ``auto``.
    """
    windows = max(1, math.ceil(trace_s / ROLLING_MAX_STEP_S))
    return [f"reactive_max:{window * ROLLING_MAX_STEP_S // 60}m" for window in range(1, windows + 1)]


def sweep_until_past(
    settings: Sequence[str], run_batch: RunBatch, provisioned_limit: float, batch_size: int
) -> dict[str, Outcome]:
    """Run ``settings`` in order, ``batch_size`` at a time, until a batch holds one that provisions
    more than ``provisioned_limit`` GPU-seconds: the outcomes in order, up to and including the first
    such setting (all of them if none is)."""
    outcomes: dict[str, Outcome] = {}
    for start in range(0, len(settings), batch_size):
        batch = settings[start : start + batch_size]
        outcomes.update(run_batch(batch))
        if any(outcomes[text].totals.provisioned > provisioned_limit for text in batch):
            break
    ran = [text for text in settings if text in outcomes]
    past = [index for index, text in enumerate(ran) if outcomes[text].totals.provisioned > provisioned_limit]
    last = past[0] if past else len(ran) - 1
    return {text: outcomes[text] for text in ran[: last + 1]}
