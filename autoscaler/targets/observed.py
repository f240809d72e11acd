"""What a headroom served to a target chose, when and why, as the served value carries it to the API, the
page and ``/metrics`` (``serving.provenance.TargetChoice``; judged live in ``scorecard.target_status``)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from autoscaler.serving.provenance import TargetChoice
from autoscaler.targets.candidates import describe
from autoscaler.targets.tuners import TargetLevels


def target_choice(levels: TargetLevels, metric: str, key: object) -> TargetChoice | None:
    """The choice the tuner of a (metric, series) serves; None without a target. The replayed figure is
    None before the first choice, after a restart until the next (the replayed ledgers are not saved),
    and when the tune window held nothing to judge."""
    tuner = levels.tuner(metric, key)
    if tuner is None:
        return None
    replayed = tuner.replay_attained
    return TargetChoice(
        kind=tuner.target.kind,
        value=tuner.target.value,
        pool=tuner.pool,
        window_s=tuner.tuning.window_s,
        chosen=describe(tuner.chosen),
        chosen_at=None if tuner.chosen_at is None else datetime.fromtimestamp(tuner.chosen_at, UTC),
        reason=tuner.reason,
        replay_attained=replayed if replayed is not None and math.isfinite(replayed) else None,
    )
