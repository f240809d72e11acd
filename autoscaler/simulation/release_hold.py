"""The release hold (issue #18, item 1): scale up for the forecast, release only down to a hold.

``auto:Q`` serves, per step, the peak of its Q-quantile forecast over the lead time. With the hold it
serves at least the most demand observed over the last H minutes: the forecast sets how fast the
policy scales up, the hold how slowly it releases. H is chosen per series from :data:`HOLD_GRID_S`
(0 is the policy without a hold) at every reselection, by replaying the policy's own served targets
over the lookback before that moment with each H and keeping the one with the least
``idle + k * short`` GPU-minutes, ``k = Q / (1 - Q)`` (the newsvendor ratio a Q-quantile stands for);
short and idle are measured against the demand observed a lead time after each step, as the
simulator scores. Only steps whose demand a lead time ahead is already observed count: no
look-ahead. Ties go to the shorter hold; with nothing served yet (the first period) H is 0.

The hold reads what the forecasters read: the highest demand in each complete forecast bin, so the
hold at a step is the largest of the bins in the last H minutes up to the last complete one (with
H = 0, that bin alone: the demand the headroom is computed against, so nothing changes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

HOLD_GRID_S: tuple[float, ...] = tuple(minutes * 60.0 for minutes in (0, 15, 30, 45, 60, 90, 120))


def cost_ratio(quantile: float) -> float:
    """What a short GPU-minute costs in idle GPU-minutes, for a policy that serves the Q-quantile."""
    return quantile / (1.0 - quantile)


@dataclass(frozen=True)
class HoldPlan:
    """Where the hold reads its bins and when it chooses H (the forecasting cadence's figures)."""

    bin_step_s: float  # the forecasters' step
    lead_s: float  # the lead time the policy plans for
    lookback_s: float  # how far back each choice replays
    reselect_every_s: float  # H is chosen again at each reselection
    grid_s: tuple[float, ...] = HOLD_GRID_S


@dataclass(frozen=True)
class HeldPolicy:
    values: np.ndarray  # the served headroom with the hold
    chosen_s: tuple[float, ...]  # H chosen for each reselection period, in order


def bin_holds(observed: np.ndarray, step_s: float, plan: HoldPlan) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per simulation step: the last complete bin's demand (``base``) and the hold for each H of the
    grid (the most demand in the complete bins of the last H minutes); 0 before the first bin ends."""
    ratio = round(plan.bin_step_s / step_s)
    count = len(observed) // ratio
    peaks = observed[: count * ratio].reshape(count, ratio).max(axis=1) if count else np.zeros(0)
    last_bin = np.arange(len(observed)) // ratio - 1  # the bin that ended last at each step's start
    known = last_bin >= 0
    holds = []
    for hold_s in plan.grid_s:
        window = round(hold_s / plan.bin_step_s) + 1
        rolled = pd.Series(peaks).rolling(window, min_periods=1).max().to_numpy(dtype=np.float64)
        held = np.zeros(len(observed))
        held[known] = rolled[last_bin[known]]
        holds.append(held)
    base = np.zeros(len(observed))
    base[known] = peaks[last_bin[known]]
    return base, holds


def choose_hold(targets: np.ndarray, demand_ahead: np.ndarray, holds: Sequence[np.ndarray], ratio: float) -> int:
    """The index of the hold with the least ``idle + ratio * short`` when serving ``max(target, hold)``
    against ``demand_ahead`` (all over the same steps); the first of equals."""
    costs = []
    for held in holds:
        served = np.maximum(targets, held)
        idle = np.maximum(served - demand_ahead, 0.0).sum()
        short = np.maximum(demand_ahead - served, 0.0).sum()
        costs.append(float(idle + ratio * short))
    return int(np.argmin(costs))


def apply_release_hold(
    headroom: np.ndarray, observed: np.ndarray, step_s: float, plan: HoldPlan, first_step: int, quantile: float
) -> HeldPolicy:
    """``headroom`` (what ``auto:Q`` served, per step from ``first_step``) with the hold, H chosen at
    each reselection from the served targets before it."""
    base, holds = bin_holds(observed, step_s, plan)
    targets = headroom + base
    lead_steps = max(1, round(plan.lead_s / step_s))
    lookback_steps = round(plan.lookback_s / step_s)
    block_steps = max(1, round(plan.reselect_every_s / step_s))
    ratio = cost_ratio(quantile)
    values = headroom.copy()
    chosen = []
    for start in range(first_step, len(headroom), block_steps):
        stop = min(start + block_steps, len(headroom))
        # Steps served before ``start`` whose demand a lead time later was observed by then.
        replay = slice(max(first_step, start - lookback_steps), max(first_step, start - lead_steps))
        pick = 0
        if replay.stop > replay.start:
            ahead = observed[replay.start + lead_steps : replay.stop + lead_steps]
            pick = choose_hold(targets[replay], ahead, [held[replay] for held in holds], ratio)
        chosen.append(plan.grid_s[pick])
        values[start:stop] = np.maximum(headroom[start:stop], holds[pick][start:stop] - base[start:stop])
    return HeldPolicy(values, tuple(chosen))
