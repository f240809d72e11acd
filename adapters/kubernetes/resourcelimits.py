"""Ceilings on GPUs: Karpenter NodePool ``spec.limits`` and namespace ResourceQuotas.

Forecast demand above these cannot be provisioned anyway; the service shows them beside its values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi

from adapters.gpu_units import WHOLE_GPU
from adapters.kubernetes.client import KubeError, KubeNotFound, read_json
from adapters.kubernetes.gpu_requests import is_gpu_resource, parse_quantity
from adapters.kubernetes.watch import WatchedResource

# Extended resources can only be limited by quota on requests (there is no overcommit for them).
QUOTA_GPU_KEY = f"requests.{WHOLE_GPU}"


@dataclass(frozen=True)
class GpuQuota:
    """One ResourceQuota's GPU figures (``requests.<gpu resource>``); None where it sets none."""

    namespace: str
    name: str
    resource: str  # e.g. "requests.nvidia.com/gpu"
    hard: float | None
    used: float | None

    @property
    def remaining(self) -> float | None:
        if self.hard is None:
            return None
        return max(0.0, self.hard - (self.used or 0.0))


def _quantity_or_none(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return parse_quantity(value)
    except ValueError as exc:
        raise KubeError(f"unreadable quantity {value!r}") from exc


def nodepool_gpu_limit(nodepool: Mapping[str, Any], resource: str = WHOLE_GPU) -> float | None:
    """``spec.limits[resource]`` of a karpenter.sh/v1 NodePool; None when the pool has no such limit."""
    limits = (nodepool.get("spec") or {}).get("limits") or {}
    return _quantity_or_none(limits.get(resource))


def gpu_quotas(resource_quota: Mapping[str, Any]) -> list[GpuQuota]:
    """The GPU entries (``requests.nvidia.com/gpu``, MIG, shared) of one ResourceQuota object."""
    metadata = resource_quota.get("metadata") or {}
    hard = (resource_quota.get("spec") or {}).get("hard") or {}
    status = resource_quota.get("status") or {}
    status_hard = status.get("hard") or {}
    used = status.get("used") or {}
    found = []
    for key in sorted(set(hard) | set(status_hard)):
        prefix, _, resource = key.partition(".")
        if prefix != "requests" or not is_gpu_resource(resource):
            continue
        found.append(
            GpuQuota(
                namespace=str(metadata.get("namespace", "")),
                name=str(metadata.get("name", "")),
                resource=key,
                hard=_quantity_or_none(hard.get(key, status_hard.get(key))),
                used=_quantity_or_none(used.get(key)),
            )
        )
    return found


def tightest_quota(quotas: Iterable[GpuQuota], resource: str = QUOTA_GPU_KEY) -> GpuQuota | None:
    """Of several quotas on one resource, the one leaving the fewest GPUs (all of them apply)."""
    limited = [q for q in quotas if q.resource == resource and q.remaining is not None]
    return min(limited, key=lambda q: q.remaining or 0.0, default=None)


def nodepool_resource(api: ApiClient) -> WatchedResource:
    """The cluster-scoped karpenter.sh/v1 NodePools; the list answers 404 where Karpenter is absent."""
    custom = CustomObjectsApi(api)
    return WatchedResource("nodepools", partial(custom.list_cluster_custom_object, "karpenter.sh", "v1", "nodepools"))


async def read_nodepool_gpu_limits(api: ApiClient, resource: str = WHOLE_GPU) -> dict[str, float | None] | None:
    """GPU limit per NodePool name (None: unlimited); None when Karpenter is not installed (404)."""
    custom = CustomObjectsApi(api)
    try:
        document = await read_json(
            custom.list_cluster_custom_object("karpenter.sh", "v1", "nodepools", _preload_content=False),
            "list nodepools",
        )
    except KubeNotFound:
        return None
    return {
        str((pool.get("metadata") or {}).get("name", "")): nodepool_gpu_limit(pool, resource)
        for pool in document.get("items") or []
    }


async def read_gpu_quotas(api: ApiClient, namespace: str) -> list[GpuQuota]:
    """The GPU quotas of a namespace (every ResourceQuota there with a GPU entry)."""
    core = CoreV1Api(api)
    document = await read_json(
        core.list_namespaced_resource_quota(namespace, _preload_content=False),
        f"list resourcequotas in {namespace}",
    )
    return [quota for item in document.get("items") or [] for quota in gpu_quotas(item)]
