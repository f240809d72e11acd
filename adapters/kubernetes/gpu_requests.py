"""GPU requests in pod specs: Kubernetes quantities, and a pod's effective GPU request as the
scheduler computes it, for the resources ``adapters.gpu_units.GpuUnits`` counts as GPUs.

Pure functions over raw JSON (as the watches keep the objects), shared by the CronJob windows,
Pending pods and the GPU quotas.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from adapters.gpu_units import MIG_PREFIX, WHOLE_GPU, GpuUnits

SHARED_GPU = "nvidia.com/gpu.shared"  # device-plugin time-slicing with renameByDefault


def is_gpu_resource(name: str) -> bool:
    """An NVIDIA GPU resource by name, for ResourceQuota keys (``adapters.kubernetes.resourcelimits``); what a
    pod's GPUs are worth is ``GpuUnits``'."""
    return name in (WHOLE_GPU, SHARED_GPU) or name.startswith(MIG_PREFIX)


_SUFFIXES = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
}


def parse_quantity(value: Any) -> float:
    """A Kubernetes quantity ("2", "500m", "1k") as a number; raises ValueError if malformed."""
    text = str(value).strip()
    number, suffix = text, ""
    for candidate in sorted(_SUFFIXES, key=len, reverse=True):
        if candidate and text.endswith(candidate):
            number, suffix = text[: -len(candidate)], candidate
            break
    try:
        return float(Decimal(number) * _SUFFIXES[suffix])
    except InvalidOperation as exc:
        raise ValueError(f"not a quantity: {value!r}") from exc


def _container_gpus(container: Mapping[str, Any], units: GpuUnits) -> dict[str, float]:
    """GPU units one container asks for: its requests, else its limits (which then act as requests)."""
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    wanted: dict[str, float] = {}
    for name in set(requests) | set(limits):
        if units.share(name) is not None:
            wanted[name] = parse_quantity(requests[name] if name in requests else limits[name])
    return wanted


def pod_gpu_requests(pod_spec: Mapping[str, Any], units: GpuUnits) -> dict[str, float]:
    """Effective requests of a pod for the GPU resources of ``units``, per resource, as the scheduler
    computes them. Raises ValueError for a quantity, or a MIG profile, it cannot read.

    max(sum of app containers + restartable (sidecar) init containers, the largest need while init
    containers run), plus the pod overhead; init containers run one at a time, next to the sidecars
    started before them.
    """
    names: set[str] = set()
    app_sum: dict[str, float] = {}
    for container in pod_spec.get("containers") or []:
        for name, amount in _container_gpus(container, units).items():
            app_sum[name] = app_sum.get(name, 0.0) + amount
            names.add(name)
    sidecar_sum: dict[str, float] = {}
    init_peak: dict[str, float] = {}
    for container in pod_spec.get("initContainers") or []:
        gpus = _container_gpus(container, units)
        names.update(gpus)
        sidecar = container.get("restartPolicy") == "Always"
        for name in names:
            amount = gpus.get(name, 0.0)
            if sidecar:
                sidecar_sum[name] = sidecar_sum.get(name, 0.0) + amount
                running = sidecar_sum[name]
            else:
                running = sidecar_sum.get(name, 0.0) + amount
            init_peak[name] = max(init_peak.get(name, 0.0), running)
    overhead = pod_spec.get("overhead") or {}
    effective: dict[str, float] = {}
    for name in names:
        amount = max(app_sum.get(name, 0.0) + sidecar_sum.get(name, 0.0), init_peak.get(name, 0.0))
        if name in overhead:
            amount += parse_quantity(overhead[name])
        if amount > 0:
            effective[name] = amount
    return effective
