"""A fake Kubernetes API server served by aiohttp inside the test process.

It speaks the real JSON wire format, so tests drive the real kubernetes-asyncio client against it:

- lists with ``metadata.resourceVersion`` (and ``limit``/``continue`` paging, ``fieldSelector``);
- watches (``?watch=true&resourceVersion=N&allowWatchBookmarks=true&timeoutSeconds=S``): one JSON
  event per line, ADDED/MODIFIED/DELETED/BOOKMARK, and ERROR with a 410 ``Expired`` Status when the
  resourceVersion was compacted away (a list with a too-old resourceVersion gets HTTP 410);
- creation (POST) of the resources below, validated as kube-apiserver validates them
  (``tests/kube_schemas.py``: the vendored upstream CRDs for NodePools, NodeClaims and Kueue's
  objects, Kubernetes' own schemas for Pods, CronJobs and Jobs): 422 Invalid (or 400 for unknown fields) with a Status;
  ``add`` and ``modify`` check the same and raise ``Refused``, so fixtures are objects a cluster accepts;
- field selectors on lists and watches (``status.phase=Pending``): a watched object that stops
  matching arrives as DELETED, one that starts matching as ADDED, as the API server sends them;
- TokenReview and SubjectAccessReview (POST), answered from ``tokens`` and ``sar_rule``;
  SelfSubjectAccessReview (POST, schema-checked), answered by ``ssar_rule`` for the caller ``caller``;
- fault injection: ``fail(...)`` for statuses (429 with Retry-After, 5xx), delays and dropped
  connections; ``cut_watches``/``expire_watches``/``end_watches`` for open streams; ``compact()``.

Objects live in memory under one cluster-wide, monotonically increasing resourceVersion. ``add``,
``modify`` and ``delete`` are plain (sync) methods that notify the open watches.

Usage (fixtures ``fake_kube`` and ``kube_api`` below)::

    async def test_x(fake_kube, kube_api):
        fake_kube.add("cronjobs", {"metadata": {"name": "train", "namespace": "ml"}, "spec": {...}})
        fake_kube.tokens = {"tok": {"username": "alice", "groups": ["dev"]}}
        fake_kube.sar_rule = lambda spec: spec["user"] == "alice"
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import itertools
import json
import re
import ssl
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from kubernetes_asyncio.client import ApiClient

from adapters.kubernetes.client import KubeClientSettings, create_api_client
from tests.fakekube_writes import (
    APPLY_PATCH,
    JSON_PATCH,
    MERGE_PATCH,
    PATCH_TYPES,
    STRATEGIC_MERGE_PATCH,
    PatchError,
    apply_merge,
    conflict_message,
    discovery_resources,
    json_patch,
    kept_apart,
    merge_patch,
    spec_changed,
)
from tests.kube_schemas import Refused, core_validator, validate


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    other_versions: tuple[str, ...] = ()  # served besides ``version`` (the storage version)
    status_subresource: bool = False
    custom: bool = False  # a custom resource: updates need a resourceVersion, generation counts spec changes

    @property
    def api_version(self) -> str:
        return self.api_version_of(self.version)

    def api_version_of(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    @property
    def versions(self) -> tuple[str, ...]:
        return (self.version, *self.other_versions)


GROUP_KUEUE = "kueue.x-k8s.io"

RESOURCE_TYPES: dict[str, ResourceType] = {
    rt.plural: rt
    for rt in (
        ResourceType("batch", "v1", "cronjobs", "CronJob", True),
        ResourceType("batch", "v1", "jobs", "Job", True),
        ResourceType("karpenter.sh", "v1", "nodeclaims", "NodeClaim", False, status_subresource=True, custom=True),
        ResourceType("karpenter.sh", "v1", "nodepools", "NodePool", False, status_subresource=True, custom=True),
        ResourceType(
            "autoscaling.x-k8s.io",
            "v1beta1",
            "capacitybuffers",
            "CapacityBuffer",
            True,
            other_versions=("v1alpha1",),
            status_subresource=True,
            custom=True,
        ),
        ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
        # The project's own CRD (manifests/base/crd-gpuforecasts.yaml): what replicas publish.
        ResourceType(
            "gpu-autoscaler.io", "v1alpha1", "gpuforecasts", "GPUForecast", True, status_subresource=True, custom=True
        ),
        ResourceType("", "v1", "podtemplates", "PodTemplate", True),
        ResourceType("apiregistration.k8s.io", "v1", "apiservices", "APIService", False, status_subresource=True),
        ResourceType(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            False,
            status_subresource=True,
        ),
        ResourceType("", "v1", "resourcequotas", "ResourceQuota", True),
        ResourceType("", "v1", "configmaps", "ConfigMap", True),
        ResourceType("", "v1", "pods", "Pod", True),
        # Dynamic Resource Allocation, GA in Kubernetes 1.34.
        ResourceType("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True, status_subresource=True),
        ResourceType("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
        ResourceType("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False),
        ResourceType("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False),
        # Kueue (v0.19): v1beta2 stored, v1beta1 still served.
        *(
            ResourceType(
                GROUP_KUEUE, "v1beta2", plural, kind, scoped, ("v1beta1",), status_subresource=sub, custom=True
            )
            for plural, kind, scoped, sub in (
                ("workloads", "Workload", True, True),
                ("localqueues", "LocalQueue", True, True),
                ("clusterqueues", "ClusterQueue", False, True),
                ("resourceflavors", "ResourceFlavor", False, False),
                ("admissionchecks", "AdmissionCheck", False, True),
            )
        ),
    )
}


@dataclass(frozen=True)
class ApiPath:
    """``/apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}/{subresource}``."""

    group: str
    version: str
    namespace: str | None
    plural: str
    name: str | None
    subresource: str | None


def _as_version(obj: Mapping[str, Any], api_version: str) -> dict[str, Any]:
    """A copy of a stored object as a client of ``api_version`` reads it (the versions the fake
    serves for one resource share a schema, so conversion is the apiVersion alone)."""
    seen = copy.deepcopy(dict(obj))
    seen["apiVersion"] = api_version
    return seen


def _typed_body(body: Any, rt: ResourceType, api_version: str) -> dict[str, Any] | None:
    """A create or update body; kind and apiVersion default to the URL's (as the API server decodes
    built-in kinds), and a body naming another kind or version is refused (None)."""
    if not isinstance(body, dict):
        return None
    body.setdefault("kind", rt.kind)
    body.setdefault("apiVersion", api_version)
    return body if (body["kind"], body["apiVersion"]) == (rt.kind, api_version) else None


def _resource_name(rt: ResourceType) -> str:
    return f"{rt.plural}.{rt.group}" if rt.group else rt.plural


FAKE_ADMIN_TOKEN = "fake-admin-token"  # what the kubeconfig's user sends; the fake checks it
REQUEST_HEADER_CONFIGMAP = ("kube-system", "extension-apiserver-authentication")

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "AlreadyExists",
    415: "UnsupportedMediaType",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_object(code: int, message: str, reason: str | None = None) -> dict[str, Any]:
    """A metav1.Status as the API server sends it for failures."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or _REASONS.get(code, "Unknown"),
        "code": code,
    }


