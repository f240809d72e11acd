"""Warm-up state, the conditions that hold readiness back, and what ``/readyz?verbose`` says.

Readiness is "something is served" (docs/serving.md says why not "everything"): each metric that has
no value yet gets a ``[-]metric NAME failed: ...`` line saying what its signal is doing or why it failed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from autoscaler.refresh.refresher import NO_SERIES
from autoscaler.serving.provider import Snapshot
from autoscaler.targets.plans import MetricPlan, RefreshStats

# A condition that keeps the service out of rotation while it returns a reason (None: fine).
Gate = Callable[[], str | None]


@dataclass(frozen=True)
class MetricState:
    """One served metric: how many series it serves, or why it has no value (``missing``)."""

    metric: str
    series: int
    missing: str | None = None

    def line(self) -> str:
        """kube-apiserver's ``[+]name ok`` / ``[-]name failed: reason``."""
        if self.missing is None:
            return f"[+]metric {self.metric} ok ({self.series} series)"
        return f"[-]metric {self.metric} failed: {self.missing}"


def metric_states(plans: Sequence[MetricPlan], snapshot: Snapshot, stats: RefreshStats | None) -> list[MetricState]:
    """Each planned metric's state, by name; ``stats`` are the refresher's (None: none runs)."""
    signals = {plan.signal for plan in plans}
    states = []
    for plan in sorted(plans, key=lambda plan: plan.metric):
        count = len(snapshot.series.get(plan.metric, ()))
        missing = None if count else _why_no_value(plan.signal, stats, signals)
        states.append(MetricState(plan.metric, count, missing))
    return states


def _why_no_value(signal: str, stats: RefreshStats | None, signals: set[str]) -> str:
    """What the signal behind a metric with no value is doing, or its last error. A source that yields
    several signals (the demo's) records under its own name: it speaks for them."""
    if stats is None:
        return "no value yet: no refresh has run in this process"
    names = [signal, *sorted((set(stats.running) | set(stats.last_error)) - signals)]
    for name in names:
        kind = "signal" if name == signal else "source"
        if name in stats.running:
            what, since = stats.running[name]
            return f"no value yet: {kind} {name}: {what} running since {since:%Y-%m-%dT%H:%M:%SZ}"
        error = stats.last_error.get(name)
        if error == NO_SERIES:  # nothing to forecast until a series appears: named, not waited for
            return f"no value: {kind} {name}: {error}"
        if error is not None:
            return f"no value yet: {kind} {name}: {error}"
    success = stats.last_success.get(signal)
    if success is not None:  # forecast, but nothing servable (no replica capacity learned, say)
        return f"no value yet: signal {signal}: forecast at {success:%Y-%m-%dT%H:%M:%SZ} served nothing (see the log)"
    return "no value yet: waiting for the first refresh"


@dataclass
class Readiness:
    """Ready once the first snapshot with values is in place and no gate objects.

    ``checks`` are informative lines; ``gates`` (TLS usable, not shutting down) each fail readiness
    on their own.
    """

    ready: bool = False
    reason: str = "warming up: no forecast yet"
    checks: dict[str, str] = field(default_factory=dict)
    gates: dict[str, Gate] = field(default_factory=dict)
    # Lines computed when shown, informative like ``checks`` (the authentication ConfigMap's state).
    notes: dict[str, Callable[[], str]] = field(default_factory=dict)
    # Each metric's state, computed when shown (``metric_states``); informative like ``checks``.
    metrics: Callable[[], Sequence[MetricState]] | None = None

    # The metrics with no value after the last forecast served (None: none served yet).
    _missing: set[str] | None = field(default=None, repr=False)

    def metric_states(self) -> Sequence[MetricState]:
        return self.metrics() if self.metrics is not None else ()

    def forecast_served(self) -> str | None:
        """Ready on a refresh that served values; returns what to log: the first such refresh, naming the
        metrics with no value yet, then each refresh that gives some of them their first value."""
        first, self.ready, self.reason = not self.ready, True, "forecasts served"
        missing = {state.metric for state in self.metric_states() if state.missing is not None}
        gained, self._missing = sorted((self._missing or set()) - missing), missing
        still = f"no value yet: {', '.join(sorted(missing))} (see /readyz?verbose)" if missing else ""
        if first:
            return "first forecast served; ready" + (f"; {still}" if still else "")
        if gained:
            return f"first values of {', '.join(gained)}; " + (still or "every metric has a value now")
        return None

    def _gate_problems(self) -> dict[str, str | None]:
        return {name: gate() for name, gate in sorted(self.gates.items())}

    def state(self) -> tuple[bool, str]:
        """Whether the service is ready, and why (or why not)."""
        for name, problem in self._gate_problems().items():
            if problem is not None:
                return False, f"{name}: {problem}"
        return self.ready, self.reason

    def verbose(self) -> str:
        """kube-apiserver's ``/readyz?verbose`` layout: one ``[+]``/``[-]`` line per check, then a verdict."""
        ready, _ = self.state()
        lines = [f"[{'+' if self.ready else '-'}]snapshot: {self.reason}"]
        lines += [
            f"[-]{name}: {problem}" if problem is not None else f"[+]{name} ok"
            for name, problem in self._gate_problems().items()
        ]
        # Check lines inform; readiness itself is "is a forecast served", so a failing signal that still
        # serves its last good values does not take the pod out of the Service. Warnings (demand that
        # fits no NodePool) are marked like failures, for people to look at.
        details = {**self.checks, **{name: note() for name, note in self.notes.items()}}
        lines += [
            f"[{'-' if detail.startswith(('failing', 'warning')) else '+'}]{name}: {detail}"
            for name, detail in sorted(details.items())
        ]
        lines += [state.line() for state in self.metric_states()]
        lines.append("readyz check passed" if ready else "readyz check failed")
        return "\n".join(lines) + "\n"
