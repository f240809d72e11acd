"""GPUForecast objects (``manifests/base/crd-gpuforecasts.yaml``) in the API: written and watched.

The writer keeps the resourceVersion of each object it wrote, so a steady update is one PUT of the
status subresource; a 409 Conflict (someone else wrote it since) is retried from a fresh read, a
missing object is created first. What goes into the objects is ``autoscaler.replication.forecast_objects``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from kubernetes_asyncio.client import ApiClient, CustomObjectsApi

from adapters.kubernetes.client import KubeError, KubeNotFound, read_json
from adapters.kubernetes.watch import WatchedResource

log = logging.getLogger(__name__)

GROUP = "gpu-autoscaler.io"
VERSION = "v1alpha1"
PLURAL = "gpuforecasts"
KIND = "GPUForecast"
API_VERSION = f"{GROUP}/{VERSION}"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-autoscaler"}


def gpuforecast_resource(api: ApiClient, namespace: str) -> WatchedResource:
    """The GPUForecasts of one namespace, for a ``WatchGroup``."""
    custom = CustomObjectsApi(api)
    return WatchedResource(PLURAL, partial(custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL))


class WriteConflict(KubeError):
    """Every attempt met a 409 Conflict: another writer kept changing the object."""


@dataclass
class WriteCounts:
    """What the writer did, for /metrics and the tests."""

    creates: int = 0
    updates: int = 0
    reads: int = 0
    conflicts: int = 0


class ForecastWriter:
    """Writes GPUForecast objects of one namespace: spec on create, status through its subresource."""

    def __init__(self, api: ApiClient, namespace: str, *, attempts: int = 3) -> None:
        self._custom = CustomObjectsApi(api)
        self.namespace = namespace
        self.attempts = attempts
        self.counts = WriteCounts()
        # name -> the resourceVersion this writer last saw; None: read before writing.
        self._versions: dict[str, str] = {}

    async def write(self, name: str, spec: Mapping[str, Any], status: Mapping[str, Any]) -> None:
        """Make the object's status ``status`` (creating the object with ``spec`` if it is missing).

        Raises ``KubeError`` (``WriteConflict`` after ``attempts`` conflicts); the caller counts it.
        """
        for attempt in range(1, self.attempts + 1):
            try:
                version = self._versions.get(name) or await self._read_or_create(name, spec)
                body = {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "metadata": {"name": name, "namespace": self.namespace, "resourceVersion": version},
                    "spec": dict(spec),
                    "status": dict(status),
                }
                written = await read_json(
                    self._custom.replace_namespaced_custom_object_status(
                        GROUP, VERSION, self.namespace, PLURAL, name, body, _preload_content=False
                    ),
                    f"update {PLURAL} {self.namespace}/{name} status",
                )
            except KubeError as error:
                self._versions.pop(name, None)  # whatever happened, read afresh next time
                if error.status != 409:  # a conflict on create: another writer created it first
                    raise
                self.counts.conflicts += 1
                log.info("%s/%s changed since it was read (attempt %d): reading it again", PLURAL, name, attempt)
                continue
            self.counts.updates += 1
            self._versions[name] = str(written["metadata"]["resourceVersion"])
            return
        raise WriteConflict(f"update {PLURAL} {self.namespace}/{name}: {self.attempts} conflicts in a row", status=409)

    async def _read_or_create(self, name: str, spec: Mapping[str, Any]) -> str:
        what = f"{PLURAL} {self.namespace}/{name}"
        try:
            self.counts.reads += 1
            current = await read_json(
                self._custom.get_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, name, _preload_content=False
                ),
                f"get {what}",
            )
        except KubeNotFound:
            body = {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "metadata": {"name": name, "namespace": self.namespace, "labels": MANAGED_BY},
                "spec": dict(spec),
            }
            current = await read_json(
                self._custom.create_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, body, _preload_content=False
                ),
                f"create {what}",
            )
            self.counts.creates += 1
        return str(current["metadata"]["resourceVersion"])
