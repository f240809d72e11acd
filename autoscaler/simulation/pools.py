"""Several node pools for ``simulate --pools FILE``, and how scarce their capacity is.

A pools file (YAML or JSON) lists Karpenter-like NodePools::

    pools:
      - name: spot-a100
        weight: 100              # tried first (Karpenter: heaviest first, equal weights by name descending)
        gpus_per_node: 8
        lead_time: lognormal:median=5m,p95=8m
        capacity_type: spot      # or on-demand
        price_per_gpu_hour: 1.6
        limit_gpus: 256          # optional: spec.limits on the GPU resource (launching nodes count)

It is validated with pydantic; an error names the pool and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from autoscaler.simulation.lead_times import LeadTimeDistribution, parse_lead_time_distribution

CapacityType = Literal["on-demand", "spot"]
# The notice a spot node gets before it is reclaimed (AWS: two minutes).
SPOT_NOTICE_S = 120.0
# How long a pool whose launch just failed is passed over (the AWS provider's cache of unavailable
# offerings keeps an offering that returned InsufficientCapacity for 3 minutes).
UNAVAILABLE_S = 180.0


class PoolSpec(BaseModel):
    """One NodePool of the simulated cluster."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    weight: int = Field(default=0, ge=0, le=100)
    gpus_per_node: int = Field(ge=1)
    lead_time: str
    capacity_type: CapacityType = "on-demand"
    price_per_gpu_hour: float = Field(default=0.0, ge=0)
    limit_gpus: int | None = Field(default=None, ge=0)

    @field_validator("lead_time")
    @classmethod
    def _lead_time(cls, text: str) -> str:
        parse_lead_time_distribution(text)  # a ValueError becomes a validation error on this field
        return text

    @property
    def distribution(self) -> LeadTimeDistribution:
        return parse_lead_time_distribution(self.lead_time)

    @property
    def spot(self) -> bool:
        return self.capacity_type == "spot"


class PoolsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pools: list[PoolSpec] = Field(min_length=1)

    @field_validator("pools")
    @classmethod
    def _unique_names(cls, pools: list[PoolSpec]) -> list[PoolSpec]:
        names = [pool.name for pool in pools]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"pool names must be unique, repeated: {', '.join(repeated)}")
        return pools


@dataclass(frozen=True)
class Scarcity:
    """Launch failures and spot interruptions (both off by default)."""

    launch_failure_rate: float = 0.0  # probability that one node launch fails
    spot_interruptions_per_node_hour: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.launch_failure_rate < 1.0:
            raise ValueError(f"--launch-failure-rate must be from 0 to below 1, got {self.launch_failure_rate}")
        if not self.spot_interruptions_per_node_hour >= 0.0:
            raise ValueError(f"--spot-interruptions must be >= 0, got {self.spot_interruptions_per_node_hour}")


def by_weight(pools: list[PoolSpec] | tuple[PoolSpec, ...]) -> tuple[PoolSpec, ...]:
    """Karpenter's order: heaviest first, equal weights by name in descending order."""
    return tuple(sorted(pools, key=lambda pool: (pool.weight, pool.name), reverse=True))


def describe_errors(errors: ValidationError, source: str) -> str:
    """``pools file F: pools.1.gpus_per_node (pool "b"): Input should be ...`` lines, one per error."""
    lines = [f"invalid pools file {source}:"]
    for error in errors.errors():
        location = list(error["loc"])
        path = ".".join(str(part) for part in location) or "(top level)"
        message = "unknown field" if error["type"] == "extra_forbidden" else error["msg"]
        lines.append(f"  {path}: {message} (got {error.get('input')!r})")
    return "\n".join(lines)


def load_pools(path: Path) -> tuple[PoolSpec, ...]:
    """The pools of a YAML or JSON file, in Karpenter's weight order; a ValueError names what is wrong."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ValueError(f"--pools {path}: {error}") from None
    try:
        parsed = PoolsFile.model_validate(raw)
    except ValidationError as errors:
        raise ValueError(describe_errors(errors, str(path))) from None
    return by_weight(parsed.pools)


def single_pool(
    gpus_per_node: int, lead_time: LeadTimeDistribution, *, spot: bool, price: float | None
) -> tuple[PoolSpec, ...]:
    """The one pool of the flags (``--gpus-per-node``, ``--lead-time-distribution``), spot when
    interruptions are given."""
    return (
        PoolSpec(
            name="default",
            gpus_per_node=gpus_per_node,
            lead_time=lead_time.text,
            capacity_type="spot" if spot else "on-demand",
            price_per_gpu_hour=price or 0.0,
        ),
    )
