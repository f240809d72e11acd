"""The simulator's tuned policies: the candidates each one chooses among (the choosing itself is the
service's, :mod:`autoscaler.targets.service_levels`).

``static_buffer@1%`` is how an operator tunes a heuristic on the past and runs it on the future: each
day, the smallest buffer that would have kept minutes short under 1 % over the previous 7 days
(``scheduled_buffer@1%`` the same with a cron scaler holding declared windows' GPUs over the lead
time). ``auto-slo:1%`` chooses the same way among the candidates the service replays for a target:
its own quantile forecasts and the same buffers, each with the declared windows, and where windows
are declared the same buffers without them (``static_buffer@1%``'s): a forecast is served only when
it was clearly cheaper than every buffer that met (``TuningSettings.forecast_margin``). Rolling
maxima are not among them: measured on the Alibaba pod list, choosing among every family at once
chose a different candidate almost every day, attained less and cost more (docs/service-levels.md).
"""

from __future__ import annotations

from typing import TypedDict

from autoscaler.simulation.actuation import Actuation
from autoscaler.targets.candidates import CANDIDATE_LEVELS
from autoscaler.targets.service_levels import Buffer, Choice, DeadBand, buffer_grid, stitched_metric, walk_forward
from autoscaler.targets.tuning import DAY_S, TuningSettings

__all__ = [
    "DAY_S",
    "Choice",
    "ChoiceRules",
    "TuningSettings",
    "buffer_grid",
    "candidate_texts",
    "choice_rules",
    "stitched_metric",
    "walk_forward",
]


# auto-slo's own candidates: its quantile forecasts at the levels a live target chooses among (one
# selection serves them all).
AUTO_SLO_QUANTILES = CANDIDATE_LEVELS
# Rolling-max windows an operator would try, in minutes.
ROLLING_MAX_WINDOWS_MIN = (5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 360, 480, 720)


def candidate_texts(name: str, largest_demand: float, gpus_per_node: int, windows: bool = False) -> list[str]:
    """The policies a tuned policy chooses among, by policy text, in the order ties are broken;
    ``windows``: the workload declares windows (else a static buffer is a scheduled one)."""
    buffers = buffer_grid(largest_demand, gpus_per_node)
    if name in ("static_buffer", "scheduled_buffer"):
        return [f"{name}:{gpus}" for gpus in buffers]
    if name == "reactive_max":
        return [f"reactive_max:{minutes}m" for minutes in ROLLING_MAX_WINDOWS_MIN]
    if name == "auto-slo":
        levels = [f"auto:{quantile:g}" for quantile in AUTO_SLO_QUANTILES]
        plain = [f"static_buffer:{gpus}" for gpus in buffers] if windows else []
        return levels + [f"scheduled_buffer:{gpus}" for gpus in buffers] + plain
    raise ValueError(f"policy {name!r} is not tuned to a target")


class ChoiceRules(TypedDict, total=False):
    """What ``walk_forward`` takes besides the ledgers (its keyword arguments of the same names)."""

    forecasts: list[str]
    buffers: dict[str, Buffer]
    band: DeadBand | None


def choice_rules(name: str, texts: list[str], windows: bool, actuation: Actuation) -> ChoiceRules:
    """What ``walk_forward`` knows besides the ledgers, per tuned policy. auto-slo, as the service: its
    forecasts are held to the forecast margin, and under the placeholder HPA a constant buffer the
    HPA would not move to is not chosen. The operator's tuned heuristics choose on their ledgers
    alone, as an operator tuning a buffer does."""
    if name != "auto-slo":
        return {}
    buffers: dict[str, Buffer] = {}
    for text in texts:
        family, _, gpus = text.partition(":")
        if family in ("static_buffer", "scheduled_buffer"):
            # A scheduled buffer adds the declared windows' GPUs before each: without windows it is constant.
            buffers[text] = Buffer(int(gpus), constant=family == "static_buffer" or not windows)
    return {
        "forecasts": [text for text in texts if text.startswith("auto:")],
        "buffers": buffers,
        "band": None if actuation.buffer else actuation.hpa.tolerance,  # a CapacityBuffer has no HPA
    }
