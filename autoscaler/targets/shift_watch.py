"""A level shift in what a target's candidate attained: where its judged past starts (``service_levels``
judges candidates from there; ``target_store`` saves it across restarts)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from autoscaler.scorecard.figures import ServiceTarget
from autoscaler.targets.tuning import TuningSettings


@dataclass(frozen=True)
class ShiftWatch:
    """Where a target's judged past starts, moved by a level shift: once ``settings.restart_periods``
    periods in a row had the candidate served burn the target more than ``settings.restart_burn`` times,
    or ``settings.drift_periods`` of the last ``settings.drift_window`` periods more than
    ``settings.drift_burn`` times, the days before the first of them no longer say what the next period
    needs, and candidates are judged from its start on (the window growing back a period at a time).
    One bad period is noise a week's window absorbs; a run or a cluster of them is a shift."""

    judged_from_s: float = -math.inf
    burning_since_s: float | None = None  # the start of the current run of burning periods
    burning_periods: int = 0
    # The last drift_window periods' starts, each with whether it burned past drift_burn.
    recent: tuple[tuple[float, bool], ...] = ()
    # Why judged_from_s last moved: "run" (restart_periods in a row) or "drift" (drift_periods of the
    # last drift_window); "" before any shift.
    cause: str = ""

    def after(
        self, period_start_s: float, attained: float | None, target: ServiceTarget, settings: TuningSettings
    ) -> ShiftWatch:
        """The watch after a period from ``period_start_s`` in which the candidate attained ``attained``."""
        if attained is None or (settings.restart_burn is None and settings.drift_burn is None):
            return self
        watch = self
        if settings.drift_burn is not None:
            burned = attained > settings.drift_burn * target.value
            recent = (*self.recent, (period_start_s, burned))[-settings.drift_window :]
            watch = replace(self, recent=recent)
            if sum(flag for _, flag in recent) >= settings.drift_periods:
                first = min(start for start, flag in recent if flag)
                # The pattern is spent: the next one must be made of periods judged after this restart.
                return replace(watch, judged_from_s=max(self.judged_from_s, first), recent=(), cause="drift")
        burn = settings.restart_burn
        if burn is None or not attained > burn * target.value:
            return replace(watch, burning_since_s=None, burning_periods=0)
        since = period_start_s if self.burning_since_s is None else self.burning_since_s
        periods = self.burning_periods + 1
        if periods >= settings.restart_periods:
            judged_from = max(self.judged_from_s, since)
            return replace(
                watch, judged_from_s=judged_from, burning_since_s=since, burning_periods=periods, cause="run"
            )
        return replace(watch, burning_since_s=since, burning_periods=periods)


NO_SHIFT = ShiftWatch()  # frozen: one shared default is safe
