"""A pool's launches as its NodeClaims taught them, in the form a target's replay runs them: the lead
times learned (retries included, docs/launch-outcomes.md) as a few points of their distribution, and
the share of launches that failed.

The replay (autoscaler/simulation/replay.py) draws each node's lead time from these points and fails
a launch with this rate, as ``simulate --lead-time-distribution empirical:... --launch-failure-rate``
does. A replay judged on one cluster is not judged again on another: when what was learned moves
(:func:`alike`), the target replays its whole record once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# At most this many points of the lead times go to the worker (the record keeps 50 per pool): they
# stand at evenly spaced levels from 0 to 1, and the replay interpolates between them.
LEAD_TIME_POINTS = 21
# A launch rate this high would leave the replay's pool without nodes for hours; measured rates past
# it are replayed as it.
MOST_FAILURE_RATE = 0.9
# What was learned moves this much (median or p95 by this share, failure rate by this much) and the
# record is replayed again, on the cluster as now measured.
LEAD_TIME_MOVE = 0.1
FAILURE_RATE_MOVE = 0.05


@dataclass(frozen=True)
class LearnedLaunches:
    """What a pool's NodeClaims taught: lead-time points and the share of launches that failed."""

    lead_times_s: tuple[float, ...]  # sorted, at evenly spaced levels from 0 to 1
    samples: int  # lead times learned (one per launch that became Ready, its retries included)
    failure_rate: float  # failed launches over all that ended, within [0, MOST_FAILURE_RATE]

    def quantile(self, level: float) -> float:
        return float(np.interp(level, np.linspace(0.0, 1.0, len(self.lead_times_s)), self.lead_times_s))

    def describe(self) -> str:
        """``the pool's 37 learned launches: lead time p50 9m, p95 11m, 5 % failed``."""
        p50, p95 = (duration_text(self.quantile(level)) for level in (0.5, 0.95))
        return (
            f"the pool's {self.samples} learned launch{'es' if self.samples != 1 else ''}: "
            f"lead time p50 {p50}, p95 {p95}, {self.failure_rate * 100:.3g} % failed"
        )


def duration_text(seconds: float) -> str:
    """``9m``, ``9m30s``, ``45s``: whole seconds."""
    minutes, rest = divmod(round(seconds), 60)
    if not minutes:
        return f"{rest}s"
    return f"{minutes}m{rest}s" if rest else f"{minutes}m"


def learned_launches(lead_times_s: Sequence[float], failed: int, ready: int) -> LearnedLaunches | None:
    """A pool's launches from its lead-time samples and its counts of failed and Ready launches; None
    when no lead time was learned."""
    if not lead_times_s:
        return None
    values = np.sort(np.asarray(lead_times_s, dtype=np.float64))
    if len(values) > LEAD_TIME_POINTS:
        values = np.quantile(values, np.linspace(0.0, 1.0, LEAD_TIME_POINTS))
    ended = failed + ready
    rate = min(failed / ended, MOST_FAILURE_RATE) if ended else 0.0
    return LearnedLaunches(tuple(float(value) for value in values), len(lead_times_s), rate)


def alike(first: LearnedLaunches | None, second: LearnedLaunches | None) -> bool:
    """Whether a replay on one is as good as on the other: both nothing learned, or medians and 95th
    percentiles within ``LEAD_TIME_MOVE`` and failure rates within ``FAILURE_RATE_MOVE``."""
    if first is None or second is None:
        return first is second
    for level in (0.5, 0.95):
        before, after = first.quantile(level), second.quantile(level)
        if abs(after - before) > LEAD_TIME_MOVE * before:
            return False
    return abs(first.failure_rate - second.failure_rate) <= FAILURE_RATE_MOVE


# (node pool; "" for a series without one) -> what its NodeClaims taught, None while nothing was.
LearnedLaunchesFunction = Callable[[str], LearnedLaunches | None]


@dataclass
class ReplayedPool:
    """The pool a target's tuner replays its candidates on: what its NodeClaims taught for the next
    replay (None: nodes take the lead time served, fixed), and what the kept ledgers were replayed on."""

    launches: LearnedLaunches | None = None
    replayed_with: LearnedLaunches | None = None

    def moved(self) -> bool:
        """What was learned moved since the kept ledgers were replayed: replay the whole record."""
        return not alike(self.replayed_with, self.launches)

    def note(self, lead_time_s: float) -> str:
        """The reason's note: which pool the kept ledgers were replayed on (the explanation says
        where the lead time served comes from)."""
        if self.replayed_with is not None:
            return f"; replayed with {self.replayed_with.describe()}"
        fixed = duration_text(lead_time_s)
        return f"; replayed with a fixed lead time of {fixed} (the lead time served: no launch learned yet)"
