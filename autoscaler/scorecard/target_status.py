"""A headroom's service-level target, observed: computed here once for the API, the page and ``/metrics``.

For each (pool, headroom metric with a target): the target; what the pool's live scorecard attained over
the tune window and over the last 1 h, 6 h and 24 h; what the chosen candidate attained in the replay
(``targets.target_levels``, carried by the served value's provenance, :class:`TargetChoice`); the error
budget remaining; and the candidate chosen, when and why (docs/scorecard.md, docs/service-levels.md).

The error budget is the share of what the target allows over the tune window that is still unspent,
``1 - attained / target``: for ``minutes_short_fraction`` the minutes short allowed, for
``short_gpu_minutes_per_day`` the short GPU-minutes allowed. It is negative once overspent. A window
start delay p95 is a percentile, not an amount spent: that target has no budget (None).

Minutes whose GPUs short are unknown (NaN: no Pending-pod watch) are not scored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from autoscaler.scorecard.figures import MinuteLedger, ServiceTarget, make_target, short_figures, wait_figures
from autoscaler.scorecard.pools import PoolScorecard
from autoscaler.serving.provenance import TargetChoice
from autoscaler.serving.provider import Snapshot

TUNE_WINDOW = "tune"
# The windows the live attainment is shown over besides the tune window (SRE burn-rate windows).
WINDOWS_S: Mapping[str, float] = {"1h": 3600.0, "6h": 6 * 3600.0, "24h": 86400.0}
BUDGET_KINDS = ("minutes_short_fraction", "short_gpu_minutes_per_day")


@dataclass(frozen=True)
class TargetStatus:
    choice: TargetChoice
    target: ServiceTarget
    live: Mapping[str, float | None]  # TUNE_WINDOW and each of WINDOWS_S -> attained (None: nothing scored)
    budget_remaining: float | None  # over the tune window; None without a budget or a scored minute


def attained(
    target: ServiceTarget, ledger: MinuteLedger, window_delays: np.ndarray, start_s: float, end_s: float
) -> float | None:
    """What a pool attained over ``[start_s, end_s)`` (None: nothing to judge), from its minutes and its
    window start delays (``(run at, seconds)`` rows); a minute whose GPUs short are unknown is not scored."""
    minutes = ledger.between(start_s, end_s)
    minutes = minutes.only(np.isfinite(minutes.short_gpu_seconds))
    delays = window_delays[(window_delays[:, 0] >= start_s) & (window_delays[:, 0] < end_s), 1]
    return target.attained(short_figures(minutes), wait_figures(delays))


def budget_remaining(target: ServiceTarget, spent: float | None) -> float | None:
    """``1 - spent / target``: the share of the allowed figure still unspent (module docstring)."""
    if spent is None or target.kind not in BUDGET_KINDS or target.value <= 0:
        return None
    return 1.0 - spent / target.value


def target_status(choice: TargetChoice, card: PoolScorecard | None, now_s: float) -> TargetStatus:
    target = make_target(choice.kind, choice.value)
    windows = {TUNE_WINDOW: choice.window_s, **WINDOWS_S}
    live: dict[str, float | None] = dict.fromkeys(windows)
    if card is not None:
        ledger, delays = card.ledger(), np.array(card.window_delays, dtype=np.float64).reshape(-1, 2)
        live = {name: attained(target, ledger, delays, now_s - seconds, now_s) for name, seconds in windows.items()}
    return TargetStatus(choice, target, live, budget_remaining(target, live[TUNE_WINDOW]))


def target_choices(snapshot: Snapshot) -> dict[tuple[str, str], TargetChoice]:
    """(pool, metric) -> the choice served, from the snapshot's provenance (the first series of a pool)."""
    choices: dict[tuple[str, str], TargetChoice] = {}
    for metric, series in sorted(snapshot.series.items()):
        for served in series:
            choice = served.provenance.target if served.provenance is not None else None
            if choice is not None:
                choices.setdefault((choice.pool, metric), choice)
    return choices


def statuses(
    snapshot: Snapshot, cards: Mapping[str, PoolScorecard], now_s: float
) -> dict[tuple[str, str], TargetStatus]:
    """Every (pool, metric) with a target in the snapshot, judged on the pool's live scorecard."""
    return {
        (pool, metric): target_status(choice, cards.get(pool), now_s)
        for (pool, metric), choice in target_choices(snapshot).items()
    }
