"""The GPU units Pending pods, CronJob windows and the live scorecard count in: those of the
``gpus_requested`` signals their GPUs are added to (``adapters.gpu_units``), so every path counts the
same pods the same way, in the pools the same node label names; and the DeviceClass map their DRA
claims count by (``adapters.kubernetes.dra_claims``)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, Field

from adapters.gpu_units import WHOLE_GPU, GpuUnits
from adapters.kubernetes.dra_claims import DEFAULT_DEVICE_CLASSES
from adapters.prometheus.presets import KSM_NODEPOOL_LABEL
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
    @property
    def nodepool_label(self) -> str | None: ...


def signal_gpu_units(signal: GpuSignal) -> GpuUnits:
    """The units a ``gpus_*`` signal counts in, with the presets' defaults where a field is unset."""
    return GpuUnits.of(signal.resource or WHOLE_GPU, signal.mig is not False, signal.time_slicing)


def pod_gpu_units(signals: Iterable[GpuSignal]) -> GpuUnits:
    """The units of the ``gpus_requested`` signals (the default units when there is none). Raises
    ValueError naming a resource two of them count differently: the pods have one count."""
    units = [signal_gpu_units(signal) for signal in signals if signal.preset == "gpus_requested"]
    return functools.reduce(GpuUnits.merged, units) if units else GpuUnits()


def pod_pool_label(signals: Iterable[GpuSignal]) -> str:
    """The ``kube_node_labels`` label that names a node's pool in the ``gpus_requested`` signals (the
    presets' default when none sets it). Raises ValueError when two of them name different labels:
    the pools have one name."""
    labels = {signal.nodepool_label or KSM_NODEPOOL_LABEL for signal in signals if signal.preset == "gpus_requested"}
    if len(labels) > 1:
        raise ValueError(f"the gpus_requested signals name their pools by different labels: {sorted(labels)}")
    return labels.pop() if labels else KSM_NODEPOOL_LABEL


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
