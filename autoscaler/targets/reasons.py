"""How a target's choice is explained: the figure a target is stated on, in words, and the notes the
reason carries (the forecast margin, buffers the placeholder HPA would not move to, the live figure)."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from autoscaler.scorecard.figures import ServiceTarget
from autoscaler.targets.service_levels import LedgerPrefix
from autoscaler.targets.shift_watch import ShiftWatch
from autoscaler.targets.tuning import TuningSettings


def figure(target: ServiceTarget, value: float) -> str:
    """A value of the figure ``target`` is stated on, in words."""
    if not np.isfinite(value):
        return "nothing to judge yet" if target.kind == "window_start_delay_p95_s" else "no minute judged"
    if target.kind == "minutes_short_fraction":
        return f"{value * 100:.2g} % of minutes short"
    if target.kind == "short_gpu_minutes_per_day":
        return f"{value:.3g} short GPU-minutes a day"
    return f"a window start delay p95 of {value:.0f} s"


def margin_note(forecast_margin: float) -> str:
    if forecast_margin <= 0:
        return ""
    return f" (a level only when {forecast_margin * 100:g} % cheaper than the cheapest buffer that met)"


def unreached_note(unreachable: Collection[str], served_gpus: int | None) -> str:
    """Which buffers were set aside because the placeholder HPA would not have moved to them."""
    if not unreachable or served_gpus is None:
        return ""
    count = len(unreachable)
    return (
        f"; {count} buffer{'s' if count > 1 else ''} within the placeholder HPA's tolerance of the "
        f"{served_gpus} GPUs served not chosen (the HPA would keep {served_gpus})"
    )


def covered(
    prefix: LedgerPrefix | None, target: ServiceTarget, start_s: float, end_s: float, window_starts: np.ndarray
) -> float | None:
    """What a live ledger attained over the period, when it scored at least half of its minutes."""
    if prefix is None or end_s <= start_s:
        return None
    figures, _ = prefix.window(start_s, end_s)
    if figures.minutes_scored < 0.5 * (end_s - start_s) / 60.0:
        return None
    return prefix.attained(target, start_s, end_s, window_starts)


def shift_note(shift: ShiftWatch, window_start_s: float, target: ServiceTarget, settings: TuningSettings) -> str:
    """Why the judged past is shorter than the tune window, when a level shift cut it."""
    if shift.judged_from_s != window_start_s:
        return ""
    if shift.cause == "drift" and settings.drift_burn is not None:
        return (
            f" (judged only since the level shift: the candidate served attained worse than "
            f"{settings.drift_burn:g} x {figure(target, target.value)} in {settings.drift_periods} of "
            f"{settings.drift_window} periods)"
        )
    if settings.restart_burn is None:
        return ""
    return (
        f" (judged only since the level shift: the candidate served attained worse than "
        f"{settings.restart_burn:g} x {figure(target, target.value)} {shift.burning_periods} periods in a row)"
    )
