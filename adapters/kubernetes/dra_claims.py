"""GPUs that pods ask for through Dynamic Resource Allocation (``resource.k8s.io/v1``).

A pod's ``spec.resourceClaims`` name a ResourceClaim (``resourceClaimName``, possibly shared by
several pods) or a ResourceClaimTemplate (``resourceClaimTemplateName``: the resourceclaim controller
makes one claim per pod and names it in ``pod.status.resourceClaimStatuses``; an entry there without
a ``resourceClaimName`` means no claim was needed). A claim's ``spec.devices.requests[]`` each ask
for devices of a DeviceClass, as the scheduler's allocator reads them:

- ``exactly`` with ``allocationMode`` ``ExactCount`` (the default) takes ``count`` devices (default 1);
  ``All`` takes every matching device of the node it lands on: once the claim is allocated, its
  results (``status.allocation.devices.results``, one per device); before, what a node of the
  candidate pool offers (``adapters.kubernetes.dra_devices``, from the pool's ResourceSlices);
- ``firstAvailable`` lists subrequests; the first one that can be satisfied wins: its result is
  named ``<request>/<subrequest>`` once allocated, and before that the first subrequest, the one the
  scheduler prefers and a new node would be made for, is counted;
- ``adminAccess`` requests take no device from anyone and count nothing.

A device counts as GPUs through ``DeviceClassUnits``: a number per device (``gpu.nvidia.com`` = 1), or
by the MIG profile a request's CEL selector names (``mig.nvidia.com``: ``profile == '1g.10gb'`` is 1/7,
as ``adapters.gpu_units`` counts MIG). A device class the map does not name is no GPU (a NIC, an
FPGA) and is reported, so a missing entry is visible.

The claim the scheduler makes for a DRA-backed extended resource (``pod.status.
extendedResourceClaimStatus``, annotated ``resource.kubernetes.io/extended-resource-claim``) is never
counted here: the container's ``nvidia.com/gpu`` already is (``adapters.kubernetes.gpu_requests``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from kubernetes_asyncio.client import ApiClient, ResourceV1Api

from adapters.gpu_units import MIG_PREFIX, mig_share
from adapters.kubernetes.dra_devices import DeviceInventory
from adapters.kubernetes.watch import WatchedResource

MIG_PROFILE: Literal["mig-profile"] = "mig-profile"
DeviceClassValue = float | Literal["mig-profile"]
# NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu) ships these two DeviceClasses.
DEFAULT_DEVICE_CLASSES: Mapping[str, DeviceClassValue] = {"gpu.nvidia.com": 1.0, "mig.nvidia.com": MIG_PROFILE}
EXTENDED_RESOURCE_CLAIM = "resource.kubernetes.io/extended-resource-claim"
_PROFILE_SELECTOR = re.compile(r"\.profile\s*==\s*['\"]([^'\"]+)['\"]")
Lookup = Mapping[str, Mapping[str, Any]]  # "namespace/name" -> object, as the watches keep them


def resource_claim_resource(api: ApiClient) -> WatchedResource:
    """ResourceClaims in every namespace; 404 (absent) before Kubernetes 1.34 serves resource.k8s.io/v1."""
    return WatchedResource("resourceclaims", ResourceV1Api(api).list_resource_claim_for_all_namespaces)


def resource_claim_template_resource(api: ApiClient) -> WatchedResource:
    return WatchedResource("resourceclaimtemplates", ResourceV1Api(api).list_resource_claim_template_for_all_namespaces)


@dataclass(frozen=True)
class AllRequest:
    """An unallocated ``allocationMode: All`` request: its GPUs depend on the node it lands on."""

    name: str
    device_class: str
    selectors: tuple[Mapping[str, Any], ...]
    per_device: Fraction


@dataclass(frozen=True)
class ClaimGpus:
    """GPUs of one claim (or template), its ``All`` requests still to resolve, and what in it could
    not be counted and why."""

    gpus: float
    problems: tuple[str, ...] = ()
    all_requests: tuple[AllRequest, ...] = ()


def _device_gpus(request: Mapping[str, Any], classes: Mapping[str, DeviceClassValue]) -> Fraction | None:
    """GPUs one device of this (sub)request is; None for a class that is not a GPU. Raises ValueError."""
    name = request.get("deviceClassName")
    if not name:
        raise ValueError("no deviceClassName")
    value = classes.get(str(name))
    if value is None:
        return None
    if value != MIG_PROFILE:
        return Fraction(str(value))
    selectors = request.get("selectors") or []
    expressions = [str((selector.get("cel") or {}).get("expression", "")) for selector in selectors]
    profiles = {match for text in expressions for match in _PROFILE_SELECTOR.findall(text)}
    if len(profiles) != 1:
        raise ValueError(f"device class {name} counts by MIG profile, and the request's selectors name {len(profiles)}")
    return mig_share(MIG_PREFIX + profiles.pop()) or Fraction(0)  # never 0: the prefix makes it MIG


def _wanted(request: Mapping[str, Any]) -> tuple[int | None, bool]:
    """(devices asked for, None for All; admin access) of an ``exactly`` request or a subrequest."""
    mode = request.get("allocationMode") or "ExactCount"
    if mode == "All":
        return None, bool(request.get("adminAccess"))
    if mode != "ExactCount":
        raise ValueError(f"allocationMode {mode!r} is neither ExactCount nor All")
    count = request.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"count {count!r} is not a positive integer")
    return count, bool(request.get("adminAccess"))


def _request_gpus(
    request: Mapping[str, Any], allocated: Mapping[str, int], classes: Mapping[str, DeviceClassValue]
) -> tuple[float, str | None, AllRequest | None]:
    """(GPUs, why not counted, an All request to resolve on a node) of one ``spec.devices.requests`` entry."""
    name = str(request.get("name", ""))
    choices: list[tuple[str, Mapping[str, Any]]]
    if request.get("exactly"):
        choices = [(name, request["exactly"])]
    elif request.get("firstAvailable"):
        choices = [(f"{name}/{sub.get('name', '')}", sub) for sub in request["firstAvailable"]]
    else:
        raise ValueError("neither exactly nor firstAvailable")
    chosen = next(((result, sub) for result, sub in choices if result in allocated), None)
    result, sub = chosen or choices[0]  # unallocated: the first alternative, the scheduler's preference
    per_device = _device_gpus(sub, classes)
    if per_device is None:
        return 0.0, f"device class {sub.get('deviceClassName')} is not in the DeviceClass map", None
    count, admin = _wanted(sub)
    if admin:
        return 0.0, None, None
    if chosen is not None:
        count = allocated[result]
    elif count is None:
        selectors = tuple(sub.get("selectors") or ())
        return 0.0, None, AllRequest(result, str(sub["deviceClassName"]), selectors, per_device)
    return float(count * per_device), None, None


def claim_spec_gpus(
    spec: Mapping[str, Any], status: Mapping[str, Any] | None, classes: Mapping[str, DeviceClassValue]
) -> ClaimGpus:
    """GPUs of a ResourceClaimSpec, by its allocation's results when it has one."""
    results = (((status or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    allocated: dict[str, int] = {}
    for result in results:
        allocated[str(result.get("request", ""))] = allocated.get(str(result.get("request", "")), 0) + 1
    total, problems, all_requests = 0.0, [], []
    for request in (spec.get("devices") or {}).get("requests") or []:
        try:
            gpus, problem, all_request = _request_gpus(request, allocated, classes)
        except ValueError as exc:
            gpus, problem, all_request = 0.0, f"unreadable: {exc}", None
        total += gpus
        if problem:
            problems.append(f"request {request.get('name', '?')}: {problem}")
        if all_request is not None:
            all_requests.append(all_request)
    return ClaimGpus(total, tuple(problems), tuple(all_requests))


@dataclass(frozen=True)
class ClaimLookup:
    """What resolving a pod's claims needs: the claims and templates the watches hold, and the map."""

    claims: Lookup = field(default_factory=dict)
    templates: Lookup = field(default_factory=dict)
    device_classes: Mapping[str, DeviceClassValue] = field(default_factory=lambda: dict(DEFAULT_DEVICE_CLASSES))
    # ResourceSlices, DeviceClasses and NodeClaims, for All requests (None: not watched).
    devices: DeviceInventory | None = None

    def all_gpus(self, requests: Sequence[AllRequest], pool: str | None) -> tuple[float, list[str]]:
        """GPUs of unallocated All requests on a node of ``pool``, and why any could not be told."""
        total, problems = 0.0, []
        for request in requests:
            if self.devices is None:
                problems.append(f"request {request.name}: allocationMode All, and ResourceSlices are not watched")
                continue
            try:
                devices = self.devices.all_devices(request.device_class, request.selectors, pool)
            except ValueError as exc:
                problems.append(f"request {request.name}: {exc}")
                continue
            total += float(devices * request.per_device)
        return total, problems


@dataclass(frozen=True)
class PodClaims:
    """GPUs of a pod's claims: its own (one per pod: from templates), and the claims it shares by name
    (``namespace/name`` -> GPUs), which count once however many pods use them."""

    own: float = 0.0
    shared: Mapping[str, float] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    own_all: tuple[AllRequest, ...] = ()  # All requests, resolved once the pool is known
    shared_all: Mapping[str, tuple[AllRequest, ...]] = field(default_factory=dict)

    def take(self, counted: set[str]) -> tuple[float, tuple[AllRequest, ...]]:
        """Its GPUs and All requests, the shared claims in ``counted`` left out; adds the rest to it."""
        fresh = [key for key in self.shared if key not in counted]
        counted.update(fresh)
        all_requests = self.own_all + tuple(r for key in fresh for r in self.shared_all.get(key, ()))
        return self.own + sum(self.shared[key] for key in fresh), all_requests


@dataclass(frozen=True)
class _Resolved:
    """One ``spec.resourceClaims`` entry, resolved: the claim spec to count, its status, and the
    ``namespace/name`` of a claim shared by name (None: the pod's own claim)."""

    spec: Mapping[str, Any]
    status: Mapping[str, Any] | None
    shared_key: str | None


def _resolve(
    entry: Mapping[str, Any], pod_status: Mapping[str, Any], namespace: str, lookup: ClaimLookup
) -> _Resolved | str | None:
    """The entry's claim; a string says why it cannot be counted; None: nothing to count."""
    template_name = entry.get("resourceClaimTemplateName")
    claim_name = entry.get("resourceClaimName")
    shared_key = f"{namespace}/{claim_name}" if claim_name else None
    if not claim_name and not template_name:
        return "names neither a ResourceClaim nor a ResourceClaimTemplate"
    if not claim_name:
        statuses = {str(s.get("name")): s for s in pod_status.get("resourceClaimStatuses") or []}
        status_entry = statuses.get(str(entry.get("name", "")))
        if status_entry is not None and not status_entry.get("resourceClaimName"):
            return None  # the controller found that no claim was needed
        claim_name = (status_entry or {}).get("resourceClaimName")
    extended = (pod_status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    if claim_name and claim_name == extended:
        return None  # the extended resource's claim: counted as the container's resource
    claim = lookup.claims.get(f"{namespace}/{claim_name}") if claim_name else None
    if claim is not None:
        if ((claim.get("metadata") or {}).get("annotations") or {}).get(EXTENDED_RESOURCE_CLAIM) == "true":
            return None
        return _Resolved(claim.get("spec") or {}, claim.get("status"), shared_key)
    if shared_key is not None:
        return f"ResourceClaim {shared_key} not found"
    # Not generated yet, or not in the watch yet: the pod's claim will be its template's spec.
    template = lookup.templates.get(f"{namespace}/{template_name}")
    if template is None:
        return f"ResourceClaimTemplate {namespace}/{template_name} not found"
    return _Resolved((template.get("spec") or {}).get("spec") or {}, None, None)


def pod_claims(
    pod_spec: Mapping[str, Any], pod_status: Mapping[str, Any], namespace: str, lookup: ClaimLookup
) -> PodClaims:
    """GPUs of the claims in ``pod_spec.resourceClaims``, resolved as the pod's status says (a
    CronJob's template has no status: each template claim is then its own, as it will be)."""
    own, shared, problems = 0.0, dict[str, float](), list[str]()
    own_all: list[AllRequest] = []
    shared_all: dict[str, tuple[AllRequest, ...]] = {}
    for entry in pod_spec.get("resourceClaims") or []:
        where = f"claim {entry.get('name', '?')}"
        resolved = _resolve(entry, pod_status, namespace, lookup)
        if isinstance(resolved, str):
            problems.append(f"{where}: {resolved}")
        if not isinstance(resolved, _Resolved):
            continue
        counted = claim_spec_gpus(resolved.spec, resolved.status, lookup.device_classes)
        problems += [f"{where}: {text}" for text in counted.problems]
        if resolved.shared_key is None:
            own += counted.gpus
            own_all += counted.all_requests
        else:
            shared[resolved.shared_key] = counted.gpus
            shared_all[resolved.shared_key] = counted.all_requests
    return PodClaims(own, shared, tuple(problems), tuple(own_all), shared_all)
