"""Settings of the launch record (``adapters.kubernetes.launch_record``, docs/launch-outcomes.md): when a launch
is slow, what one need is, when a pool keeps failing, and node sizes for pools whose NodeClaims have
not reported any."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, Field, field_validator

from adapters.kubernetes.gpu_requests import parse_quantity
from adapters.kubernetes.launch_record import LaunchSettings
from autoscaler.config.server_settings import STRICT, Duration
from autoscaler.quantity import Count


class LaunchRecordSettings(BaseModel):
    model_config = STRICT

    # A launch that took longer than this from creation to Ready is counted slow.
    slow_after: Duration = timedelta(minutes=10)
    # A NodeClaim created this long after its pool's last failure starts a new need.
    need_gap: Duration = timedelta(minutes=15)
    # This many failed launches in a row, none Ready since, the latest within failing_for: the pool
    # keeps failing, and demand is planned in the next pool Karpenter would fall back to (0: never).
    failing_after: Count = Field(default=3, ge=0)
    failing_for: Duration = timedelta(minutes=30)
    # Node capacities per pool ({"gpu-a100": [{"nvidia.com/gpu": "8", "cpu": "96"}]}), added to
    # those the pool's NodeClaims report in status.capacity.
    node_capacity: dict[str, list[dict[str, str]]] = {}

    @field_validator("node_capacity")
    @classmethod
    def _quantities_parse(cls, value: dict[str, list[dict[str, str]]]) -> dict[str, list[dict[str, str]]]:
        for pool, sizes in value.items():
            for size in sizes:
                for resource, quantity in size.items():
                    try:
                        parse_quantity(quantity)
                    except ValueError:
                        raise ValueError(f"node_capacity of {pool}: {resource}: {quantity!r} is no quantity") from None
        return value

    def record(self) -> LaunchSettings:
        return LaunchSettings(
            slow_after=self.slow_after,
            need_gap=self.need_gap,
            failing_after=self.failing_after,
            failing_for=self.failing_for,
        )

    def sizes(self, pool: str) -> list[dict[str, float]]:
        return [{name: parse_quantity(q) for name, q in size.items()} for size in self.node_capacity.get(pool, [])]
