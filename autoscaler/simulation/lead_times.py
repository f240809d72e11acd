"""Node provisioning lead-time distributions: ``fixed:5m``, ``lognormal:median=5m,p95=8m``,
``uniform:min=3m,max=6m``, and ``empirical:8m,9m,9m30s,12m`` (lead times measured, such as a pool's
NodeClaims taught the service). Draws come from a seeded generator, so runs repeat exactly."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Literal

import numpy as np

from forecast.durations import parse_positive_duration

Kind = Literal["fixed", "lognormal", "uniform", "empirical"]
_Z95 = NormalDist().inv_cdf(0.95)


@dataclass(frozen=True)
class LeadTimeDistribution:
    """Seconds from a NodeClaim's creation to its node being Ready with GPUs allocatable."""

    kind: Kind
    first: float  # fixed: the value; lognormal: the median; uniform: the minimum
    second: float = 0.0  # lognormal: the 95th percentile; uniform: the maximum
    text: str = ""
    # empirical: the lead times, sorted; they stand at evenly spaced levels from 0 to 1, and a draw
    # interpolates between them (the inverse of their empirical distribution function).
    values: tuple[float, ...] = ()

    def sample(self, rng: np.random.Generator) -> float:
        if self.kind == "fixed":
            return self.first
        if self.kind == "empirical":
            return self.quantile(float(rng.random()))
        if self.kind == "uniform":
            return float(rng.uniform(self.first, self.second))
        sigma = math.log(self.second / self.first) / _Z95
        return float(self.first * math.exp(sigma * rng.standard_normal()))

    def quantile(self, level: float) -> float:
        """The ``level`` quantile in seconds (what a bound such as the oracle plans for)."""
        if self.kind == "fixed":
            return self.first
        if self.kind == "uniform":
            return self.first + level * (self.second - self.first)
        if self.kind == "empirical":
            return float(np.interp(level, np.linspace(0.0, 1.0, len(self.values)), self.values))
        sigma = math.log(self.second / self.first) / _Z95
        return self.first * math.exp(sigma * NormalDist().inv_cdf(level))


def _seconds(text: str, what: str) -> float:
    try:
        return float(parse_positive_duration(text).total_seconds())
    except ValueError as error:
        raise ValueError(f"lead-time distribution: {what}: {error}") from None


def empirical_distribution(seconds: Sequence[float]) -> LeadTimeDistribution:
    """The distribution of these lead times (at least one, each positive), as ``empirical:...`` text."""
    values = tuple(sorted(float(value) for value in seconds))
    if not values or not all(math.isfinite(value) and value > 0 for value in values):
        raise ValueError(f"an empirical lead-time distribution needs positive lead times, got {list(seconds)}")
    text = "empirical:" + ",".join(f"{value:g}s" for value in values)
    return LeadTimeDistribution("empirical", values[0], values[-1], text=text, values=values)


def parse_lead_time_distribution(text: str) -> LeadTimeDistribution:
    """Parse the ``--lead-time-distribution`` flag; errors name the part that is wrong."""
    kind, _, rest = text.strip().partition(":")
    if kind == "fixed":
        return LeadTimeDistribution("fixed", _seconds(rest, "fixed value"), text=text)
    if kind == "empirical":
        seconds = [_seconds(part, "empirical lead time") for part in rest.split(",")]
        return replace(empirical_distribution(seconds), text=text)
    if kind not in ("lognormal", "uniform"):
        raise ValueError(
            f"lead-time distribution {text!r}: expected fixed:D, lognormal:median=D,p95=D, uniform:min=D,max=D "
            "or empirical:D,D,..."
        )
    names = ("median", "p95") if kind == "lognormal" else ("min", "max")
    fields: dict[str, float] = {}
    for part in rest.split(","):
        key, _, value = part.partition("=")
        if key.strip() not in names:
            raise ValueError(f"lead-time distribution {text!r}: {kind} takes {names[0]}= and {names[1]}=")
        fields[key.strip()] = _seconds(value, key.strip())
    if set(fields) != set(names):
        raise ValueError(f"lead-time distribution {text!r}: {kind} needs both {names[0]}= and {names[1]}=")
    low, high = fields[names[0]], fields[names[1]]
    if high < low or (kind == "lognormal" and high == low):
        raise ValueError(f"lead-time distribution {text!r}: {names[1]} must exceed {names[0]}")
    return LeadTimeDistribution("lognormal" if kind == "lognormal" else "uniform", low, high, text=text)
