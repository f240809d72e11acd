"""Warm-up state, the conditions that hold readiness back, and what ``/readyz?verbose`` says."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# A condition that keeps the service out of rotation while it returns a reason (None: fine).
Gate = Callable[[], str | None]


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
        lines.append("readyz check passed" if ready else "readyz check failed")
        return "\n".join(lines) + "\n"