def status_response(code: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.json_response(status_object(code, message), status=code, headers=headers)


FieldSelector = list[tuple[str, bool, str]]  # (dotted field, equal?, value), all must hold


def parse_field_selector(text: str | None) -> FieldSelector:
    """``status.phase=Pending,spec.nodeName!=`` (``=``, ``==``, ``!=``), as the API server reads it."""
    selector: FieldSelector = []
    for part in filter(None, (text or "").split(",")):
        path, operator, value = re.split(r"(!=|==|=)", part, maxsplit=1)
        selector.append((path.strip(), operator != "!=", value.strip()))
    return selector


def field_selector_matches(selector: FieldSelector, obj: Mapping[str, Any]) -> bool:
    for path, equal, value in selector:
        found: Any = obj
        for part in path.split("."):
            found = found.get(part) if isinstance(found, Mapping) else None
        if (str(found or "") == value) is not equal:
            return False
    return True


def _event_through(
    selector: FieldSelector, event_type: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None
) -> str | None:
    """How a watch with ``selector`` sees a change: an object entering the selection is ADDED, one
    leaving it DELETED (kube-apiserver's watch cache does the same); None when it never matched."""
    now = field_selector_matches(selector, obj)
    before = old is not None and field_selector_matches(selector, old)
    if event_type == "MODIFIED" and now != before:
        return "ADDED" if now else "DELETED"
    return event_type if now else None


def _query_bool(value: str | None) -> bool:
    # As Go's strconv.ParseBool: kubernetes-asyncio sends Python's "True".
    return (value or "").lower() in ("1", "t", "true")


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Fault:
    """One injected failure; the first fault matching a request (and with hits left) applies."""

    status: int | None = None  # answer with this status and a Status body
    retry_after: float | None = None  # Retry-After header (seconds) with ``status``
    delay_s: float = 0.0  # wait this long before answering (or failing)
    disconnect: bool = False  # drop the connection without an answer
    method: str | None = None  # match GET, POST, ... (None: any)
    plural: str | None = None  # match this resource, e.g. "cronjobs", "tokenreviews" (None: any)
    watch: bool | None = None  # True: only watches, False: only non-watch requests, None: both
    times: int | None = 1  # requests it applies to; None: forever
    user_agent: str | None = None  # match one client's requests (its User-Agent header; None: any)
    hits: int = 0

    def matches(self, method: str, plural: str | None, watch: bool, user_agent: str = "") -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.user_agent is not None and self.user_agent != user_agent:
            return False
        if self.method is not None and self.method != method:
            return False
        if self.plural is not None and self.plural != plural:
            return False
        return self.watch is None or self.watch == watch


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    at: float  # loop time when the request arrived (fast-forwarded under looptime)
    plural: str | None
    watch: bool
    status: int | None = None  # None while a watch is open or when the connection was dropped


@dataclass
class _Watcher:
    resource: ResourceType
    namespace: str | None
    bookmarks: bool
    selector: FieldSelector
    api_version: str
    user_agent: str = ""  # the client's, so that one client's streams can be cut (a partition)
    queue: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)


