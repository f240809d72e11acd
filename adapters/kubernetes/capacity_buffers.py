"""SIG Autoscaling CapacityBuffers (``autoscaling.x-k8s.io``) and the PodTemplates of their chunks.

Raw JSON throughout (``_preload_content=False`` and ``read_json``): kubernetes-asyncio has no models
for the CRD, and its generated client answers None for a 201 it cannot type. Updates are merge
patches carrying ``metadata.resourceVersion``, so kube-apiserver refuses a write based on a stale
read with 409 Conflict (``BufferConflict``) instead of overwriting someone else's change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, cast

from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi, V1PodTemplate

from adapters.kubernetes.client import KubeError, KubeNotFound, read_json
from adapters.kubernetes.watch import WatchedResource

GROUP = "autoscaling.x-k8s.io"
PLURAL = "capacitybuffers"
# Preferred first: v1beta1 is the SIG's current version; Cluster Autoscaler still serves the
# deprecated v1alpha1, and older installations serve only that.
VERSIONS = ("v1beta1", "v1alpha1")
MERGE_PATCH = "application/merge-patch+json"  # the client would send a dict as a JSON patch
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-autoscaler"}


class BufferConflict(KubeError):
    """409 Conflict: the buffer changed since it was read; read it again and retry."""


async def served_version(api: ApiClient) -> str | None:
    """The preferred version of ``autoscaling.x-k8s.io`` that serves capacitybuffers; None if none does."""
    custom = CustomObjectsApi(api)
    for version in VERSIONS:
        try:
            document = await read_json(
                custom.get_api_resources(GROUP, version, _preload_content=False), f"discover {GROUP}/{version}"
            )
        except KubeNotFound:
            continue
        if any(resource.get("name") == PLURAL for resource in document.get("resources") or []):
            return version
    return None


async def read_buffer(api: ApiClient, version: str, namespace: str, name: str) -> dict[str, Any] | None:
    """The CapacityBuffer, or None when it does not exist."""
    custom = CustomObjectsApi(api)
    try:
        found: dict[str, Any] = await read_json(
            custom.get_namespaced_custom_object(GROUP, version, namespace, PLURAL, name, _preload_content=False),
            f"get capacitybuffer {namespace}/{name}",
        )
    except KubeNotFound:
        return None
    return found


async def create_buffer(
    api: ApiClient, version: str, namespace: str, name: str, template: str, replicas: int
) -> dict[str, Any]:
    """A new CapacityBuffer of ``replicas`` chunks shaped by the PodTemplate ``template``."""
    body = {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "spec": {"podTemplateRef": {"name": template}, "replicas": replicas},
    }
    custom = CustomObjectsApi(api)
    created: dict[str, Any] = await _conflicts(
        read_json(
            custom.create_namespaced_custom_object(GROUP, version, namespace, PLURAL, body, _preload_content=False),
            f"create capacitybuffer {namespace}/{name}",
        )
    )
    return created


async def patch_replicas(
    api: ApiClient, version: str, namespace: str, name: str, replicas: int, resource_version: str
) -> dict[str, Any]:
    """Set ``spec.replicas``, only if the buffer is still at ``resource_version`` (else BufferConflict)."""
    body = {"metadata": {"resourceVersion": resource_version}, "spec": {"replicas": replicas}}
    custom = CustomObjectsApi(api)
    # The generated signature does not list _content_type, which the client honours (its **kwargs).
    options: dict[str, Any] = {"_content_type": MERGE_PATCH, "_preload_content": False}
    call = custom.patch_namespaced_custom_object(GROUP, version, namespace, PLURAL, name, body, **options)
    patched: dict[str, Any] = await _conflicts(read_json(call, f"patch capacitybuffer {namespace}/{name}"))
    return patched


async def _conflicts(call: Any) -> Any:
    try:
        return await call
    except KubeError as error:
        if error.status == 409:
            raise BufferConflict(str(error), status=409) from None
        raise


def chunk_template(
    namespace: str,
    name: str,
    *,
    gpus: int,
    gpu_resource: str,
    node_selector: Mapping[str, str],
    tolerations: Sequence[Mapping[str, str]],
) -> dict[str, Any]:
    """A PodTemplate of one chunk: one pod requesting ``gpus`` GPUs on the pool's nodes.

    The autoscaler never runs it (its pods are virtual); the image is only there because a PodSpec
    needs one, and pause does nothing if someone does run it.
    """
    container = {
        "name": "chunk",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {gpu_resource: str(gpus)}, "limits": {gpu_resource: str(gpus)}},
    }
    spec: dict[str, Any] = {"containers": [container]}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = [dict(toleration) for toleration in tolerations]
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "template": {"metadata": {"labels": dict(MANAGED_BY)}, "spec": spec},
    }


async def ensure_pod_template(api: ApiClient, template: Mapping[str, Any]) -> bool:
    """Create the PodTemplate unless one of its name exists (an existing one is left as it is); True if created."""
    core = CoreV1Api(api)
    namespace, name = template["metadata"]["namespace"], template["metadata"]["name"]
    try:
        await read_json(
            core.read_namespaced_pod_template(name, namespace, _preload_content=False),
            f"get podtemplate {namespace}/{name}",
        )
        return False
    except KubeNotFound:
        pass
    body = cast("V1PodTemplate", dict(template))  # the client sends a dict body as it is (raw JSON, as read)
    try:
        await read_json(
            core.create_namespaced_pod_template(namespace, body, _preload_content=False),
            f"create podtemplate {namespace}/{name}",
        )
    except KubeError as error:
        if error.status == 409:  # created meanwhile (another replica): it exists, which is all we need
            return False
        raise
    return True


def buffer_resource(api: ApiClient, version: str, namespace: str) -> WatchedResource:
    """The CapacityBuffers of one namespace, to list and watch (their status is read back)."""
    custom = CustomObjectsApi(api)
    return WatchedResource(
        f"capacitybuffers/{namespace}",
        partial(custom.list_namespaced_custom_object, GROUP, version, namespace, PLURAL),
    )
