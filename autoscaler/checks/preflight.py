"""``gpu-autoscaler preflight`` and ``serve``'s start-up check: can this service run here, as configured?

Four kinds of check, each derived from the settings, each one ``Check`` (ok or a problem naming what
is wrong and how to fix it):

- the APIService ``v1beta1.external.metrics.k8s.io``: which install overlay fits (absent or ours:
  external-metrics-api; KEDA's: keda); another provider's is refused unless ``preflight.take_over``,
  and stops ``serve`` when this install claims the APIService (``autoscaler.checks.apiservice_owner``);
- RBAC: a SelfSubjectAccessReview per permission the configuration uses (``required_permissions``);
- the ``kube-system/extension-apiserver-authentication`` ConfigMap and its request-header CA
  (``auth.mode: kubernetes``);
- the custom resources the configuration reads, served by the API (discovery; ``required_resources``);
- Kueue, read where it is installed (``inputs.kueue``): found or not, and listed (``check_kueue``).

RBAC is checked for whoever runs the check: in the pod the service account, from a workstation the
kubeconfig's user.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from cryptography import x509
from kubernetes_asyncio.client import ApiClient

from adapters.kubernetes import access as kube_access
from adapters.kubernetes import auth as kube_auth
from adapters.kubernetes import kueue
from adapters.kubernetes.access import Access
from adapters.kubernetes.client import KubeError, KubeForbidden, KubeNotFound, read_json
from autoscaler.checks.apiservice_owner import EXTERNAL_METRICS_APISERVICE, apiservice_check
from autoscaler.config.settings import Settings

CLUSTER_ROLE_FIX = "grant it in the service's ClusterRole (manifests/base/clusterrole.yaml)"
AUTH_READER_FIX = (
    "bind Role kube-system/extension-apiserver-authentication-reader to the service account "
    "(manifests/base/rolebinding-auth-reader.yaml)"
)


@dataclass(frozen=True)
class Check:
    name: str  # what was checked, e.g. "rbac list,watch cronjobs.batch"
    ok: bool
    message: str  # what is fine, or what is wrong and how to fix it
    # Whether a problem here stops ``serve``. Only the APIService conflict of an install that claims
    # it does: starting would take the APIService from its owner. A missing permission or CRD
    # degrades one input, as it always has (the service serves what it can and says so in
    # /readyz?verbose), so it is logged, not fatal.
    blocks_start: bool = False

    def line(self) -> str:
        return f"{'ok' if self.ok else 'problem':<8}{self.name}: {self.message}"


@dataclass(frozen=True)
class Permission:
    """Verbs on one resource that a setting needs, and how to grant them."""

    verbs: tuple[str, ...]
    access: Access  # its verb is ignored: one review per verb
    needed_by: str
    fix: str = CLUSTER_ROLE_FIX


@dataclass(frozen=True)
class RequiredResource:
    """A custom resource the configuration reads: its group/version must serve ``plural``."""

    group: str
    version: str
    plural: str
    needed_by: str
    fix: str
    # Older versions the reader also accepts (a CapacityBuffer served as the deprecated v1alpha1 only).
    fallback_versions: tuple[str, ...] = ()


def _watch(group: str, resource: str, needed_by: str) -> Permission:
    return Permission(("list", "watch"), Access("list", group, resource), needed_by)


def required_permissions(settings: Settings) -> list[Permission]:
    """Every permission the settings make the service use (the manifests' ClusterRole and RoleBindings)."""
    apiservice = Access("get", "apiregistration.k8s.io", "apiservices", name=EXTERNAL_METRICS_APISERVICE)
    permissions: list[Permission] = [Permission(("get",), apiservice, "preflight (the APIService's owner)")]
    auth = settings.auth
    if auth.mode == "kubernetes":
        namespace, name = kube_auth.REQUEST_HEADER_NAMESPACE, kube_auth.REQUEST_HEADER_CONFIGMAP
        configmap = Access("get", "", "configmaps", namespace=namespace, name=name)
        permissions.append(Permission(("get", "list", "watch"), configmap, "auth.mode: kubernetes", AUTH_READER_FIX))
    if auth.mode != "none":
        permissions.append(Permission(("create",), Access("create", "authentication.k8s.io", "tokenreviews"),
                                      "bearer tokens (TokenReview)"))  # fmt: skip
    if auth.mode != "none" and auth.authorization == "kubernetes":
        review = Access("create", "authorization.k8s.io", "subjectaccessreviews")
        permissions.append(Permission(("create",), review, "auth.authorization: kubernetes"))
    inputs = settings.inputs
    if inputs is not None:
        if inputs.cronjobs:
            permissions += [_watch("batch", "cronjobs", "inputs.cronjobs"), _watch("batch", "jobs", "inputs.cronjobs")]
        if inputs.nodeclaims:
            permissions.append(_watch("karpenter.sh", "nodeclaims", "inputs.nodeclaims"))
        if inputs.nodepools:
            permissions.append(_watch("karpenter.sh", "nodepools", "inputs.nodepools"))
        if inputs.pending_pods:
            permissions.append(_watch("", "pods", "inputs.pending_pods"))
        if inputs.kueue:
            permissions += [_watch(kueue.GROUP, plural, "inputs.kueue") for plural in kueue.PLURALS]
        if inputs.resource_claims.enabled and (inputs.pending_pods or inputs.cronjobs):
            for plural in ("resourceclaims", "resourceclaimtemplates", "resourceslices", "deviceclasses"):
                permissions.append(_watch("resource.k8s.io", plural, "inputs.resource_claims"))
        for namespace in sorted(
            {m.placeholder_namespace for m in settings.metrics.values() if m.placeholder_namespace}
        ):
            quota = Access("list", "", "resourcequotas", namespace=namespace)
            permissions.append(Permission(("list",), quota, "metrics.*.placeholder_namespace (GPU quota)"))
    return permissions + _buffer_permissions(settings) + _publication_permissions(settings)


KARPENTER_FIX = "install Karpenter (v1 API) or set {setting}: false"
BUFFERS_FIX = (
    "enable CapacityBuffers (Karpenter: FEATURE_GATES CapacityBuffer=true; Cluster Autoscaler: "
    "--capacity-buffer-controller-enabled) or remove actuators.capacity_buffers"
)


def _buffer_permissions(settings: Settings) -> list[Permission]:
    """The CapacityBuffer writer's: read buffers everywhere it sizes one; write them, create chunk
    PodTemplates and hold its Lease unless it only dry-runs."""
    buffers = settings.actuators.capacity_buffers
    if buffers is None:
        return []
    needed_by = "actuators.capacity_buffers"
    permissions: list[Permission] = []
    for namespace in sorted({pool.namespace for pool in buffers.pools}):
        target = Access("list", "autoscaling.x-k8s.io", "capacitybuffers", namespace=namespace)
        verbs = ("list", "watch") if buffers.dry_run else ("get", "list", "watch", "create", "patch")
        permissions.append(Permission(verbs, target, needed_by))
        if not buffers.dry_run:
            template = Access("create", "", "podtemplates", namespace=namespace)
            permissions.append(Permission(("get", "create"), template, needed_by))
    if not buffers.dry_run:
        lease_namespace = buffers.lease.namespace or settings.preflight.service_namespace
        lease = Access("get", "coordination.k8s.io", "leases", namespace=lease_namespace)
        permissions.append(Permission(("get", "create", "update"), lease, f"{needed_by}.lease"))
    return permissions


def _publication_permissions(settings: Settings) -> list[Permission]:
    """GPUForecast objects (read by every replica, written unless it only reads) and, sharded, the
    shard and membership Leases, all in ``publication.namespace`` (manifests/base: two Roles)."""
    publication = settings.publication
    if not publication.enabled:
        return []
    fix = "grant it in a Role in {namespace} (manifests/base/{file})"
    namespace = publication.namespace
    objects = Access("list", "gpu-autoscaler.io", "gpuforecasts", namespace=namespace)
    verbs = ("get", "list", "watch", "create", "update", "patch") if publication.publish else ("get", "list", "watch")
    permissions = [
        Permission(verbs, objects, "publication", fix.format(namespace=namespace, file="role-gpuforecasts.yaml"))
    ]
    if publication.sharding.enabled:
        leases = Access("get", "coordination.k8s.io", "leases", namespace=namespace)
        lease_fix = fix.format(namespace=namespace, file="role-shard-leases.yaml")
        permissions.append(
            Permission(("get", "list", "create", "update", "delete"), leases, "publication.sharding", lease_fix)
        )
    return permissions


def required_resources(settings: Settings) -> list[RequiredResource]:
    """The custom resources the settings read (one line each; a new reader adds its line here)."""
    inputs = settings.inputs
    buffers = [
        RequiredResource("autoscaling.x-k8s.io", "v1beta1", "capacitybuffers", "actuators.capacity_buffers",
                         BUFFERS_FIX, fallback_versions=("v1alpha1",))
    ] if settings.actuators.capacity_buffers is not None else []  # fmt: skip
    if settings.publication.enabled:
        crd_fix = "kubectl apply the GPUForecast CRD (manifests/base/crd-gpuforecasts.yaml)"
        buffers.append(RequiredResource("gpu-autoscaler.io", "v1alpha1", "gpuforecasts", "publication", crd_fix))
    if inputs is None:
        return buffers
    wanted = [
        (inputs.nodeclaims, RequiredResource("karpenter.sh", "v1", "nodeclaims", "inputs.nodeclaims",
                                             KARPENTER_FIX.format(setting="inputs.nodeclaims"))),
        (inputs.nodepools, RequiredResource("karpenter.sh", "v1", "nodepools", "inputs.nodepools",
                                            KARPENTER_FIX.format(setting="inputs.nodepools"))),
    ]  # fmt: skip
    return [resource for needed, resource in wanted if needed] + buffers


async def check_permission(api: ApiClient, permission: Permission) -> Check:
    access = permission.access
    name = f"rbac {','.join(permission.verbs)} {access.target}"
    denied: list[str] = []
    for verb in permission.verbs:
        answer = await kube_access.self_review(api, dataclasses.replace(access, verb=verb))
        if not answer.allowed:
            denied.append(verb + (f" ({answer.reason})" if answer.reason else ""))
    if not denied:
        return Check(name, True, f"allowed (needed by {permission.needed_by})")
    return Check(name, False, f"denied: {', '.join(denied)}; needed by {permission.needed_by}: {permission.fix}")


async def check_resources(api: ApiClient, resources: Sequence[RequiredResource]) -> list[Check]:
    checks: list[Check] = []
    served: dict[tuple[str, str], frozenset[str] | None] = {}
    for resource in resources:
        name = f"crd {resource.plural}.{resource.group}/{resource.version}"
        found = None
        for version in (resource.version, *resource.fallback_versions):
            key = (resource.group, version)
            if key not in served:
                served[key] = await kube_access.served_resources(api, *key)
            if resource.plural in (served[key] or ()):
                found = version
                break
        if found == resource.version:
            checks.append(Check(name, True, f"served (needed by {resource.needed_by})"))
        elif found is not None:
            checks.append(Check(name, True, f"served as {found} only (needed by {resource.needed_by})"))
        else:
            checks.append(Check(name, False, f"not served by the API; needed by {resource.needed_by}: {resource.fix}"))
    return checks


async def check_kueue(api: ApiClient) -> Check:
    """Whether Kueue is installed (its objects are listed in the first version served) and readable.
    Not installed is fine: nothing is queued through it."""
    versions = []
    try:
        for plural in kueue.PLURALS:
            listing = kueue.ServedVersionList(api, plural)
            await read_json(listing(limit=1, _preload_content=False), f"list {plural}.{kueue.GROUP}")
            versions.append(listing.version)
    except KubeNotFound:
        return Check("kueue", True, f"not found ({kueue.GROUP} serves no {kueue.PLURALS[len(versions)]}): no "
                     "Workload is counted as queued GPU demand (inputs.kueue)")  # fmt: skip
    except KubeForbidden as error:
        return Check("kueue", False, f"found but not read ({error}); needed by inputs.kueue: {CLUSTER_ROLE_FIX}")
    served = ", ".join(dict.fromkeys(versions))
    return Check("kueue", True, f"found ({kueue.GROUP}/{served}) and read: queued Workloads count as GPU demand")


def _authentication_problem(config: kube_auth.RequestHeaderConfig) -> str | None:
    if not config.client_ca_pem:
        return (
            "has no requestheader-client-ca-file: the aggregator's requests cannot be authenticated; "
            "start kube-apiserver with --requestheader-client-ca-file (kubeadm, EKS, GKE and AKS do)"
        )
    for key, pem in (
        ("requestheader-client-ca-file", config.client_ca_pem),
        ("client-ca-file", config.client_ca_file_pem),
    ):
        if pem:
            try:
                x509.load_pem_x509_certificates(pem.encode("ascii"))
            except ValueError as error:
                return f"{key} is not a PEM certificate bundle ({error})"
    return None


async def check_authentication_configmap(api: ApiClient) -> Check:
    namespace, name = kube_auth.REQUEST_HEADER_NAMESPACE, kube_auth.REQUEST_HEADER_CONFIGMAP
    check = f"configmap {namespace}/{name}"
    try:
        config = await kube_auth.read_request_header_config(api)
    except KubeNotFound:
        missing = "does not exist: kube-apiserver publishes it when it runs with --requestheader-client-ca-file"
        return Check(check, False, f"{missing}; without it the aggregator's requests cannot be authenticated")
    except KubeForbidden as error:
        return Check(check, False, f"cannot be read ({error}): {AUTH_READER_FIX}")
    except KubeError as error:
        if error.status is not None:  # answered, but unusable (a key that is not a JSON list)
            return Check(check, False, str(error))
        raise
    problem = _authentication_problem(config)
    if problem is not None:
        return Check(check, False, problem)
    names = ", ".join(config.allowed_names) or "any name"
    return Check(check, True, f"request-header CA present (allowed client names: {names})")


async def run_checks(api: ApiClient, settings: Settings) -> list[Check]:
    """Every check the settings call for, in a fixed order. Raises ``KubeError`` when the API cannot answer."""
    try:
        apiservice = await kube_access.read_apiservice(api, EXTERNAL_METRICS_APISERVICE)
        verdict = apiservice_check(apiservice, settings.preflight)
        name = f"apiservice {EXTERNAL_METRICS_APISERVICE}"
        checks = [Check(name, verdict.ok, verdict.message, blocks_start=verdict.blocks_start)]
    except KubeForbidden as error:
        checks = [
            Check(f"apiservice {EXTERNAL_METRICS_APISERVICE}", False, f"cannot be read ({error}): {CLUSTER_ROLE_FIX}")
        ]
    if settings.auth.mode == "kubernetes":
        checks.append(await check_authentication_configmap(api))
    for permission in required_permissions(settings):
        checks.append(await check_permission(api, permission))
    checks += await check_resources(api, required_resources(settings))
    if settings.inputs is not None and settings.inputs.kueue:
        checks.append(await check_kueue(api))
    return checks


class PreflightFailed(Exception):
    """A check that blocks the start (``serve``), or any check (``preflight``), found a problem; the
    message lists those problems."""

    def __init__(self, checks: Sequence[Check], *, blocking_only: bool = False) -> None:
        self.checks = tuple(checks)
        problems = [check for check in checks if not check.ok and (check.blocks_start or not blocking_only)]
        listed = "; ".join(f"{check.name}: {check.message}" for check in problems)
        super().__init__(f"preflight found {len(problems)} problem(s): {listed}")


def report_json(checks: Sequence[Check]) -> str:
    return json.dumps(
        {"ok": all(check.ok for check in checks), "checks": [asdict(check) for check in checks]}, indent=2
    )
