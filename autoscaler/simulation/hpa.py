"""The HorizontalPodAutoscaler controller's arithmetic, as kube-controller-manager implements it.

Follows ``pkg/controller/podautoscaler`` (autoscaling/v2): per-metric replica proposals within the
tolerances (``behavior.scaleUp/scaleDown.tolerance``, KEP-4951; 0.1 each when unset), the maximum
over metrics, the stabilisation window (the maximum of the recommendations recorded over the last
300 s for scale-down; the minimum over the scale-up window, 0 s by default), then the rate limits of
``behavior`` (scale-up: max(100 %, 4 pods) per 15 s; scale-down: 100 % per 15 s). External metric
values arrive as milli-units, rounded up (``MilliValue``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Literal

import numpy as np

from autoscaler.simulation.defaults import DEFAULT_TOLERANCE as DEFAULT_TOLERANCE  # re-exported
from autoscaler.targets.service_levels import DeadBand

PolicyKind = Literal["Pods", "Percent"]
SelectPolicy = Literal["Max", "Min", "Disabled"]

SYNC_PERIOD_S = 15.0


@dataclass(frozen=True)
class ScalingPolicy:
    """One entry of ``behavior.scaleUp/scaleDown.policies``."""

    kind: PolicyKind
    value: int
    period_seconds: int


@dataclass(frozen=True)
class ScalingRules:
    """``behavior.scaleUp`` or ``behavior.scaleDown``."""

    stabilization_window_seconds: int
    policies: tuple[ScalingPolicy, ...]
    select_policy: SelectPolicy = "Max"


# The defaults the API server fills in for autoscaling/v2 (SetDefaults_HorizontalPodAutoscalerBehavior).
DEFAULT_SCALE_UP = ScalingRules(0, (ScalingPolicy("Percent", 100, 15), ScalingPolicy("Pods", 4, 15)))
DEFAULT_SCALE_DOWN = ScalingRules(300, (ScalingPolicy("Percent", 100, 15),))


@dataclass(frozen=True)
class Tolerance(DeadBand):
    """``behavior.scaleUp.tolerance`` and ``behavior.scaleDown.tolerance`` (KEP-4951: beta in 1.35, GA
    in 1.37); an unset one is the controller's ``--horizontal-pod-autoscaler-tolerance``, 0.1. The
    band itself (``within``) is the one a service-level target chooses by."""

    scale_up: float = DEFAULT_TOLERANCE
    scale_down: float = DEFAULT_TOLERANCE

    def __post_init__(self) -> None:
        for name, value in (("scale-up", self.scale_up), ("scale-down", self.scale_down)):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"the {name} tolerance must be a number >= 0, got {value}")


def parse_tolerance(text: str) -> Tolerance:
    """``T`` (both directions) or ``up=T,down=T`` (either may be left out: it stays 0.1)."""
    try:
        if "=" not in text:
            value = float(text)
            return Tolerance(value, value)
        given: dict[str, float] = {}
        for part in text.split(","):
            key, _, value_text = part.partition("=")
            key = key.strip()
            if key not in ("up", "down") or key in given:
                raise ValueError(f"{part.strip()!r} is not up=T or down=T (each at most once)")
            given[key] = float(value_text)
        return Tolerance(given.get("up", DEFAULT_TOLERANCE), given.get("down", DEFAULT_TOLERANCE))
    except ValueError as error:
        raise ValueError(f"--hpa-tolerance {text!r}: {error} (give T, or up=T,down=T)") from None


@dataclass(frozen=True)
class HPASpec:
    """What the simulated placeholder HPA is configured with.

    ``min_replicas=0`` lets placeholders scale to zero (HPAScaleToZero, or KEDA's activation).
    """

    min_replicas: int = 0
    max_replicas: int = 1_000_000
    tolerance: Tolerance = field(default_factory=Tolerance)
    scale_up: ScalingRules = DEFAULT_SCALE_UP
    scale_down: ScalingRules = DEFAULT_SCALE_DOWN


def milli_value(value: float) -> int:
    """The HPA's reading of a served value: milli-units rounded up (as ``Quantity.MilliValue``)."""
    return int((Decimal(repr(float(value))) * 1000).to_integral_value(rounding=ROUND_CEILING))


def average_value_replicas(usage_milli: int, target_milli: int, status_replicas: int, tolerance: Tolerance) -> int:
    """Replicas for an External metric with an ``AverageValue`` target (GetExternalPerPodMetricReplicas).

    The current count is kept while ``usage / (target * replicas)`` is within the tolerances.
    """
    if status_replicas == 0:
        # usage / 0 is +Inf or, when usage is 0, NaN: neither is within, so ceil(usage / target).
        return math.ceil(usage_milli / target_milli)
    ratio = usage_milli / (target_milli * status_replicas)
    if tolerance.within(ratio):
        return status_replicas
    return math.ceil(usage_milli / target_milli)


def value_replicas(usage_milli: int, target_milli: int, current: int, ready_pods: int, tolerance: Tolerance) -> int:
    """Replicas for an External metric with a ``Value`` target (GetExternalMetricReplicas).

    Scales the *ready* pod count by the usage ratio, which is why placeholders (Pending, never ready
    until they fit) must use ``AverageValue`` instead.
    """
    ratio = usage_milli / target_milli
    if current == 0:
        return math.ceil(ratio)
    if tolerance.within(ratio):
        return current
    return math.ceil(ratio * ready_pods)


@dataclass
class _Event:
    time: float
    change: int


@dataclass
class HPAController:
    """One HPA's memory (recommendations and scale events) and its reconcile step."""

    spec: HPASpec = field(default_factory=HPASpec)
    # The recommendations that can still be the minimum over the scale-up window and the maximum
    # over the scale-down window, oldest first: a recommendation older than a later, lower (higher)
    # one never again is, so the windows' extremes are at the fronts. The same values as scanning
    # every recorded recommendation at each sync (sync times never decrease), which cost the
    # simulator a 20-entry loop per sync.
    _lowest: deque[tuple[float, int]] = field(default_factory=deque)
    _highest: deque[tuple[float, int]] = field(default_factory=deque)
    _up_events: deque[_Event] = field(default_factory=deque)
    _down_events: deque[_Event] = field(default_factory=deque)

    def reconcile(self, now: float, current: int, proposals: Sequence[int | None]) -> int:
        """The replica count after one sync at ``now``; ``proposals`` has one entry per metric
        (``None`` for a metric that could not be read)."""
        spec = self.spec
        if current == 0 and spec.min_replicas != 0:
            return 0  # "scaling is disabled since the replica count of the target is zero"
        if current > spec.max_replicas:
            desired = spec.max_replicas
        elif current < spec.min_replicas:
            desired = spec.min_replicas
        else:
            valid = [p for p in proposals if p is not None]
            invalid = len(proposals) - len(valid)
            best = max(valid) if valid else -1
            # All metrics invalid, or some invalid and the rest would scale down: hold.
            if invalid == len(proposals) or (invalid and best < current):
                return current
            desired = self._normalize(now, current, max(best, 0))
        if desired != current:
            self._store_event(now, current, desired)
        return desired

    # -- normalizeDesiredReplicasWithBehaviors -------------------------------------------------

    def _normalize(self, now: float, current: int, desired: int) -> int:
        stabilized = self._stabilize(now, current, desired)
        return self._rate_limited(now, current, stabilized)

    def _stabilize(self, now: float, current: int, desired: int) -> int:
        """The current count within [min over the scale-up window, max over the scale-down window]
        of the recommendations recorded after each window's start, this one included."""
        lowest, highest = self._lowest, self._highest
        up_cutoff = now - self.spec.scale_up.stabilization_window_seconds
        down_cutoff = now - self.spec.scale_down.stabilization_window_seconds
        while lowest and lowest[0][0] <= up_cutoff:
            lowest.popleft()
        while highest and highest[0][0] <= down_cutoff:
            highest.popleft()
        up = min(desired, lowest[0][1]) if lowest else desired
        down = max(desired, highest[0][1]) if highest else desired
        while lowest and lowest[-1][1] >= desired:
            lowest.pop()
        lowest.append((now, desired))
        while highest and highest[-1][1] <= desired:
            highest.pop()
        highest.append((now, desired))
        return min(max(current, up), down)

    def _rate_limited(self, now: float, current: int, desired: int) -> int:
        spec = self.spec
        if desired > current:
            limit = max(self._scale_up_limit(now, current), current)
            return min(desired, spec.max_replicas, limit)
        if desired < current:
            limit = min(self._scale_down_limit(now, current), current)
            return max(desired, spec.min_replicas, limit)
        return desired

    def _period_start(self, now: float, current: int, period: int) -> int:
        cutoff = now - period
        added = sum(event.change for event in self._up_events if event.time > cutoff)
        removed = sum(event.change for event in self._down_events if event.time > cutoff)
        return current - added + removed

    def _scale_up_limit(self, now: float, current: int) -> int:
        rules = self.spec.scale_up
        if rules.select_policy == "Disabled":
            return current
        proposals = []
        for policy in rules.policies:
            start = self._period_start(now, current, policy.period_seconds)
            if policy.kind == "Pods":
                proposals.append(start + policy.value)
            else:  # rounded up so that a small count can still grow
                proposals.append(math.ceil(start * (1 + policy.value / 100)))
        return min(proposals) if rules.select_policy == "Min" else max(proposals)

    def _scale_down_limit(self, now: float, current: int) -> int:
        rules = self.spec.scale_down
        if rules.select_policy == "Disabled":
            return current
        proposals = []
        for policy in rules.policies:
            start = self._period_start(now, current, policy.period_seconds)
            if policy.kind == "Pods":
                proposals.append(start - policy.value)
            else:
                proposals.append(int(start * (1 - policy.value / 100)))
        return max(proposals) if rules.select_policy == "Min" else min(proposals)

    def kept_for(self, current: int, proposal: int, times: Sequence[float], start: int, end: int) -> int:
        """How many syncs from ``times[start]`` (before ``times[end]``) keep ``current`` when each has
        this one proposal, changing only the recommendations kept (then :meth:`held_until`).

        Stabilised, the count stays while the scale-up extreme is at most it and the scale-down one
        at least it. A proposal of the count keeps it at every sync. A lower one keeps it while a
        recommendation of at least the count is still in the scale-down window: the syncs before
        the newest such one leaves it (the syncs add only the lower proposal). No scale event is
        stored at any of them. A higher proposal, or a count out of bounds, is reconciled."""
        spec = self.spec
        if not (
            proposal <= current
            and spec.min_replicas <= current <= spec.max_replicas
            and not (current == 0 and spec.min_replicas != 0)
        ):
            return 0
        if proposal == current:
            return end - start
        newest = None  # the scale-down window's values fall from its front: those >= current lead
        for stamp, value in self._highest:
            if value < current:
                break
            newest = stamp
        if newest is None:
            return 0
        window = spec.scale_down.stabilization_window_seconds
        kept = start
        while kept < end and not newest <= times[kept] - window:  # as _stabilize drops it
            kept += 1
        return kept - start

    def held_until(self, now: float, proposal: int) -> None:
        """The state after syncs that each kept the count with this proposal (:meth:`kept_for`), the
        last at ``now``: the recommendations kept after the last one alone (each earlier one left
        the same value, at an earlier time, which the last one's drops from the windows or replaces)."""
        self._stabilize(now, proposal, proposal)

    def _store_event(self, now: float, before: int, after: int) -> None:
        longest = max(
            (p.period_seconds for p in (*self.spec.scale_up.policies, *self.spec.scale_down.policies)), default=0
        )
        for events in (self._up_events, self._down_events):
            while events and events[0].time <= now - longest:
                events.popleft()
        if after > before:
            self._up_events.append(_Event(now, after - before))
        else:
            self._down_events.append(_Event(now, before - after))


def placeholder_replicas(
    sync_times: np.ndarray,
    usage_milli: np.ndarray,
    spec: HPASpec,
    *,
    target_milli: int = 1000,
    initial: int = 0,
) -> np.ndarray:
    """Replica counts after each sync for a Deployment scaled on ``AverageValue`` External metrics.

    ``usage_milli`` is ``[metric, sync]`` (a 1-D array is one metric); a negative entry marks a
    metric that could not be read at that sync.
    """
    usage = np.atleast_2d(np.asarray(usage_milli, dtype=np.int64))
    controller = HPAController(spec)
    replicas = np.empty(len(sync_times), dtype=np.int64)
    current = initial
    tolerance = spec.tolerance
    times = sync_times.tolist()
    # One list per metric (a transposed tolist() made a list per sync: a tenth of a target's replay).
    metrics = usage.tolist()
    # Where each run of unchanged usage ends: the same usage with the same count proposes the same
    # count, so the syncs of a run that keep the count (HPAController.kept_for) are filled at once. A
    # constant served value, a static buffer, then costs a few syncs instead of one per 15 s, and a
    # scale-down held off by the stabilisation window one sync instead of up to 20.
    changes = np.flatnonzero(np.any(np.diff(usage, axis=1) != 0, axis=0)) + 1
    run_ends = np.append(changes, usage.shape[1]).tolist()
    run = 0
    position = 0
    single = len(metrics) == 1
    while position < len(times):
        while run_ends[run] <= position:
            run += 1
        proposals = [
            None if metric[position] < 0 else average_value_replicas(metric[position], target_milli, current, tolerance)
            for metric in metrics
        ]
        proposal = proposals[0] if single else None
        # (a higher proposal is never kept: reconciled without asking)
        kept = 0
        if proposal is not None and proposal <= current:
            kept = controller.kept_for(current, proposal, times, position, run_ends[run])
        if proposal is not None and kept:
            end = position + kept
            replicas[position:end] = current
            controller.held_until(times[end - 1], proposal)
            position = end
            continue
        current = controller.reconcile(times[position], current, proposals)
        replicas[position] = current
        position += 1
    return replicas
