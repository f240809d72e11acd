"""GPU units: which resources are GPUs, and how many physical GPUs one unit of each stands for.

The one definition every path counts with: the PromQL presets (``adapters.prometheus.presets``, over
kube-state-metrics' per-resource series) and the pod-spec path (``adapters.kubernetes.gpu_requests``, for
Pending pods and CronJob windows), so that the same pods give the same number either way.

- Whole GPUs: each unit one GPU (``nvidia.com/gpu``; another vendor's, ``amd.com/gpu``, when named).
- MIG instances ``nvidia.com/mig-<N>g.<memory>gb`` (``+me`` with the media engines): N compute slices
  of the GPU's 7 (A100, H100, H200, B200); the A30's own profiles (``1g.6gb``, ``2g.12gb``,
  ``4g.24gb``) of its 4. Only while ``mig`` is on.
- Time-sliced resources: 1/replicas each (the device plugin's ``replicas``), whatever their name
  (``nvidia.com/gpu.shared`` with ``renameByDefault``, or a name of one's own). Time-slicing that
  keeps the name ``nvidia.com/gpu`` cannot be told from whole GPUs in kube-state-metrics' series:
  name it here only when every node slices it.

Anything else is not a GPU, on both paths.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

WHOLE_GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
FULL_GPU_SLICES = 7
FULL_GPU_SLICE_COUNTS = (1, 2, 3, 4, 7)
A30_SLICES = 4
A30_MIG_PROFILES = {"1g.6gb": 1, "2g.12gb": 2, "4g.24gb": 4}
_MIG_PROFILE = re.compile(r"([1-7])g\.[0-9]+gb(\+me)?")
# An extended resource name: a domain prefix and a name (Kubernetes' IsExtendedResourceName, loosely).
_RESOURCE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def mig_share(resource: str) -> Fraction | None:
    """The share of a physical GPU one unit of a MIG resource is (``nvidia.com/mig-1g.10gb`` = 1/7,
    ``nvidia.com/mig-3g.40gb`` = 3/7, the A30's ``2g.12gb`` = 2/4); None for a resource that is not
    MIG. Raises ValueError for a profile of unknown shape."""
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


@dataclass(frozen=True)
class GpuUnits:
    """The GPU resources counted, and each one's share of a physical GPU (module docstring)."""

    whole: tuple[str, ...] = (WHOLE_GPU,)
    mig: bool = True
    time_slicing: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.whole and not self.time_slicing and not self.mig:
            raise ValueError("no GPU resource counted: name a whole-GPU resource, time_slicing, or keep mig on")
        for name in (*self.whole, *self.time_slicing):
            if not _RESOURCE_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an extended resource name (<domain>/<name>)")
            if name.startswith(MIG_PREFIX):
                raise ValueError(f"{name}: MIG resources count by their profile, not as whole or time-sliced GPUs")
        for name, replicas in self.time_slicing.items():
            if replicas < 1:
                raise ValueError(f"time_slicing: {name} needs replicas >= 1")

    @classmethod
    def of(
        cls, resource: str | Sequence[str] = WHOLE_GPU, mig: bool = True, time_slicing: Mapping[str, int] | None = None
    ) -> GpuUnits:
        """From the presets' arguments: ``resource`` one whole-GPU resource or several (vendors)."""
        whole = (resource,) if isinstance(resource, str) else tuple(resource)
        return cls(tuple(dict.fromkeys(whole)), mig, dict(time_slicing or {}))

    def counted(self) -> tuple[str, ...]:
        """The resources counted by name (MIG profiles aside), whole GPUs first."""
        return tuple(dict.fromkeys([*self.whole, *self.time_slicing]))

    def share(self, resource: str) -> Fraction | None:
        """Physical GPUs one unit of ``resource`` stands for; None when it is not a GPU resource here.
        Raises ValueError for a MIG resource of unknown shape (while MIG counts)."""
        if resource in self.time_slicing:
            return Fraction(1, self.time_slicing[resource])
        if resource in self.whole:
            return Fraction(1)
        if self.mig and resource.startswith(MIG_PREFIX):
            return mig_share(resource)
        return None

    def gpus(self, amounts: Mapping[str, float]) -> float:
        """Physical GPUs of ``amounts`` (resource -> units); resources that are not GPUs count 0."""
        total = 0.0
        for name, amount in amounts.items():
            share = self.share(name)
            if share is not None:
                total += amount * float(share)
        return total

    def merged(self, other: GpuUnits) -> GpuUnits:
        """Both definitions at once; refuses a resource they count differently."""
        for name in set(self.counted()) & set(other.counted()):
            if self.share(name) != other.share(name):
                raise ValueError(f"{name} counts {self.share(name)} GPU in one signal, {other.share(name)} in another")
        if self.mig != other.mig and (self.mig or other.mig):
            raise ValueError("mig is on in one GPU signal and off in another")
        return GpuUnits(
            tuple(dict.fromkeys([*self.whole, *other.whole])), self.mig, {**self.time_slicing, **other.time_slicing}
        )
