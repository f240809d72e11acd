"""A headroom metric's service-level target, as the settings file states it (autoscaler/targets/target_levels.py
serves it)."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, Field, model_validator

from autoscaler.config.server_settings import STRICT, Duration
from autoscaler.quantity import Count, Number
from autoscaler.scorecard.figures import ServiceTarget, TargetError, make_target, parse_fraction_target
from autoscaler.targets.tuning import TuningSettings

_TARGET_FIELDS = ("minutes_short", "short_gpu_minutes_per_day", "window_start_delay_p95")


class TargetSettings(BaseModel):
    model_config = STRICT

    """A service level for a headroom metric, stated as an operator states it; the service then
    chooses what to serve (autoscaler/targets/target_levels.py). Exactly one of the first three."""

    # At most this share of minutes with any GPU short, as a percentage: "1%".
    minutes_short: str | None = None
    # At most this many short GPU-minutes a day.
    short_gpu_minutes_per_day: Number | None = Field(default=None, gt=0)
    # Window pods (declared windows: CronJobs, configured schedules) started within this at p95: "2m".
    window_start_delay_p95: Duration | None = None
    tune_every: Duration = timedelta(days=1)
    tune_window: Duration = timedelta(days=7)
    # Online calibration: the level asked of the past moves by this x (target - attained) each period.
    calibration_gain: Number = Field(default=0.0, ge=0, le=2)
    # A level shift: this many periods in a row in which what was served attained worse than
    # restart_burn x the target (live in the pool's scorecard where it covers the period, else in the
    # replay) restart the judged past at the first of them (docs/service-levels.md, "A level shift").
    # null: off.
    restart_burn: Number | None = Field(default=3.0, gt=1, le=1000)
    restart_periods: Count = Field(default=2, ge=1, le=30)
    # The same after drift_periods of the last drift_window periods worse than drift_burn x the target,
    # in a row or not. null: off.
    drift_burn: Number | None = Field(default=2.0, gt=1, le=1000)
    drift_periods: Count = Field(default=3, ge=1, le=30)
    drift_window: Count = Field(default=4, ge=1, le=30)
    # A level is served over the cheapest buffer that met only when it held this many percent fewer
    # GPU-seconds over the window (autoscaler/targets/service_levels.py, TuningSettings.forecast_margin).
    forecast_margin_percent: Number = Field(default=2.0, ge=0, le=50)
    # The node size the replay provisions in (the pool's GPUs per node).
    gpus_per_node: Count = Field(default=8, ge=1, le=64)
    # The placeholder HPA's behavior.scaleUp/scaleDown.tolerance, as the replay models it
    # (manifests/examples/hpa-gpu-placeholder.yaml); 0.1 each where the HPA has none (before 1.35).
    hpa_tolerance_up: Number = Field(default=0.0, ge=0, le=1)
    hpa_tolerance_down: Number = Field(default=0.05, ge=0, lt=1)

    @model_validator(mode="after")
    def _one_target(self) -> TargetSettings:
        given = [name for name in _TARGET_FIELDS if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of minutes_short (e.g. '1%'), short_gpu_minutes_per_day and window_start_delay_p95"
            )
        if self.minutes_short is not None:
            try:
                parse_fraction_target(self.minutes_short)
            except TargetError as error:
                raise ValueError(f"minutes_short: {error}") from None
        if self.tune_every <= timedelta(0) or self.tune_window < self.tune_every:
            raise ValueError("tune_every must be positive and tune_window at least tune_every")
        if self.drift_window < self.drift_periods:
            raise ValueError(
                f"drift_window ({self.drift_window}) must be at least drift_periods ({self.drift_periods})"
            )
        return self

    def service_target(self) -> ServiceTarget:
        if self.minutes_short is not None:
            return parse_fraction_target(self.minutes_short)
        if self.window_start_delay_p95 is not None:
            return make_target("window_start_delay_p95_s", self.window_start_delay_p95.total_seconds())
        return make_target("short_gpu_minutes_per_day", float(self.short_gpu_minutes_per_day or 0.0))

    def tuning(self) -> TuningSettings:
        return TuningSettings(
            every_s=self.tune_every.total_seconds(),
            window_s=self.tune_window.total_seconds(),
            gain=self.calibration_gain,
            restart_burn=self.restart_burn,
            restart_periods=self.restart_periods,
            drift_burn=self.drift_burn,
            drift_periods=self.drift_periods,
            drift_window=self.drift_window,
            forecast_margin=self.forecast_margin_percent / 100.0,
            hpa_tolerance_up=self.hpa_tolerance_up,
            hpa_tolerance_down=self.hpa_tolerance_down,
        )
