"""Policies: what each one serves to the placeholder HPA, as GPUs of headroom per step.

Every policy is simulated under the same controller and node pool; only the served metric differs.
The heuristics and the oracle are computed here, vectorised over the whole run; the forecasting
policies (``holt_winters``, ``auto:Q``) live in :mod:`autoscaler.simulation.forecasting`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import pandas as pd

from autoscaler.scorecard.figures import ServiceTarget, TargetError, parse_target_text
from autoscaler.simulation.hpa import SYNC_PERIOD_S
from autoscaler.simulation.inputs import Workload
from forecast.durations import parse_positive_duration

PolicyName = Literal[
    "reactive",
    "static_buffer",
    "reactive_max",
    "scheduled",
    "scheduled_buffer",
    "holt_winters",
    "auto",
    "auto-slo",
    "oracle",
]
POLICY_NAMES: tuple[PolicyName, ...] = get_args(PolicyName)
# Heuristics an operator tunes to a target on the past and runs on the future: ``static_buffer@1%``.
TUNABLE: frozenset[str] = frozenset({"static_buffer", "scheduled_buffer", "reactive_max"})
FORECASTING: frozenset[str] = frozenset({"holt_winters", "auto"})
# What an operator can run without this service's forecast: the yardsticks ``auto:Q`` must beat.
# Holt-Winters is one (the PHPA's off-the-shelf forecast); the oracle, which knows the future, is not.
HEURISTICS: frozenset[str] = frozenset(
    {"reactive", "static_buffer", "reactive_max", "scheduled", "scheduled_buffer", "holt_winters"}
)
_PARAMETER = {
    "static_buffer": "N (GPUs)",
    "scheduled_buffer": "N (GPUs)",
    "reactive_max": "W (a duration)",
    "auto": "Q (a quantile)",
    "auto-slo": "TARGET (a share of minutes short, e.g. 1%, or window-p95=DURATION)",
}
_TUNABLE_NAMES: dict[str, PolicyName] = {
    "static_buffer": "static_buffer",
    "scheduled_buffer": "scheduled_buffer",
    "reactive_max": "reactive_max",
}
# The oracle plans for this quantile of the lead-time distribution (its maximum, for a fixed one).
ORACLE_LEAD_QUANTILE = 0.999


@dataclass(frozen=True)
class PolicySpec:
    """A policy as given on the command line: ``name`` or ``name:parameter``."""

    text: str
    name: PolicyName
    buffer_gpus: float = 0.0
    window_s: float = 0.0
    quantile: float = 0.0
    # auto-slo:TARGET and the walk-forward-tuned heuristics NAME@TARGET: the service level to meet.
    target: ServiceTarget | None = None

    @property
    def tuned(self) -> bool:
        """Chosen walk-forward among candidates to meet a target (auto-slo, NAME@TARGET)."""
        return self.target is not None

    @property
    def forecasting(self) -> bool:
        return self.name in FORECASTING

    @property
    def heuristic(self) -> bool:
        return self.name in HEURISTICS


def parse_policy(text: str) -> PolicySpec:
    text = text.strip()
    tuned_name, at, target_text = text.partition("@")
    if at:
        if tuned_name not in TUNABLE:
            raise ValueError(
                f"policy {text!r}: only {' and '.join(sorted(TUNABLE))} can be tuned to a target (NAME@TARGET)"
            )
        try:
            target = parse_target_text(target_text)
        except TargetError as error:
            raise ValueError(f"policy {text!r}: {error}") from None
        return PolicySpec(text, _TUNABLE_NAMES[tuned_name], target=target)
    name, colon, parameter = text.partition(":")
    if name not in POLICY_NAMES:
        raise ValueError(f"unknown policy {text!r}; known: {', '.join(POLICY_NAMES)}")
    if name in _PARAMETER and not colon:
        raise ValueError(f"policy {name!r} needs a parameter: {name}:{_PARAMETER[name]}")
    if name not in _PARAMETER and colon:
        raise ValueError(f"policy {name!r} takes no parameter (got {text!r})")
    if name in ("static_buffer", "scheduled_buffer"):
        try:
            gpus = float(parameter)
        except ValueError:
            raise ValueError(f"policy {text!r}: N must be a number of GPUs") from None
        if not math.isfinite(gpus) or gpus < 0:
            raise ValueError(f"policy {text!r}: N must be a finite number of GPUs, at least 0")
        return PolicySpec(text, name, buffer_gpus=gpus)
    if name == "reactive_max":
        try:
            window = parse_positive_duration(parameter)
        except ValueError as error:
            raise ValueError(f"policy {text!r}: {error}") from None
        return PolicySpec(text, "reactive_max", window_s=float(window.total_seconds()))
    if name == "auto":
        try:
            quantile = float(parameter)
        except ValueError:
            raise ValueError(f"policy {text!r}: Q must be a number") from None
        if not 0.5 < quantile < 1.0:
            raise ValueError(f"policy {text!r}: Q must be a quantile between 0.5 and 1 (exclusive)")
        return PolicySpec(text, "auto", quantile=quantile)
    if name == "auto-slo":
        try:
            return PolicySpec(text, "auto-slo", target=parse_target_text(parameter))
        except TargetError as error:
            raise ValueError(f"policy {text!r}: {error}") from None
    return PolicySpec(text, name)


def parse_policies(text: str) -> tuple[PolicySpec, ...]:
    specs = tuple(parse_policy(part) for part in text.split(",") if part.strip())
    if not specs:
        raise ValueError("--policies is empty")
    seen: set[str] = set()
    for spec in specs:
        if spec.text in seen:
            raise ValueError(f"policy {spec.text!r} is given twice")
        seen.add(spec.text)
    return specs


@dataclass(frozen=True)
class Planning:
    """What the non-forecasting policies need besides the workload."""

    first_step: int  # the step the cluster starts at
    lead_s: float  # the lead time the policies plan for
    oracle_lead_s: float  # the provisioning delay the oracle must cover
    batch_max_s: float
    tolerance: float  # the HPA's scale-up tolerance (0 for a CapacityBuffer)


def _rolling_max(values: np.ndarray, steps: int) -> np.ndarray:
    """Maximum over the last ``steps`` values up to and including each one."""
    return np.asarray(pd.Series(values).rolling(steps, min_periods=1).max().to_numpy(), dtype=np.float64)


def _forward_max(values: np.ndarray, steps: int) -> np.ndarray:
    """Maximum over each value and the ``steps - 1`` after it."""
    return np.ascontiguousarray(_rolling_max(values[::-1], steps)[::-1])


def scheduled_gpus(workload: Workload, lead_s: float) -> np.ndarray:
    """GPUs of declared windows due to start within the lead time (a cron trigger from start - lead
    to start): what a cron scaler holds so that nodes are Ready when the job arrives."""
    out = np.zeros(workload.steps)
    times = np.arange(workload.steps) * workload.step_s
    for window in workload.windows:
        start = (pd.Timestamp(window.start) - workload.origin).total_seconds()
        out[(times >= start - lead_s) & (times < start)] += window.gpus
    return out


def oracle_headroom(workload: Workload, planning: Planning) -> np.ndarray:
    """Perfect knowledge of demand: the most requested over the time placeholders need to become
    Ready nodes, minus the least requested now, scaled past the HPA's scale-up tolerance so that the
    placeholder count never settles below it."""
    step_s = workload.step_s
    base_delay = planning.oracle_lead_s + planning.batch_max_s + SYNC_PERIOD_S
    needed = _forward_max(workload.peak, math.ceil(base_delay / step_s) + 1) - workload.trough
    # Scaling up from few placeholders takes several syncs (at most doubling, or +4, per 15 s).
    largest = float(np.max(needed)) * (1 + planning.tolerance)
    ramp_syncs = 1 + math.ceil(math.log2(largest / 4)) if largest > 4 else 1
    delay = base_delay + ramp_syncs * SYNC_PERIOD_S
    needed = _forward_max(workload.peak, math.ceil(delay / step_s) + 1) - workload.trough
    return np.asarray(np.maximum(needed, 0.0) * (1 + planning.tolerance), dtype=np.float64)


def heuristic_headroom(spec: PolicySpec, workload: Workload, planning: Planning) -> np.ndarray:
    """The served metric per step for every policy that needs no forecast."""
    if spec.tuned:
        raise ValueError(f"policy {spec.text!r} is chosen walk-forward among candidates, not computed alone")
    observed = workload.observed
    if spec.name == "reactive":
        return np.zeros(workload.steps)
    if spec.name == "static_buffer":
        return np.full(workload.steps, spec.buffer_gpus)
    if spec.name == "scheduled_buffer":  # a static buffer plus a cron scaler for declared windows
        return spec.buffer_gpus + scheduled_gpus(workload, planning.lead_s)
    if spec.name == "reactive_max":
        steps = max(1, math.ceil(spec.window_s / workload.step_s))
        return np.asarray(_rolling_max(observed, steps) - observed, dtype=np.float64)
    if spec.name == "scheduled":
        return scheduled_gpus(workload, planning.lead_s)
    if spec.name == "oracle":
        return oracle_headroom(workload, planning)
    raise ValueError(f"policy {spec.text!r} needs a forecast")
