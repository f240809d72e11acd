"""Shared pieces of the CapacityBuffer writer tests: settings, snapshots of served headroom, the writer."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

from adapters.kubernetes.watch import WatchSettings
from autoscaler.actuation.writer import BufferActuator
from autoscaler.config.actuator_settings import CapacityBufferSettings
from autoscaler.serving.provider import MetricInfo, ServedSeries, Snapshot
from tests.eventually import eventually

GROUP, PLURAL = "autoscaling.x-k8s.io", "capacitybuffers"
HEADROOM = MetricInfo("gpu_headroom", "headroom", "GPUs")
# Fast watch retries: the fake API answers at once.
WATCH = WatchSettings(backoff_initial_s=0.05, backoff_max_s=0.5, backoff_jitter=0.0)


def buffer_settings(**changes: Any) -> CapacityBufferSettings:
    pool = {
        "pool": "a100",
        "namespace": "gpu",
        "name": "a100-buffer",
        "gpus_per_chunk": 8,
        "node_selector": {"karpenter.sh/nodepool": "a100"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    document: dict[str, Any] = {"pools": [pool], "lease": {"namespace": "gpu-autoscaler"}, **changes}
    return CapacityBufferSettings.model_validate(document)


def headroom(value: float, *, labels: dict[str, str] | None = None, at: datetime | None = None) -> Snapshot:
    moment = at or datetime.now(UTC)
    series = ServedSeries("gpu_headroom", labels or {"nodepool": "a100"}, value, moment)
    return Snapshot(created_at=moment, metrics={"gpu_headroom": HEADROOM}, series={"gpu_headroom": (series,)})


@contextlib.asynccontextmanager
async def running_writer(
    settings: CapacityBufferSettings, api: Any, identity: str = "a", clock: Callable[[], datetime] | None = None
) -> AsyncIterator[BufferActuator]:
    actuator = BufferActuator(settings, api, watch=WATCH, identity=identity, clock=clock)
    async with actuator.running():
        yield actuator


async def show(writer: BufferActuator, snapshot: Snapshot) -> None:
    """Hand the writer a refresh's snapshot and wait until it has acted on it."""
    done = writer.rounds
    writer.on_snapshot(snapshot)
    await eventually(lambda: writer.rounds > done, message="the writer's round after the snapshot")


def writes(fake_kube: Any, method: str, plural: str = PLURAL) -> int:
    return sum(1 for request in fake_kube.requests_for(plural, watch=False) if request.method == method)
