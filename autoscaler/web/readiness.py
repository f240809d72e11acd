"""Warm-up state and what ``/readyz?verbose`` says about it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Readiness:
    """Ready once the first snapshot with values is in place; ``checks`` are informative lines."""

    ready: bool = False
    reason: str = "warming up: no forecast yet"
    checks: dict[str, str] = field(default_factory=dict)

    def verbose(self) -> str:
        """kube-apiserver's ``/readyz?verbose`` layout: one ``[+]``/``[-]`` line per check, then a verdict."""
        lines = [f"[{'+' if self.ready else '-'}]snapshot: {self.reason}"]
        # Check lines inform; readiness itself is "is a forecast served", so a failing signal that still
        # serves its last good values does not take the pod out of the Service. Warnings (demand that
        # fits no NodePool) are marked like failures, for people to look at.
        lines += [
            f"[{'-' if detail.startswith(('failing', 'warning')) else '+'}]{name}: {detail}"
            for name, detail in sorted(self.checks.items())
        ]
        lines.append("readyz check passed" if self.ready else "readyz check failed")
        return "\n".join(lines) + "\n"
