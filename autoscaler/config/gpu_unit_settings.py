"""The GPU units Pending pods and CronJob windows count in: those of the ``gpus_requested`` signals
their GPUs are added to (``adapters.gpu_units``), so both paths count the same pods the same way;
and the DeviceClass map their DRA claims count by (``adapters.kubernetes.dra_claims``)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, Field

from adapters.gpu_units import WHOLE_GPU, GpuUnits
from adapters.kubernetes.dra_claims import DEFAULT_DEVICE_CLASSES
from autoscaler.config.server_settings import STRICT
from autoscaler.quantity import Number


class GpuSignal(Protocol):
    """The fields of a signal's settings that say how it counts GPUs."""

    @property
    def preset(self) -> str | None: ...
    @property
    def resource(self) -> str | tuple[str, ...] | None: ...
    @property
    def mig(self) -> bool | None: ...
    @property
    def time_slicing(self) -> Mapping[str, int]: ...


def signal_gpu_units(signal: GpuSignal) -> GpuUnits:
    """The units a ``gpus_*`` signal counts in, with the presets' defaults where a field is unset."""
    return GpuUnits.of(signal.resource or WHOLE_GPU, signal.mig is not False, signal.time_slicing)


def pod_gpu_units(signals: Iterable[GpuSignal]) -> GpuUnits:
    """The units of the ``gpus_requested`` signals (the default units when there is none). Raises
    ValueError naming a resource two of them count differently: the pods have one count."""
    units = [signal_gpu_units(signal) for signal in signals if signal.preset == "gpus_requested"]
    return functools.reduce(GpuUnits.merged, units) if units else GpuUnits()


class ResourceClaimSettings(BaseModel):
    """``inputs.resource_claims``: GPUs asked for through DRA (``adapters.kubernetes.dra_claims``)."""

    model_config = STRICT

    # Watch ResourceClaims and ResourceClaimTemplates (resource.k8s.io/v1) for Pending pods and CronJobs.
    enabled: bool = True
    # DeviceClass -> GPUs one of its devices is: a number, or "mig-profile" (by the MIG profile the
    # request's CEL selector names, as MIG resources count). Classes not named are not GPUs.
    device_classes: dict[str, Annotated[Number, Field(gt=0)] | Literal["mig-profile"]] = Field(
        default_factory=lambda: dict(DEFAULT_DEVICE_CLASSES)
    )
