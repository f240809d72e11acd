"""The Kueue example (manifests/examples/kueue) holds together: its objects pass Kueue's vendored CRDs
(CEL rules included), the Job's queue leads through its LocalQueue and ClusterQueue to a flavor of the
examples' GPU NodePool, and the Workload Kueue makes for the Job counts there as the service counts it
(adapters/kubernetes/kueue_demand.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from adapters.gpu_units import GpuUnits
from adapters.kubernetes import kueue
from adapters.kubernetes.kueue_demand import KueueState, queued_gpus
from tests import kube_schemas
from tests.manifests.test_manifests import one

pytestmark = pytest.mark.kubectl
EXAMPLE = "examples/kueue"


def test_the_cluster_queue_is_checked_against_kueues_crd():
    queue = one(EXAMPLE, "ClusterQueue", "gpu")
    kube_schemas.validate("kueue.x-k8s.io", "ClusterQueue", queue)
    uncovered = copy.deepcopy(queue)  # a flavor's resources must be the group's covered resources
    uncovered["spec"]["resourceGroups"][0]["flavors"][0]["resources"].pop()
    misspelt = copy.deepcopy(queue)
    misspelt["spec"]["queueingStrategy"] = "Fifo"
    for refused in (uncovered, misspelt):
        with pytest.raises(kube_schemas.Refused):
            kube_schemas.validate("kueue.x-k8s.io", "ClusterQueue", refused)


def workload_for(job: dict[str, Any]) -> dict[str, Any]:
    """The Workload Kueue makes for a batch Job: one pod set of ``parallelism`` pods of its template."""
    metadata = job["metadata"]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": f"job-{metadata['name']}", "namespace": metadata["namespace"]},
        "spec": {
            "queueName": metadata["labels"][kueue.QUEUE_NAME_LABEL],
            "podSets": [{"name": "main", "count": job["spec"]["parallelism"], "template": job["spec"]["template"]}],
        },
    }


def test_the_jobs_workload_counts_16_gpus_in_the_example_gpu_pool():
    job = one(EXAMPLE, "Job", "train")
    assert job["spec"]["suspend"] is True  # Kueue starts it
    local_queue = one(EXAMPLE, "LocalQueue", job["metadata"]["labels"][kueue.QUEUE_NAME_LABEL])
    assert local_queue["metadata"]["namespace"] == job["metadata"]["namespace"]
    cluster_queue = one(EXAMPLE, "ClusterQueue", local_queue["spec"]["clusterQueue"])
    flavor = one(EXAMPLE, "ResourceFlavor")
    pool = one("examples", "NodePool", flavor["spec"]["nodeLabels"]["karpenter.sh/nodepool"])
    workload = workload_for(job)
    kube_schemas.validate("kueue.x-k8s.io", "Workload", workload)  # the Job's template is one a Workload holds

    ready = {**pool, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    state = KueueState(
        {"training/job-train": workload},
        {"training/training": local_queue},
        {"gpu": cluster_queue},
        {"gpu": flavor},
    )
    (counted,) = queued_gpus(state, lambda w: False, GpuUnits(), [ready])
    assert (counted.gpus, counted.choice.pool, counted.state, counted.flavor) == (16, "gpu", "pending", "gpu")
    assert counted.describe() == "Kueue Workload pending in ClusterQueue gpu, flavor gpu"
