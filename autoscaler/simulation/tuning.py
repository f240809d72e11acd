"""The simulator's tuned policies: the candidates each one chooses among (the choosing itself is the
service's, :mod:`autoscaler.service_levels`).

``static_buffer@1%`` is how an operator tunes a heuristic on the past and runs it on the future: each
day, the smallest buffer that would have kept minutes short under 1 % over the previous 7 days.
``auto-slo:1%`` chooses among the service's own quantile forecasts the same way, and calibrates
online. Heuristics are not among its candidates: measured on the Alibaba pod list, choosing among
every family at once chose a different candidate almost every day, attained less and cost more than
choosing among quantile levels alone (docs/service-levels.md).
"""

from __future__ import annotations

import math

from autoscaler.service_levels import DAY_S, Choice, TuningSettings, stitched_metric, walk_forward
from autoscaler.target_levels import CANDIDATE_LEVELS

__all__ = [
    "DAY_S",
    "Choice",
    "TuningSettings",
    "candidate_texts",
    "static_buffer_grid",
    "stitched_metric",
    "walk_forward",
]


# auto-slo's own candidates: its quantile forecasts at the levels a live target chooses among (one
# selection serves them all).
AUTO_SLO_QUANTILES = CANDIDATE_LEVELS
# Rolling-max windows an operator would try, in minutes.
ROLLING_MAX_WINDOWS_MIN = (5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 360, 480, 720)
# Static buffers up to this share of the largest demand (plus a node): past it a buffer costs more
# than any target on these traces needs.
STATIC_BUFFER_SHARE = 0.3


def static_buffer_grid(largest_demand: float, gpus_per_node: int) -> list[int]:
    """Buffers an operator would try: every GPU up to 16, then steps of 2, 4 and 8 GPUs up to 128,
    then a quarter more each time (rounded to 8), up to the ceiling."""
    ceiling = max(16, math.ceil(STATIC_BUFFER_SHARE * largest_demand) + gpus_per_node)
    grid = list(range(0, 17)) + list(range(18, 33, 2)) + list(range(36, 65, 4)) + list(range(72, 129, 8))
    while grid[-1] < ceiling:
        grid.append(8 * math.ceil(grid[-1] * 1.25 / 8))
    return [gpus for gpus in grid if gpus <= ceiling]


def candidate_texts(name: str, largest_demand: float, gpus_per_node: int) -> list[str]:
    """The policies a tuned policy chooses among, by policy text, in the order ties are broken."""
    statics = [f"static_buffer:{gpus}" for gpus in static_buffer_grid(largest_demand, gpus_per_node)]
    rolling = [f"reactive_max:{minutes}m" for minutes in ROLLING_MAX_WINDOWS_MIN]
    if name == "static_buffer":
        return statics
    if name == "reactive_max":
        return rolling
    if name == "auto-slo":
        return [f"auto:{quantile:g}" for quantile in AUTO_SLO_QUANTILES]
    raise ValueError(f"policy {name!r} is not tuned to a target")
