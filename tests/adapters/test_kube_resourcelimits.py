"""GPU ceilings: NodePool limits and ResourceQuotas, read through the fake API server."""

from __future__ import annotations

from adapters.kubernetes.resourcelimits import (
    GpuQuota,
    gpu_quotas,
    nodepool_gpu_limit,
    read_gpu_quotas,
    read_nodepool_gpu_limits,
    tightest_quota,
)
from tests import fakekube, kube_objects

fake_kube = fakekube.fake_kube
kube_api = fakekube.kube_api


def nodepool(name: str, limits: dict | None) -> dict:
    return kube_objects.nodepool(name, limits=limits)


def quota(name: str, hard: dict, used: dict | None = None, namespace: str = "ml") -> dict:
    obj: dict = {"metadata": {"name": name, "namespace": namespace}, "spec": {"hard": hard}}
    if used is not None:
        obj["status"] = {"hard": hard, "used": used}
    return obj


def test_nodepool_limit():
    assert nodepool_gpu_limit(nodepool("a", {"cpu": "1000", "nvidia.com/gpu": "16"})) == 16
    assert nodepool_gpu_limit(nodepool("a", {"cpu": "1000"})) is None
    assert nodepool_gpu_limit(nodepool("a", None)) is None


def test_quota_entries_and_the_tightest():
    first = gpu_quotas(quota("q1", {"requests.nvidia.com/gpu": "8", "cpu": "10"}, {"requests.nvidia.com/gpu": "6"}))
    second = gpu_quotas(quota("q2", {"requests.nvidia.com/gpu": "4"}))
    assert first == [GpuQuota("ml", "q1", "requests.nvidia.com/gpu", 8, 6)]
    assert first[0].remaining == 2
    assert second[0].used is None
    assert tightest_quota(first + second) == first[0]
    mig = gpu_quotas(quota("q3", {"requests.nvidia.com/mig-1g.10gb": "7"}))
    assert [q.resource for q in mig] == ["requests.nvidia.com/mig-1g.10gb"]
    assert tightest_quota(mig) is None  # another resource
    assert tightest_quota([]) is None


async def test_read_nodepool_limits(fake_kube, kube_api):
    fake_kube.add("nodepools", nodepool("a100", {"nvidia.com/gpu": "32"}))
    fake_kube.add("nodepools", nodepool("cpu", {"cpu": "500"}))
    assert await read_nodepool_gpu_limits(kube_api) == {"a100": 32, "cpu": None}


async def test_read_nodepool_limits_without_karpenter(fake_kube, kube_api):
    fake_kube.installed.discard("nodepools")
    assert await read_nodepool_gpu_limits(kube_api) is None


async def test_read_quotas_of_a_namespace(fake_kube, kube_api):
    fake_kube.add("resourcequotas", quota("gpus", {"requests.nvidia.com/gpu": "8"}, {"requests.nvidia.com/gpu": "3"}))
    fake_kube.add("resourcequotas", quota("gpus", {"requests.nvidia.com/gpu": "1"}, namespace="other"))
    fake_kube.add("resourcequotas", quota("cpu", {"cpu": "8"}))
    assert await read_gpu_quotas(kube_api, "ml") == [GpuQuota("ml", "gpus", "requests.nvidia.com/gpu", 8, 3)]
    assert await read_gpu_quotas(kube_api, "empty") == []