class FakeKube:
    """The fake API server. Start with ``await start()``; ``url`` and ``kubeconfig_path`` then work."""

    def __init__(
        self,
        workdir: Path,
        *,
        bearer_token: str = FAKE_ADMIN_TOKEN,
        tls: tuple[Path, Path, Path] | None = None,
    ) -> None:
        """``tls``: (serving cert, key, CA that issued it) to serve HTTPS; the kubeconfig trusts the CA."""
        self.workdir = workdir
        self.tls = tls
        self.bearer_token = bearer_token
        self.require_auth = True  # 401 unless the client sends ``Authorization: Bearer <bearer_token>``
        self.installed: set[str] = set(RESOURCE_TYPES)  # drop "nodeclaims" to act as if Karpenter is absent
        # The versions served per resource, e.g. ``{"capacitybuffers": ("v1alpha1",)}`` for a cluster
        # whose Cluster Autoscaler still serves only the deprecated version.
        self.served_versions: dict[str, tuple[str, ...]] = {p: rt.versions for p, rt in RESOURCE_TYPES.items()}
        self.resource_version = 1
        self.compacted_rv = 0  # watches/lists from an older resourceVersion get 410 Gone
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {p: {} for p in RESOURCE_TYPES}
        # (rv, plural, type, object, the object before the change), for watches from an old RV.
        self._history: list[tuple[int, str, str, dict[str, Any], dict[str, Any] | None]] = []
        self._watchers: list[_Watcher] = []
        self._watchers_changed = asyncio.Condition()
        self.faults: list[Fault] = []
        self.requests: list[RecordedRequest] = []
        # TokenReview: token -> {"username", "uid"?, "groups"?, "extra"?, "audiences"?}; others are rejected.
        self.tokens: dict[str, dict[str, Any]] = {}
        self.token_requests: list[dict[str, Any]] = []
        # SubjectAccessReview: spec -> allowed? (default: deny everything); every spec is recorded.
        self.sar_rule: Callable[[Mapping[str, Any]], bool] = lambda spec: False
        self.sar_requests: list[dict[str, Any]] = []
        # SelfSubjectAccessReview: who the kubeconfig's bearer token is, and a rule given a
        # SubjectAccessReview-like spec (``resourceAttributes`` plus the caller's ``user``/``groups``).
        # Default: allow everything, as for the cluster-admin a kubeconfig usually names.
        self.caller: dict[str, Any] = {"username": "fake-admin", "groups": ["system:masters", "system:authenticated"]}
        self.ssar_rule: Callable[[Mapping[str, Any]], bool] = lambda spec: True
        self.ssar_requests: list[dict[str, Any]] = []
        # Failure of both review endpoints: None, "unreachable" (connection dropped), "error" or "500",
        # "forbidden" (403: the service lacks system:auth-delegator), "timeout" (never answers).
        self.fail_mode: str | None = None
        self.url = ""
        self.kubeconfig_path = workdir / "fake-kubeconfig.yaml"
        self._runner: web.AppRunner | None = None
        self._name_counter = itertools.count(1)

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1, access_log=None)
        await self._runner.setup()
        ssl_context = None
        if self.tls is not None:
            ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ssl_context.load_cert_chain(self.tls[0], self.tls[1])
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=ssl_context)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
        self.write_kubeconfig(self.kubeconfig_path)

    async def stop(self) -> None:
        self.end_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def write_kubeconfig(self, path: Path, *, token: str | None = None) -> Path:
        cluster: dict[str, str] = {"server": self.url}
        if self.tls is not None:
            cluster["certificate-authority"] = str(self.tls[2])
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": cluster}],
            "users": [{"name": "fake", "user": {"token": token or self.bearer_token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(document))
        return path

    async def api_client(self) -> ApiClient:
        """A kubernetes-asyncio ApiClient configured from this server's kubeconfig (close it after)."""
        return await create_api_client(KubeClientSettings(kubeconfig_path=self.kubeconfig_path))

    # ----------------------------------------------------------------- objects

    def _next_rv(self) -> int:
        self.resource_version += 1
        return self.resource_version

    def _key(self, rt: ResourceType, obj: Mapping[str, Any]) -> tuple[str, str]:
        metadata = obj["metadata"]
        return (metadata.get("namespace", "") if rt.namespaced else "", metadata["name"])

    def add(self, plural: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create an object (fills kind, apiVersion, uid, creationTimestamp, namespace, RV); returns it."""
        rt = RESOURCE_TYPES[plural]
        stored = copy.deepcopy(dict(obj))
        stored.setdefault("kind", rt.kind)
        stored.setdefault("apiVersion", rt.api_version)
        metadata = stored.setdefault("metadata", {})
        metadata.setdefault("name", f"{plural}-{next(self._name_counter)}")
        if rt.namespaced:
            metadata.setdefault("namespace", "default")
        else:
            metadata.pop("namespace", None)
        metadata.setdefault("uid", str(uuid.uuid4()))
        metadata.setdefault("creationTimestamp", rfc3339(datetime.now(UTC)))
        key = self._key(rt, stored)
        if key in self._objects[plural]:
            raise ValueError(f"{plural} {key} already exists")
        if rt.custom:
            metadata.setdefault("generation", 1)
        validate(rt.group, rt.kind, stored)
        return self._store(rt, key, stored, "ADDED")

    def modify(self, plural: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Replace an existing object (matched by namespace/name), keeping its uid and creation time."""
        rt = RESOURCE_TYPES[plural]
        stored = copy.deepcopy(dict(obj))
        stored.setdefault("kind", rt.kind)
        stored.setdefault("apiVersion", rt.api_version)
        metadata = stored.setdefault("metadata", {})
        if rt.namespaced:
            metadata.setdefault("namespace", "default")
        key = self._key(rt, stored)
        old = self._objects[plural].get(key)
        if old is None:
            raise KeyError(f"{plural} {key} does not exist")
        metadata.setdefault("uid", old["metadata"]["uid"])
        metadata.setdefault("creationTimestamp", old["metadata"]["creationTimestamp"])
        if rt.custom:
            generation = int(old["metadata"].get("generation", 1))
            metadata["generation"] = generation + 1 if spec_changed(old, stored) else generation
        validate(rt.group, rt.kind, stored)
        return self._store(rt, key, stored, "MODIFIED")

    def delete(self, plural: str, name: str, namespace: str = "default") -> dict[str, Any]:
        rt = RESOURCE_TYPES[plural]
        key = (namespace if rt.namespaced else "", name)
        obj = self._objects[plural].pop(key)
        obj = copy.deepcopy(obj)
        rv = self._next_rv()
        obj["metadata"]["resourceVersion"] = str(rv)
        self._record(rv, rt, "DELETED", obj, None)
        return obj

    def get(self, plural: str, name: str, namespace: str = "default") -> dict[str, Any] | None:
        rt = RESOURCE_TYPES[plural]
        return self._objects[plural].get((namespace if rt.namespaced else "", name))

    def items(self, plural: str) -> list[dict[str, Any]]:
        return list(self._objects[plural].values())

    def _store(self, rt: ResourceType, key: tuple[str, str], obj: dict[str, Any], event_type: str) -> dict[str, Any]:
        rv = self._next_rv()
        obj["metadata"]["resourceVersion"] = str(rv)
        old = self._objects[rt.plural].get(key)
        self._objects[rt.plural][key] = obj
        self._record(rv, rt, event_type, obj, old)
        return copy.deepcopy(obj)

    def _record(
        self, rv: int, rt: ResourceType, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        snapshot = copy.deepcopy(obj)
        self._history.append((rv, rt.plural, event_type, snapshot, old))
        namespace = snapshot["metadata"].get("namespace")
        for watcher in self._watchers:
            if watcher.resource is rt and watcher.namespace in (None, namespace):
                seen_as = _event_through(watcher.selector, event_type, snapshot, old)
                if seen_as is not None:
                    seen = _as_version(snapshot, watcher.api_version)
                    watcher.queue.put_nowait(("event", {"type": seen_as, "object": seen}))

    def compact(self) -> None:
        """Forget history up to now: any older resourceVersion now gets 410 Gone."""
        self.compacted_rv = self.resource_version
        self._history.clear()

    def set_request_header_config(
        self,
        *,
        requestheader_client_ca: str | None = "",
        allowed_names: list[str] | None = None,
        username_headers: list[str] | None = None,
        group_headers: list[str] | None = None,
        extra_headers_prefixes: list[str] | None = None,
        client_ca: str | None = None,
    ) -> dict[str, Any]:
        """Create or replace ConfigMap kube-system/extension-apiserver-authentication.

        Keys whose argument is None are left out, as on clusters without front-proxy configuration.
        """
        data: dict[str, str] = {}
        if requestheader_client_ca is not None:
            data["requestheader-client-ca-file"] = requestheader_client_ca
            data["requestheader-allowed-names"] = json.dumps(allowed_names or [])
            data["requestheader-username-headers"] = json.dumps(username_headers or ["X-Remote-User"])
            data["requestheader-group-headers"] = json.dumps(group_headers or ["X-Remote-Group"])
            data["requestheader-extra-headers-prefix"] = json.dumps(extra_headers_prefixes or ["X-Remote-Extra-"])
        if client_ca is not None:
            data["client-ca-file"] = client_ca
        namespace, name = REQUEST_HEADER_CONFIGMAP
        obj = {"metadata": {"name": name, "namespace": namespace}, "data": data}
        if self.get("configmaps", name, namespace) is None:
            return self.add("configmaps", obj)
        return self.modify("configmaps", obj)

    # ----------------------------------------------------------------- watch control

    def watchers(self, plural: str | None = None) -> int:
        return sum(1 for w in self._watchers if plural is None or w.resource.plural == plural)

    async def wait_for_watchers(self, plural: str, count: int = 1) -> None:
        """Until at least ``count`` watches of ``plural`` are open (wrap in asyncio.wait_for)."""
        async with self._watchers_changed:
            await self._watchers_changed.wait_for(lambda: self.watchers(plural) >= count)

    def _signal(self, plural: str | None, signal: str, payload: Any = None, *, user_agent: str | None = None) -> None:
        for watcher in self._watchers:
            if (plural is None or watcher.resource.plural == plural) and user_agent in (None, watcher.user_agent):
                watcher.queue.put_nowait((signal, payload))

    def bookmark(self, plural: str | None = None) -> None:
        """Send a BOOKMARK at the current resourceVersion to watches that asked for bookmarks."""
        self._signal(plural, "bookmark")

    def cut_watches(self, plural: str | None = None, *, user_agent: str | None = None) -> None:
        """Drop open watch connections mid-stream (the client sees a broken chunked body); with
        ``user_agent``, only that client's: with ``fail(disconnect=True, user_agent=...)`` the client is
        cut off the API entirely, its open streams included, as by a network partition."""
        self._signal(plural, "cut", user_agent=user_agent)

    def end_watches(self, plural: str | None = None) -> None:
        """End open watches cleanly, as the API server does when timeoutSeconds has passed."""
        self._signal(plural, "end")

    def send_raw(self, plural: str | None, line: bytes) -> None:
        """Write ``line`` as is on open watches (for garbled-stream tests)."""
        self._signal(plural, "raw", line)

    def expire_watches(self, plural: str | None = None) -> None:
        """Send an ERROR event with a 410 Expired Status on open watches, then end them."""
        self._signal(plural, "expire")

    # ----------------------------------------------------------------- fault injection

    def fail(self, **kwargs: Any) -> Fault:
        """Add a fault, e.g. ``fail(status=429, retry_after=3, plural="cronjobs", watch=True)``."""
        fault = Fault(**kwargs)
        self.faults.append(fault)
        return fault

    def requests_for(self, plural: str, *, watch: bool | None = None) -> list[RecordedRequest]:
        return [r for r in self.requests if r.plural == plural and (watch is None or r.watch == watch)]

    # ----------------------------------------------------------------- HTTP

    @staticmethod
    def _parse_path(path: str) -> ApiPath | None:
        """The parts of an API path, or None if it is not one."""
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 2 and parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            return None
        name = rest[1] if len(rest) >= 2 else None
        return ApiPath(group, version, namespace, rest[0], name, rest[2] if len(rest) == 3 else None)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        parsed = self._parse_path(request.path)
        plural = parsed.plural if parsed else None
        watch = _query_bool(request.query.get("watch"))
        record = RecordedRequest(
            method=request.method,
            path=request.path,
            query=dict(request.query),
            headers=dict(request.headers),
            at=asyncio.get_running_loop().time(),
            plural=plural,
            watch=watch,
        )
        self.requests.append(record)
        response = await self._answer(request, parsed, watch)
        record.status = response.status if response is not None else None
        if response is None:  # connection dropped on purpose
            raise web.HTTPInternalServerError()  # never reaches the client: the transport is gone
        return response

    async def _apply_fault(self, request: web.Request, plural: str | None, watch: bool) -> web.Response | None:
        for fault in self.faults:
            if fault.matches(request.method, plural, watch, request.headers.get("User-Agent", "")):
                fault.hits += 1
                if fault.delay_s:
                    await asyncio.sleep(fault.delay_s)  # a slow API server is the fault under test
                if fault.disconnect:
                    self._drop(request)
                    return None
                if fault.status is not None:
                    headers = {}
                    if fault.retry_after is not None:
                        headers["Retry-After"] = f"{fault.retry_after:g}"
                    return status_response(fault.status, f"injected fault {fault.status}", headers)
                return None
        return None

    @staticmethod
    def _drop(request: web.Request) -> None:
        if request.transport is not None:
            request.transport.abort()

    async def _answer(self, request: web.Request, parsed: ApiPath | None, watch: bool) -> web.StreamResponse | None:
        faulted = await self._apply_fault(request, parsed.plural if parsed else None, watch)
        if faulted is not None:
            return faulted
        if request.transport is None or request.transport.is_closing():
            return None
        if request.path == "/version":
            return web.json_response({"major": "1", "minor": "31", "gitVersion": "v1.31.0-fake"})
        if self.require_auth and request.headers.get("Authorization") != f"Bearer {self.bearer_token}":
            return status_response(401, "Unauthorized")
        discovery = self._discovery(request.path) if request.method == "GET" else None
        if discovery is not None:
            return web.json_response(discovery)
        if parsed is None:
            return status_response(404, f"the server could not find the requested resource {request.path}")
        if request.method == "POST" and parsed.name is None:
            review = self._reviews().get((parsed.group, parsed.version, parsed.plural))
            if review is not None:
                return await review(request)
        rt = RESOURCE_TYPES.get(parsed.plural)
        if rt is None or not self._serves(rt, parsed.group, parsed.version):
            return status_response(404, f"the server could not find the requested resource ({parsed.plural})")
        if parsed.subresource not in (None, "status") or (parsed.subresource and not rt.status_subresource):
            return status_response(404, f"the server could not find the requested resource ({request.path})")
        return await self._resource_request(request, rt, parsed, watch)

    def _reviews(self) -> dict[tuple[str, str, str], Callable[[web.Request], Awaitable[web.Response | None]]]:
        return {
            ("authentication.k8s.io", "v1", "tokenreviews"): self._token_review,
            ("authorization.k8s.io", "v1", "subjectaccessreviews"): self._subject_access_review,
            ("authorization.k8s.io", "v1", "selfsubjectaccessreviews"): self._self_subject_access_review,
        }

    def _serves(self, rt: ResourceType, group: str, version: str) -> bool:
        return rt.plural in self.installed and rt.group == group and version in self.served_versions[rt.plural]

    async def _resource_request(
        self, request: web.Request, rt: ResourceType, parsed: ApiPath, watch: bool
    ) -> web.StreamResponse | None:
        api_version = rt.api_version_of(parsed.version)
        if request.method == "POST" and parsed.name is None:
            return await self._create(request, rt, parsed.namespace, api_version)
        if parsed.name is not None and request.method in ("PUT", "PATCH"):
            return await self._write(request, rt, parsed, api_version)
        if parsed.name is not None and request.method == "DELETE":
            return self._delete_request(rt, parsed, await request.read())
        if request.method != "GET":
            return status_response(405, f"{request.method} is not supported by the fake")
        if parsed.name is not None:
            obj = self._objects[rt.plural].get((parsed.namespace or "" if rt.namespaced else "", parsed.name))
            if obj is None:
                return status_response(404, f'{_resource_name(rt)} "{parsed.name}" not found')
            return web.json_response(_as_version(obj, api_version))
        if watch:
            return await self._watch(request, rt, parsed.namespace, api_version)
        return self._list(request, rt, parsed.namespace, api_version)

    async def _create(
        self, request: web.Request, rt: ResourceType, namespace: str | None, api_version: str
    ) -> web.Response:
        """POST to a collection: validated like kube-apiserver (422 Invalid, 400 unknown field)."""
        body = _typed_body(await request.json(), rt, api_version)
        if body is None:
            return status_response(400, f"the body is not a {api_version} {rt.kind}")
        if rt.namespaced:
            body.setdefault("metadata", {})["namespace"] = namespace or "default"
        name = str(body.get("metadata", {}).get("name", ""))
        if self.get(rt.plural, name, namespace or "default") is not None:
            message = f'{_resource_name(rt)} "{name}" already exists'
            return web.json_response(status_object(409, message, "AlreadyExists"), status=409)
        if rt.status_subresource:
            body.pop("status", None)  # status is written through /status only
        try:
            created = self.add(rt.plural, body)
        except Refused as refused:
            return web.json_response(refused.status, status=refused.status["code"])
        return web.json_response(_as_version(created, api_version), status=201)

    async def _write(self, request: web.Request, rt: ResourceType, parsed: ApiPath, api_version: str) -> web.Response:
        """PUT or PATCH of one object or its status (``tests/fakekube_writes.py`` says how)."""
        assert parsed.name is not None
        key = (parsed.namespace or "default" if rt.namespaced else "", parsed.name)
        stored = self._objects[rt.plural].get(key)
        to_status = parsed.subresource == "status"
        try:
            if request.method == "PUT":
                written = self._put_body(rt, parsed.name, stored, await request.json(), api_version)
            else:
                written = self._patched(request, rt, parsed.name, stored, await request.text(), api_version)
        except PatchError as refused:
            return web.json_response(status_object(refused.code, str(refused), refused.reason), status=refused.code)
        if stored is None and to_status:
            return status_response(404, f'{_resource_name(rt)} "{parsed.name}" not found')
        metadata = written.setdefault("metadata", {})
        metadata["name"] = parsed.name
        if rt.namespaced:
            metadata["namespace"] = key[0]
        if rt.status_subresource:
            written = kept_apart(stored, written, to_status=to_status)
        try:
            result = self.add(rt.plural, written) if stored is None else self.modify(rt.plural, written)
        except Refused as refused:
            return web.json_response(refused.status, status=refused.status["code"])
        return web.json_response(_as_version(result, api_version), status=201 if stored is None else 200)

    @staticmethod
    def _precondition(rt: ResourceType, name: str, stored: Mapping[str, Any], written: Any, *, required: bool) -> None:
        sent = (written.get("metadata") or {}).get("resourceVersion") if isinstance(written, Mapping) else None
        if sent is None and required:
            raise PatchError(422, f'{rt.kind}.{rt.group} "{name}" is invalid: metadata.resourceVersion: '
                             "Invalid value: 0x0: must be specified for an update", "Invalid")  # fmt: skip
        if sent is not None and str(sent) != stored["metadata"]["resourceVersion"]:
            raise PatchError(409, conflict_message(rt.plural, rt.group, name), "Conflict")

    def _put_body(
        self, rt: ResourceType, name: str, stored: Mapping[str, Any] | None, body: Any, api_version: str
    ) -> dict[str, Any]:
        body = _typed_body(body, rt, api_version)
        if body is None:
            raise PatchError(400, f"the body is not a {api_version} {rt.kind}", "BadRequest")
        if (body.get("metadata") or {}).get("name") != name:
            raise PatchError(400, f"the name of the object does not match the name on the URL ({name})", "BadRequest")
        if stored is None:
            raise PatchError(404, f'{_resource_name(rt)} "{name}" not found', "NotFound")
        self._precondition(rt, name, stored, body, required=rt.custom)
        return body

    def _patched(
        self, request: web.Request, rt: ResourceType, name: str, stored: Mapping[str, Any] | None, text: str,
        api_version: str,
    ) -> dict[str, Any]:  # fmt: skip
        patch_type = request.content_type
        if patch_type not in PATCH_TYPES or (patch_type == STRATEGIC_MERGE_PATCH and rt.custom):
            accepted = ", ".join(t for t in PATCH_TYPES if not (rt.custom and t == STRATEGIC_MERGE_PATCH))
            message = f"the body of the request was in an unknown format - accepted media types include: {accepted}"
            raise PatchError(415, message)
        if patch_type == APPLY_PATCH:
            return self._applied(request, rt, name, stored, text, api_version)
        if stored is None:
            raise PatchError(404, f'{_resource_name(rt)} "{name}" not found', "NotFound")
        try:
            patch = json.loads(text)
        except json.JSONDecodeError as error:
            raise PatchError(400, f"the patch is not JSON: {error}", "BadRequest") from error
        current = _as_version(stored, api_version)
        if patch_type == JSON_PATCH:
            patched: dict[str, Any] = json_patch(current, patch)
        else:
            assert patch_type in (MERGE_PATCH, STRATEGIC_MERGE_PATCH)
            self._precondition(rt, name, stored, patch, required=False)
            patched = merge_patch(current, patch)
        self._precondition(rt, name, stored, patched, required=False)
        return patched

    def _applied(
        self, request: web.Request, rt: ResourceType, name: str, stored: Mapping[str, Any] | None, text: str,
        api_version: str,
    ) -> dict[str, Any]:  # fmt: skip
        manager = request.query.get("fieldManager")
        if not manager:
            message = (
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'
            )
            raise PatchError(422, message, "Invalid")
        applied = yaml.safe_load(text)
        if not isinstance(applied, dict) or applied.get("kind") != rt.kind or applied.get("apiVersion") != api_version:
            raise PatchError(400, f"the applied configuration is not a {api_version} {rt.kind}", "BadRequest")
        if stored is not None:
            self._precondition(rt, name, stored, applied, required=False)
        result: dict[str, Any] = apply_merge(_as_version(stored, api_version) if stored else {}, applied)
        entries = [e for e in result.get("metadata", {}).get("managedFields") or [] if e.get("manager") != manager]
        entries.append(
            {"manager": manager, "operation": "Apply", "apiVersion": api_version, "time": rfc3339(datetime.now(UTC)),
             "fieldsType": "FieldsV1", "fieldsV1": {}}
        )  # fmt: skip
        result.setdefault("metadata", {})["managedFields"] = entries
        return result

    def _delete_request(self, rt: ResourceType, parsed: ApiPath, body: bytes) -> web.Response:
        """A DELETE: its DeleteOptions body checked against Kubernetes' own schema (kubernetes-validate),
        then its preconditions (uid, resourceVersion) as the API server's storage checks them: a
        mismatch is a 409 Conflict naming both values."""
        assert parsed.name is not None
        namespace = parsed.namespace or "default"
        stored = self.get(rt.plural, parsed.name, namespace)
        if parsed.subresource is not None or stored is None:
            return status_response(404, f'{_resource_name(rt)} "{parsed.name}" not found')
        try:
            options = json.loads(body) if body.strip() else {}
        except ValueError:
            return status_response(400, "the body is not JSON")
        refused = [error.message for error in core_validator("meta.k8s.io/v1", "DeleteOptions").iter_errors(options)]
        if refused:
            return status_response(400, f"the body is not a valid DeleteOptions: {'; '.join(refused)}")
        preconditions = options.get("preconditions") or {}
        for key, meta in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            wanted, actual = preconditions.get(key), stored["metadata"].get(key)
            if wanted is not None and wanted != actual:
                failed = f"Precondition failed: {meta} in precondition: {wanted}, {meta} in object meta: {actual}"
                message = conflict_message(rt.plural, rt.group, parsed.name, failed)
                return web.json_response(status_object(409, message, "Conflict"), status=409)
        deleted = self.delete(rt.plural, parsed.name, namespace)
        details = {"name": parsed.name, "group": rt.group, "kind": rt.plural, "uid": deleted["metadata"]["uid"]}
        answer = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}
        return web.json_response(answer)

    def _discovery(self, path: str) -> dict[str, Any] | None:
        """/api, /api/v1, /apis, /apis/{group}, /apis/{group}/{version} for the installed resources."""
        installed = [rt for plural, rt in RESOURCE_TYPES.items() if plural in self.installed]
        parts = [p for p in path.split("/") if p]
        if parts == ["api"]:
            addresses = [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": addresses}
        groups: dict[str, list[str]] = {}
        for rt in installed:
            for version in self.served_versions[rt.plural]:
                if version not in groups.setdefault(rt.group, []):
                    groups[rt.group].append(version)

        def group_document(group: str) -> dict[str, Any]:
            versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in groups[group]]
            return {"name": group, "versions": versions, "preferredVersion": versions[0]}

        if parts == ["apis"]:
            named = [group_document(g) for g in sorted(groups) if g]
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": named}
        if len(parts) == 2 and parts[0] == "apis" and parts[1] in groups:
            return {"kind": "APIGroup", "apiVersion": "v1", **group_document(parts[1])}
        group, version = ("", parts[1]) if parts[:1] == ["api"] else (parts[1] if len(parts) > 1 else "", parts[-1])
        if not ((len(parts) == 2 and parts[0] == "api") or (len(parts) == 3 and parts[0] == "apis")):
            return None
        served = [rt for rt in installed if rt.group == group and version in self.served_versions[rt.plural]]
        if not served:
            return None
        group_version = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
                "resources": discovery_resources(served)}  # fmt: skip

    def _select(
        self, rt: ResourceType, namespace: str | None, selector: FieldSelector | None = None
    ) -> list[dict[str, Any]]:
        return [
            obj
            for (ns, _), obj in sorted(self._objects[rt.plural].items())
            if (namespace is None or ns == namespace) and field_selector_matches(selector or [], obj)
        ]

    def _list(self, request: web.Request, rt: ResourceType, namespace: str | None, api_version: str) -> web.Response:
        requested_rv = request.query.get("resourceVersion", "")
        if requested_rv not in ("", "0") and int(requested_rv) < self.compacted_rv:
            return status_response(410, f"too old resource version: {requested_rv} ({self.compacted_rv})")
        items = self._select(rt, namespace, parse_field_selector(request.query.get("fieldSelector")))
        list_rv = self.resource_version
        start = 0
        token = request.query.get("continue")
        if token:
            state = json.loads(base64.urlsafe_b64decode(token))
            if state["rv"] < self.compacted_rv:
                return status_response(410, "The provided continue parameter is too old")
            keys = [self._key(rt, obj) for obj in items]
            start = sum(1 for key in keys if list(key) <= state["after"])
        limit = int(request.query.get("limit", "0") or 0)
        page = items[start : start + limit] if limit else items[start:]
        metadata: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if limit and start + limit < len(items):
            after = list(self._key(rt, page[-1]))
            raw = json.dumps({"rv": list_rv, "after": after}).encode()
            metadata["continue"] = base64.urlsafe_b64encode(raw).decode()
        items_seen = [_as_version(obj, api_version) for obj in page]
        body = {"kind": f"{rt.kind}List", "apiVersion": api_version, "metadata": metadata, "items": items_seen}
        return web.json_response(body)

    async def _watch(
        self, request: web.Request, rt: ResourceType, namespace: str | None, api_version: str
    ) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        requested_rv = request.query.get("resourceVersion", "")
        timeout = request.query.get("timeoutSeconds")
        deadline = loop.time() + float(timeout) if timeout else None
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)

        async def send(event: Mapping[str, Any]) -> None:
            await response.write(json.dumps(event).encode() + b"\n")

        if requested_rv not in ("", "0") and int(requested_rv) < self.compacted_rv:
            message = f"too old resource version: {requested_rv} ({self.compacted_rv})"
            await send({"type": "ERROR", "object": status_object(410, message, "Expired")})
            await response.write_eof()
            return response

        # Register and take the backlog in one synchronous step: no event can slip in between.
        selector = parse_field_selector(request.query.get("fieldSelector"))
        bookmarks = _query_bool(request.query.get("allowWatchBookmarks"))
        watcher = _Watcher(rt, namespace, bookmarks, selector, api_version, request.headers.get("User-Agent", ""))
        if requested_rv in ("", "0"):
            current = self._select(rt, namespace, selector)
            backlog = [{"type": "ADDED", "object": _as_version(o, api_version)} for o in current]
        else:
            backlog = [
                {"type": seen_as, "object": _as_version(obj, api_version)}
                for rv, plural, event_type, obj, old in self._history
                if rv > int(requested_rv)
                and plural == rt.plural
                and namespace in (None, obj["metadata"].get("namespace"))
                and (seen_as := _event_through(selector, event_type, obj, old)) is not None
            ]
        self._watchers.append(watcher)
        async with self._watchers_changed:
            self._watchers_changed.notify_all()
        try:
            for event in backlog:
                await send(event)
            while True:
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    break
                try:
                    signal, payload = await asyncio.wait_for(watcher.queue.get(), remaining)
                except TimeoutError:
                    break
                if signal == "event":
                    await send(payload)
                elif signal == "bookmark" and watcher.bookmarks:
                    bookmark = {
                        "kind": rt.kind,
                        "apiVersion": api_version,
                        "metadata": {"resourceVersion": str(self.resource_version)},
                    }
                    await send({"type": "BOOKMARK", "object": bookmark})
                elif signal == "expire":
                    status = status_object(410, "too old resource version", "Expired")
                    await send({"type": "ERROR", "object": status})
                    break
                elif signal == "raw":
                    await response.write(payload)
                elif signal == "end":
                    break
                elif signal == "cut":
                    self._drop(request)
                    return response
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass  # the client went away
        finally:
            self._watchers.remove(watcher)
        return response

    # ----------------------------------------------------------------- reviews

    async def _review_failure(self, request: web.Request) -> tuple[bool, web.Response | None]:
        """(failed, answer) per ``fail_mode``; answer None means the connection was dropped."""
        mode = self.fail_mode
        if mode is None:
            return False, None
        if mode == "unreachable":
            self._drop(request)
            return True, None
        if mode in ("error", "500"):
            return True, status_response(500, "review backend failed")
        if mode == "forbidden":
            return True, status_response(403, "forbidden: the service account may not create reviews")
        if mode == "timeout":
            await asyncio.sleep(3600)  # a review that never answers: the caller's timeout is under test
            return True, status_response(504, "review timed out")
        raise ValueError(f"unknown fail_mode {mode!r}")

    async def _token_review(self, request: web.Request) -> web.Response | None:
        body = await request.json()
        try:  # checked against Kubernetes' own schema (kubernetes-validate), as kube-apiserver checks it
            validate("authentication.k8s.io", "TokenReview", body)
        except Refused as refused:
            return web.json_response(refused.status, status=refused.status["code"])
        self.token_requests.append(body)
        failed, failure = await self._review_failure(request)
        if failed:
            return failure
        spec = body.get("spec") or {}
        user = self.tokens.get(spec.get("token", ""))
        requested = list(spec.get("audiences") or [])
        # A token entry may name the audiences it is valid for (default: any).
        valid_for = None if user is None else user.get("audiences")
        audiences = [a for a in requested if valid_for is None or a in valid_for] if requested else None
        status: dict[str, Any]
        if user is None or audiences == []:
            status = {"authenticated": False, "error": "invalid bearer token"}
        else:
            status = {
                "authenticated": True,
                "user": {
                    "username": user["username"],
                    "uid": user.get("uid", ""),
                    "groups": list(user.get("groups", [])),
                    "extra": {k: list(v) for k, v in (user.get("extra") or {}).items()},
                },
                "audiences": audiences or list(valid_for or ["https://kubernetes.default.svc"]),
            }
        answer = {"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1", "spec": spec}
        answer["status"] = status
        answer["metadata"] = {"creationTimestamp": None}
        return web.json_response(answer, status=201)

    async def _subject_access_review(self, request: web.Request) -> web.Response | None:
        """A review of another user's permission (the delegated authoriser), answered by ``sar_rule``."""
        return await self._access_review(request, "SubjectAccessReview", self.sar_requests, self.sar_rule, "sar_rule")

    async def _self_subject_access_review(self, request: web.Request) -> web.Response | None:
        """The caller's own permission (``caller``), answered by ``ssar_rule``."""

        def rule(spec: Mapping[str, Any]) -> bool:
            return self.ssar_rule({**spec, "user": self.caller["username"], "groups": self.caller["groups"]})

        return await self._access_review(request, "SelfSubjectAccessReview", self.ssar_requests, rule, "ssar_rule")

    async def _access_review(
        self,
        request: web.Request,
        kind: str,
        recorded: list[dict[str, Any]],
        rule: Callable[[Mapping[str, Any]], bool],
        rule_name: str,
    ) -> web.Response | None:
        """Either access review: the body is checked as kube-apiserver checks it (400/422), recorded,
        then answered by ``rule`` unless ``fail_mode`` says the review backend fails."""
        body = await request.json()
        try:
            validate("authorization.k8s.io", kind, body)
        except Refused as refused:
            return web.json_response(refused.status, status=refused.status["code"])
        spec = body.get("spec") or {}
        recorded.append(spec)
        failed, failure = await self._review_failure(request)
        if failed:
            return failure
        allowed = bool(rule(spec))
        status: dict[str, Any] = {"allowed": allowed}
        if not allowed:
            status["reason"] = f"denied by the fake's {rule_name}"
        answer = {
            "kind": kind,
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }
        return web.json_response(answer, status=201)


# --------------------------------------------------------------------- fixtures


@pytest.fixture
async def fake_kube(tmp_path: Path) -> AsyncIterator[FakeKube]:
    """A running fake API server; ``fake_kube.kubeconfig_path`` points a client at it."""
    fake = FakeKube(tmp_path)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
async def kube_api(fake_kube: FakeKube) -> AsyncIterator[ApiClient]:
    """A kubernetes-asyncio ApiClient talking to ``fake_kube`` (built by adapters.kubernetes.client)."""
    api = await fake_kube.api_client()
    try:
        yield api
    finally:
        with contextlib.suppress(Exception):
            await api.close()
