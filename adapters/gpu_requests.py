"""GPU requests in pod specs: which resources are GPUs, Kubernetes quantities, and a pod's effective
GPU request as the scheduler computes it.

Pure functions over raw JSON (as the watches keep the objects), shared by the CronJob windows and
the GPU quotas.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

WHOLE_GPU = "nvidia.com/gpu"
SHARED_GPU = "nvidia.com/gpu.shared"  # device-plugin time-slicing with renameByDefault
MIG_PREFIX = "nvidia.com/mig-"

# A MIG profile is "<compute slices>g.<memory>gb", "+me" with the media engines. An A100, H100, H200
# or B200 has 7 compute slices; the A30 has 4, and its profiles are these (slices of 4).
FULL_GPU_SLICES = 7
FULL_GPU_SLICE_COUNTS = (1, 2, 3, 4, 7)
A30_SLICES = 4
A30_MIG_PROFILES = {"1g.6gb": 1, "2g.12gb": 2, "4g.24gb": 4}
_MIG_PROFILE = re.compile(r"([1-7])g\.[0-9]+gb(\+me)?")


def is_gpu_resource(name: str) -> bool:
    return name in (WHOLE_GPU, SHARED_GPU) or name.startswith(MIG_PREFIX)


def mig_share(resource: str) -> Fraction | None:
    """The share of a physical GPU one unit of a MIG resource is (its compute slices over the GPU's
    total: ``nvidia.com/mig-1g.10gb`` = 1/7, ``nvidia.com/mig-3g.40gb`` = 3/7, the A30's ``2g.12gb`` =
    2/4); None for a resource that is not MIG. Raises ValueError for a profile of unknown shape."""
    if not resource.startswith(MIG_PREFIX):
        return None
    profile = resource.removeprefix(MIG_PREFIX)
    match = _MIG_PROFILE.fullmatch(profile)
    if match is None:
        raise ValueError(f"{resource!r} is not a MIG profile of the form <N>g.<memory>gb")
    a30_slices = A30_MIG_PROFILES.get(profile.removesuffix("+me"))
    if a30_slices is not None:
        return Fraction(a30_slices, A30_SLICES)
    return Fraction(int(match.group(1)), FULL_GPU_SLICES)


def gpu_share(resource: str, time_slicing: Mapping[str, int]) -> Fraction:
    """Physical GPUs one unit of a GPU ``resource`` stands for: a MIG instance its share, a
    time-sliced resource ``1 / replicas`` (``time_slicing`` maps resource names to the device
    plugin's replicas), anything else 1."""
    share = mig_share(resource)
    if share is not None:
        return share
    return Fraction(1, time_slicing.get(resource, 1))


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


def _container_gpus(container: Mapping[str, Any]) -> dict[str, float]:
    """GPU units one container asks for: its requests, else its limits (which then act as requests)."""
    resources = container.get("resources") or {}
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    wanted: dict[str, float] = {}
    for name in set(requests) | set(limits):
        if is_gpu_resource(name):
            wanted[name] = parse_quantity(requests[name] if name in requests else limits[name])
    return wanted


def pod_gpu_requests(pod_spec: Mapping[str, Any]) -> dict[str, float]:
    """Effective GPU requests of a pod, per resource, as the scheduler computes them.

    max(sum of app containers + restartable (sidecar) init containers, the largest need while init
    containers run), plus the pod overhead; init containers run one at a time, next to the sidecars
    started before them.
    """
    names: set[str] = set()
    app_sum: dict[str, float] = {}
    for container in pod_spec.get("containers") or []:
        for name, amount in _container_gpus(container).items():
            app_sum[name] = app_sum.get(name, 0.0) + amount
            names.add(name)
    sidecar_sum: dict[str, float] = {}
    init_peak: dict[str, float] = {}
    for container in pod_spec.get("initContainers") or []:
        gpus = _container_gpus(container)
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
