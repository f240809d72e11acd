"""Selection hysteresis: keep the incumbent model unless a challenger wins by a margin.

Two days of overlapping calibration origins rank close models by noise; re-selecting on every fit
can then flip between them (and their forecasts) from one selection to the next. With an
incumbent (the previous selection) and a ``switch_margin``, the challenger (what selection ranks
first) replaces the incumbent only when its calibration pinball is lower by more than the margin,
relative to the incumbent's. An incumbent that is an ensemble is scored as the average of its
members when every member scored; an incumbent that did not score is replaced.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from forecast.base import Holdout
from forecast.ensemble import combine_holdouts, ensemble_members


@dataclass(frozen=True)
class Incumbent:
    """The previous selection at one policy quantile, and the relative margin a challenger needs."""

    model: str
    switch_margin: float


def keep_incumbent(
    ranked: list[str],
    combinations: dict[str, tuple[str, ...]],
    scores: dict[str, dict[str, float]],
    holdouts: dict[str, Holdout],
    incumbent: Incumbent,
    score: Callable[[Holdout], dict[str, float]],
    notes: list[str],
) -> list[str]:
    """``ranked`` with the incumbent first when the challenger does not beat it by the margin.

    An ensemble incumbent that is not among the ranked names is scored with ``score`` on its
    members' combined holdout and added to ``scores`` and ``combinations``.
    """
    if not ranked or incumbent.switch_margin <= 0.0 or ranked[0] == incumbent.model:
        return ranked
    name = incumbent.model
    if name not in scores:
        members = ensemble_members(name)
        if members is None or not all(member in holdouts for member in members):
            return ranked
        scores[name] = score(combine_holdouts([holdouts[member] for member in members]))
        combinations[name] = members
    challenger = ranked[0]
    held = scores[name]["pinball"]
    best = scores[challenger]["pinball"]
    if not (math.isfinite(held) and math.isfinite(best)):
        return ranked
    if best < (1.0 - incumbent.switch_margin) * held:
        notes.append(
            f"{challenger} replaced {name}: calibration pinball {best:.4g} vs {held:.4g}, "
            f"more than {incumbent.switch_margin:.0%} better"
        )
        return ranked
    notes.append(
        f"kept {name}: {challenger}'s calibration pinball {best:.4g} vs {held:.4g} is within "
        f"the {incumbent.switch_margin:.0%} switch margin"
    )
    return [name, *(other for other in ranked if other != name)]
