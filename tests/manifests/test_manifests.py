"""The Kubernetes manifests: rendered with kustomize, validated offline, checked for the facts they must hold.

- Built-in kinds (including APIService, apiregistration.k8s.io/v1) are validated against the Kubernetes
  JSON schemas that the ``kubernetes-validate`` package ships (``kube_schemas.KUBERNETES_VERSION``, its
  newest), in strict mode (unknown fields fail).
- The Karpenter NodePool is validated against the upstream CRD vendored in ``tests/data/schemas``
  (``tests/kube_schemas``, CEL rules included). The other custom resources (cert-manager
  Certificate/Issuer, Prometheus Operator ServiceMonitor/PrometheusRule) are validated with
  ``jsonschema`` against the reduced CRD schemas in ``schemas/``: those are hand-written after the
  published CRDs, because no package on the registries this project reaches ships them as JSON (see
  each file's ``$comment``).
- Semantics: the APIService points at the Service and its TLS port, containers are locked down, the
  served config passes ``gpu-autoscaler check-config``, HPA metric names are ones the service serves,
  placeholders fit the NodePool, alerts fire when they should (``promtool test rules``).
- checkov scans the rendered manifests and the Dockerfile (see ``checkov_bin``).

Tools that are missing skip these tests with a message, except under CI (tests/ci.py), where they fail.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from autoscaler.config.settings_loader import load_settings
from autoscaler.refresh.pipeline import metric_infos
from tests import ci, kube_schemas

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
HERE = Path(__file__).resolve().parent
SCHEMAS = HERE / "schemas"

EXTERNAL_METRICS_API = "overlays/external-metrics-api"
KUSTOMIZATIONS = (
    "base",
    "overlays/cert-manager",
    "overlays/insecure",
    "overlays/keda",
    EXTERNAL_METRICS_API,
    "monitoring",
    "examples",
    "examples-before-1.35",
    "examples/kueue",
    "examples/inference-from-zero/base",
    "examples/inference-from-zero/hpa",
    "examples/inference-from-zero/keda",
)
# Every render of the service; only EXTERNAL_METRICS_API registers it with an APIService.
SERVICES = ("base", "overlays/cert-manager", "overlays/insecure", "overlays/keda", EXTERNAL_METRICS_API)
KUBERNETES_VERSION = kube_schemas.KUBERNETES_VERSION
CRD_SCHEMAS = {
    ("cert-manager.io/v1", "Certificate"): "cert-manager.io/certificate_v1.json",
    ("cert-manager.io/v1", "Issuer"): "cert-manager.io/issuer_v1.json",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "monitoring.coreos.com/servicemonitor_v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "monitoring.coreos.com/prometheusrule_v1.json",
}
CHECKOV_VERSION = "3.3.30"

pytestmark = pytest.mark.kubectl


def missing_tool(message: str) -> None:
    ci.missing_tool(message)


# How to get each tool the manifests' tests run, for the skip reason.
HOW_TO_INSTALL = {
    "kubectl": "https://kubernetes.io/docs/tasks/tools/ (not packaged by Debian)",
    "promtool": "make system-deps (Debian package prometheus)",
}


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        missing_tool(f"{name} is not installed; to run these tests install it: {HOW_TO_INSTALL[name]}")
    assert path is not None
    return path


@functools.cache
def render(kustomization: str) -> tuple[dict[str, Any], ...]:
    result = subprocess.run(
        [tool("kubectl"), "kustomize", str(MANIFESTS / kustomization)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def objects(kustomization: str, kind: str) -> list[dict[str, Any]]:
    return [doc for doc in render(kustomization) if doc["kind"] == kind]


def one(kustomization: str, kind: str, name: str | None = None) -> dict[str, Any]:
    found = [doc for doc in objects(kustomization, kind) if name is None or doc["metadata"]["name"] == name]
    assert len(found) == 1, f"{kustomization}: expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def ident(doc: dict[str, Any]) -> str:
    meta = doc["metadata"]
    return f"{doc['kind']} {meta.get('namespace', '-')}/{meta['name']}"


def pod_specs(kustomization: str) -> list[tuple[str, dict[str, Any]]]:
    return [(ident(doc), doc["spec"]["template"]["spec"]) for doc in objects(kustomization, "Deployment")]


@functools.cache
def crd_validator(path: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / path).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


@pytest.fixture(scope="session")
def config_file(tmp_path_factory):
    """The service's config.yaml from a render's ConfigMap, written to a file."""
    directory = tmp_path_factory.mktemp("config")

    def extract(kustomization: str) -> Path:
        path = directory / f"{kustomization.replace('/', '-')}.yaml"
        path.write_text(one(kustomization, "ConfigMap", "gpu-autoscaler-config")["data"]["config.yaml"])
        return path

    return extract


# --- rendering and layout ------------------------------------------------------------------------------


def test_every_kustomization_is_covered():
    found = {str(path.parent.relative_to(MANIFESTS)) for path in MANIFESTS.rglob("kustomization.yaml")}
    assert found == set(KUSTOMIZATIONS)


def test_one_object_per_file():
    for path in MANIFESTS.rglob("*.yaml"):
        if path.name == "kustomization.yaml":
            continue
        docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        assert len(docs) == 1, f"{path.relative_to(ROOT)} holds {len(docs)} objects"
        assert {"apiVersion", "kind", "metadata"} <= docs[0].keys(), path


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_renders_unique_objects(kustomization):
    docs = render(kustomization)
    assert docs
    names = [ident(doc) for doc in docs]
    assert len(names) == len(set(names)), names


# --- schema validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_objects_validate_against_their_schemas(kustomization):
    for doc in render(kustomization):
        key = (doc["apiVersion"], doc["kind"])
        upstream = upstream_crd(doc)
        if upstream is not None:
            # The CRD as its project publishes it (tests/data/schemas), CEL rules included.
            try:
                kube_schemas.validate(*upstream, doc)
            except kube_schemas.Refused as refused:
                pytest.fail(f"{ident(doc)}: {refused}")
        elif key in CRD_SCHEMAS:
            errors = sorted(crd_validator(CRD_SCHEMAS[key]).iter_errors(doc), key=lambda e: list(e.absolute_path))
            assert not errors, f"{ident(doc)}: " + "; ".join(
                f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors
            )
        else:
            # Strict: a misspelt or misplaced field fails instead of being dropped by the API server.
            try:
                kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                pytest.fail(f"{ident(doc)}: neither a built-in kind nor a CRD with a schema in {SCHEMAS}")
            except kubernetes_validate.ValidationError as error:
                pytest.fail(f"{ident(doc)}: {'/'.join(map(str, error.path))}: {error.message}")


def test_kubernetes_validate_ships_the_version_and_catches_a_typo():
    deployment = copy.deepcopy(one("base", "Deployment"))
    kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    ("kustomization", "kind", "field"),
    [
        ("overlays/cert-manager", "Certificate", ("privateKey", "algorithm")),
        ("monitoring", "ServiceMonitor", ("endpoints", 0, "interval")),
    ],
)
def test_crd_schemas_refuse_typos_and_bad_values(kustomization, kind, field):
    doc = copy.deepcopy(objects(kustomization, kind)[0])
    validator = crd_validator(CRD_SCHEMAS[(doc["apiVersion"], kind)])
    misspelt = copy.deepcopy(doc)
    misspelt["spec"]["replicaz"] = 1
    assert not validator.is_valid(misspelt)
    bad = copy.deepcopy(doc)
    target = bad["spec"]
    for part in field[:-1]:
        target = target[part]
    target[field[-1]] = "Sometimes"
    assert not validator.is_valid(bad)


def upstream_crd(doc: dict[str, Any]) -> tuple[str, str] | None:
    """(group, kind) of an object whose CRD is vendored from its project (tests/data/schemas)."""
    group = doc["apiVersion"].rpartition("/")[0]
    return (group, doc["kind"]) if (group, doc["kind"]) in kube_schemas.CRDS else None


def test_the_example_nodepool_is_checked_against_the_upstream_crd():
    """The vendored Karpenter CRD refuses a typo, a bad enum value and what only its CEL rules catch."""
    nodepool = one("examples", "NodePool")
    kube_schemas.validate("karpenter.sh", "NodePool", nodepool)
    misspelt = copy.deepcopy(nodepool)
    misspelt["spec"]["replicaz"] = 1
    bad_value = copy.deepcopy(nodepool)
    bad_value["spec"]["disruption"]["consolidationPolicy"] = "Sometimes"
    restricted = copy.deepcopy(nodepool)
    restricted["spec"]["template"]["spec"]["requirements"].append(
        {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["other"]}
    )
    for refused in (misspelt, bad_value, restricted):
        with pytest.raises(kube_schemas.Refused):
            kube_schemas.validate("karpenter.sh", "NodePool", refused)


# --- the service: APIService, Service, Deployment, RBAC, config ----------------------------------------


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_only_the_explicit_overlay_holds_an_apiservice(kustomization):
    """A cluster has one external metrics provider: applying any other tree must never replace KEDA's
    or prometheus-adapter's APIService (whatever its group)."""
    apiservices = [doc["metadata"]["name"] for doc in objects(kustomization, "APIService")]
    assert apiservices == (["v1beta1.external.metrics.k8s.io"] if kustomization == EXTERNAL_METRICS_API else [])


def test_only_the_explicit_overlay_claims_the_apiservice_at_start_up(config_file):
    for kustomization in SERVICES:
        container = one(kustomization, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        settings = load_settings(config_file(kustomization), environ=env)
        assert settings.preflight.claim_apiservice is (kustomization == EXTERNAL_METRICS_API), kustomization


def test_apiservice_points_at_the_service_tls_port():
    kustomization = EXTERNAL_METRICS_API
    api = one(kustomization, "APIService", "v1beta1.external.metrics.k8s.io")["spec"]
    assert (api["group"], api["version"]) == ("external.metrics.k8s.io", "v1beta1")
    assert (api["groupPriorityMinimum"], api["versionPriority"]) == (100, 100)
    ref = api["service"]
    service = one(kustomization, "Service", ref["name"])
    assert service["metadata"]["namespace"] == ref["namespace"]
    port = next(p for p in service["spec"]["ports"] if p["port"] == ref["port"])
    assert port["name"] == "https"
    deployment = one(kustomization, "Deployment", "gpu-autoscaler")
    pod = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    container_ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert container_ports[port["targetPort"]] == 6443
    http = next(p for p in service["spec"]["ports"] if p["name"] == "http")
    assert container_ports[http["targetPort"]] == 8080


def test_external_metrics_overlay_injects_the_ca_of_the_mounted_certificate():
    api = one(EXTERNAL_METRICS_API, "APIService")
    assert "insecureSkipTLSVerify" not in api["spec"] and "caBundle" not in api["spec"]
    namespace, name = api["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split("/")
    certificate = one("overlays/cert-manager", "Certificate", name)
    assert certificate["metadata"]["namespace"] == namespace
    service = api["spec"]["service"]
    assert f"{service['name']}.{service['namespace']}.svc" in certificate["spec"]["dnsNames"]
    assert "server auth" in certificate["spec"]["usages"]
    volumes = one("overlays/cert-manager", "Deployment")["spec"]["template"]["spec"]["volumes"]
    secrets = {v["secret"]["secretName"] for v in volumes if "secret" in v}
    assert certificate["spec"]["secretName"] in secrets
    # Each Issuer used exists, in the same namespace, and the chain ends in a self-signed one.
    issuers = {doc["metadata"]["name"]: doc for doc in objects("overlays/cert-manager", "Issuer")}
    seen = set()
    while name not in seen:
        seen.add(name)
        issuer = issuers[one("overlays/cert-manager", "Certificate", name)["spec"]["issuerRef"]["name"]]
        assert issuer["metadata"]["namespace"] == namespace
        if "selfSigned" in issuer["spec"]:
            break
        ca_secret = issuer["spec"]["ca"]["secretName"]
        name = next(
            c["metadata"]["name"]
            for c in objects("overlays/cert-manager", "Certificate")
            if c["spec"]["secretName"] == ca_secret
        )
        assert one("overlays/cert-manager", "Certificate", name)["spec"]["isCA"] is True
    else:
        pytest.fail("issuer chain loops")


def test_insecure_overlay_generates_its_own_certificate(config_file):
    pod = one("overlays/insecure", "Deployment")["spec"]["template"]["spec"]
    assert not [v for v in pod["volumes"] if "secret" in v], "no Secret to wait for"
    env = {e["name"]: e.get("value") for e in pod["containers"][0].get("env", [])}
    settings = load_settings(config_file("overlays/insecure"), environ=env)
    assert settings.server.tls.cert_file is None and settings.server.tls.key_file is None
    # The self-signed certificate is written to the state dir: it must be on the writable emptyDir.
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert any(str(settings.state_dir).startswith(mount + "/") for mount in mounts)


def gpu_autoscaler_cli() -> str:
    for candidate in (Path(sys.executable).parent / "gpu-autoscaler", ROOT / ".venv" / "bin" / "gpu-autoscaler"):
        if candidate.exists():
            return str(candidate)
    missing_tool("the gpu-autoscaler command is not installed (make test installs it into .venv)")
    raise AssertionError  # unreachable


CHECKED_CONFIGS: dict[str, subprocess.CompletedProcess[str]] = {}


def check_config(path: Path) -> subprocess.CompletedProcess[str]:
    """`gpu-autoscaler check-config` (about 2 s of imports), once per distinct config text."""
    text = path.read_text()
    if text not in CHECKED_CONFIGS:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("GPU_AUTOSCALER_")}
        CHECKED_CONFIGS[text] = subprocess.run(
            [gpu_autoscaler_cli(), "check-config", str(path)],
            capture_output=True,
            text=True,
            env=environ,
            timeout=60,
            check=False,
        )
    return CHECKED_CONFIGS[text]


@pytest.mark.parametrize("kustomization", SERVICES)
def test_configmap_passes_check_config(kustomization, config_file):
    path = config_file(kustomization)
    result = check_config(path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(": valid")
    settings = load_settings(path, environ={})
    assert settings.auth.mode == "kubernetes"
    assert (settings.server.secure_port, settings.server.http_port) == (6443, 8080)
    # Each metric the shipped configuration serves says what it counts (the page shows it beside the value).
    units = {info.name: info.unit for info in metric_infos(settings)}
    assert units and all(units.values()), units
    assert units.get("gpu_headroom") == "GPUs"


@pytest.mark.parametrize("kustomization", SERVICES)
def test_deployment_mounts_what_the_config_names(kustomization, config_file):
    deployment = one(kustomization, "Deployment", "gpu-autoscaler")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    args = container["args"]
    config_path = Path(args[args.index("--config") + 1])
    config_mount = mounts[str(config_path.parent)]
    assert config_mount["readOnly"] is True
    assert volumes[config_mount["name"]]["configMap"]["name"] == "gpu-autoscaler-config"
    settings = load_settings(config_file(kustomization), environ={})
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    if "GPU_AUTOSCALER_SERVER__TLS__CERT_FILE" not in env:
        for path in (settings.server.tls.cert_file, settings.server.tls.key_file):
            assert path is not None
            mount = mounts[str(path.parent)]
            assert mount["readOnly"] is True
            assert "secret" in volumes[mount["name"]]
    state_dir = args[args.index("--state-dir") + 1]
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]] and state_dir.startswith("/tmp/")
    assert deployment["spec"]["replicas"] == 2
    assert pod["automountServiceAccountToken"] is True
    assert container["image"] == "ghcr.io/gpu-autoscaler/gpu-autoscaler:0.1.0"
    for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz"), ("startupProbe", "/livez")):
        assert container[probe]["httpGet"] == {"path": path, "port": "http"}, probe
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert pod["topologySpreadConstraints"]


@pytest.mark.parametrize("kustomization", SERVICES)
def test_shutdown_fits_the_termination_grace_period(kustomization, config_file):
    """SIGKILL never lands inside the shutdown delay or the drain that follows it."""
    pod = one(kustomization, "Deployment", "gpu-autoscaler")["spec"]["template"]["spec"]
    server = load_settings(config_file(kustomization), environ={}).server
    assert server.shutdown_delay.total_seconds() >= 5  # endpoints and the aggregator need time to notice
    needed = server.shutdown_delay + server.shutdown_grace
    assert pod["terminationGracePeriodSeconds"] >= needed.total_seconds() + 5


@pytest.mark.parametrize("kustomization", [*SERVICES, "examples"])
def test_every_container_is_locked_down(kustomization):
    for name, pod in pod_specs(kustomization):
        pod_context = pod.get("securityContext", {})
        assert pod_context.get("seccompProfile", {}).get("type") == "RuntimeDefault", name
        for container in pod["containers"] + pod.get("initContainers", []):
            context = container.get("securityContext", {})
            where = f"{name} container {container['name']}"
            assert context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is True, where
            assert context.get("runAsUser", pod_context.get("runAsUser", 0)) != 0, where
            assert context.get("readOnlyRootFilesystem") is True, where
            assert context.get("allowPrivilegeEscalation") is False, where
            assert context.get("privileged", False) is False, where
            assert context.get("capabilities", {}).get("drop") == ["ALL"], where
            assert not context.get("capabilities", {}).get("add"), where


def test_pod_disruption_budget_keeps_one_replica():
    pdb = one("base", "PodDisruptionBudget")["spec"]
    labels = one("base", "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pdb["minAvailable"] == 1
    assert pdb["selector"]["matchLabels"].items() <= labels.items()


def test_rbac():
    docs = render("base")
    service_account = one("base", "ServiceAccount")
    sa = {"kind": "ServiceAccount", "name": "gpu-autoscaler", "namespace": "gpu-autoscaler"}
    assert service_account["metadata"]["name"] == sa["name"]
    assert service_account["metadata"]["namespace"] == sa["namespace"]
    bindings = {
        (doc["kind"], doc["roleRef"]["kind"], doc["roleRef"]["name"], doc["metadata"].get("namespace")): doc["subjects"]
        for doc in docs
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding")
    }
    assert sa in bindings[("ClusterRoleBinding", "ClusterRole", "system:auth-delegator", None)]
    assert sa in bindings[("RoleBinding", "Role", "extension-apiserver-authentication-reader", "kube-system")]
    assert sa in bindings[("ClusterRoleBinding", "ClusterRole", "gpu-autoscaler", None)]
    hpa = {"kind": "ServiceAccount", "name": "horizontal-pod-autoscaler", "namespace": "kube-system"}
    assert hpa in bindings[("ClusterRoleBinding", "ClusterRole", "gpu-autoscaler:external-metrics-reader", None)]

    def grants(role_name):
        role = one("base", "ClusterRole", role_name)
        return {
            (group, resource, verb)
            for rule in role["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }

    reads = grants("gpu-autoscaler")
    for group, resource in (
        ("batch", "cronjobs"),
        ("batch", "jobs"),
        ("karpenter.sh", "nodeclaims"),
        ("karpenter.sh", "nodepools"),
        ("", "resourcequotas"),
        ("", "pods"),
        ("resource.k8s.io", "resourceclaims"),
        ("resource.k8s.io", "resourceclaimtemplates"),
        ("resource.k8s.io", "resourceslices"),
        ("resource.k8s.io", "deviceclasses"),
        ("kueue.x-k8s.io", "workloads"),
        ("kueue.x-k8s.io", "localqueues"),
        ("kueue.x-k8s.io", "clusterqueues"),
        ("kueue.x-k8s.io", "resourceflavors"),
        ("kueue.x-k8s.io", "admissionchecks"),
    ):
        assert {(group, resource, verb) for verb in ("get", "list", "watch")} <= reads
    assert ("authentication.k8s.io", "tokenreviews", "create") in reads
    assert ("authorization.k8s.io", "subjectaccessreviews", "create") in reads
    # Read-only apart from the two reviews.
    assert {verb for _, _, verb in reads} == {"get", "list", "watch", "create"}
    assert {(group, resource) for group, resource, verb in reads if verb == "create"} == {
        ("authentication.k8s.io", "tokenreviews"),
        ("authorization.k8s.io", "subjectaccessreviews"),
    }
    assert ("apiregistration.k8s.io", "apiservices", "get") in reads
    assert grants("gpu-autoscaler:external-metrics-reader") == {
        ("external.metrics.k8s.io", "*", "get"),
        ("external.metrics.k8s.io", "*", "list"),
    }


@pytest.mark.parametrize("kustomization", SERVICES)
def test_rbac_grants_what_preflight_checks(kustomization, config_file):
    """Every permission ``gpu-autoscaler preflight`` asks about for the shipped config is granted here."""
    from autoscaler.checks.preflight import required_permissions

    settings = load_settings(config_file(kustomization), environ={})
    cluster_rules = one(kustomization, "ClusterRole", "gpu-autoscaler")["rules"]
    for permission in required_permissions(settings):
        access = permission.access
        if (access.resource, access.namespace) == ("configmaps", "kube-system"):
            continue  # the built-in Role extension-apiserver-authentication-reader (test_rbac: its binding)
        # A namespaced permission may come from a Role in that namespace bound to the service account.
        role_rules = [
            rule
            for role in objects(kustomization, "Role")
            if access.namespace is not None and role["metadata"].get("namespace") == access.namespace
            and any(binding["roleRef"]["name"] == role["metadata"]["name"]
                    for binding in objects(kustomization, "RoleBinding")
                    if binding["metadata"].get("namespace") == access.namespace)
            for rule in role["rules"]
        ]  # fmt: skip
        for verb in permission.verbs:
            assert any(
                access.group in rule["apiGroups"]
                and access.resource in rule["resources"]
                and verb in rule["verbs"]
                and (access.name is None or "resourceNames" not in rule or access.name in rule["resourceNames"])
                and ("resourceNames" not in rule or access.name is not None)
                for rule in cluster_rules + role_rules
            ), f"{kustomization}: neither ClusterRole gpu-autoscaler nor a bound Role grants {verb} {access}"


def test_network_policy():
    policy = one("base", "NetworkPolicy")["spec"]
    labels = one("base", "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    api_rule = next(rule for rule in policy["ingress"] if {"port": 6443, "protocol": "TCP"} in rule["ports"])
    assert "from" not in api_rule, "the aggregator's source address cannot be selected"
    metrics_rule = next(rule for rule in policy["ingress"] if {"port": 8080, "protocol": "TCP"} in rule["ports"])
    namespaces = [peer["namespaceSelector"]["matchLabels"] for peer in metrics_rule["from"]]
    assert {"kubernetes.io/metadata.name": "monitoring"} in namespaces
    egress_ports = {(port["port"], port["protocol"]) for rule in policy["egress"] for port in rule["ports"]}
    assert {(53, "UDP"), (53, "TCP"), (443, "TCP"), (9090, "TCP")} <= egress_ports


def test_objects_name_their_namespaces():
    """No kustomize `namespace:` override: the RoleBinding must stay in kube-system."""
    for kustomization in KUSTOMIZATIONS:
        text = (MANIFESTS / kustomization / "kustomization.yaml").read_text()
        assert not re.search(r"^namespace:", text, re.M), kustomization
    reader = one("base", "RoleBinding", "gpu-autoscaler:extension-apiserver-authentication-reader")
    assert reader["metadata"]["namespace"] == "kube-system"
    assert one("base", "RoleBinding", "gpu-autoscaler:gpuforecasts")["metadata"]["namespace"] == "gpu-autoscaler"


# --- examples: placeholders, HPAs, NodePool, time-slicing ---------------------------------------------


def test_placeholder_priority_class():
    priority = one("examples", "PriorityClass", "gpu-placeholder")
    assert priority["value"] == -10
    assert priority["globalDefault"] is False
    assert priority["preemptionPolicy"] == "Never"


def test_placeholders_fit_the_gpu_nodepool():
    deployment = one("examples", "Deployment", "gpu-placeholder")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "gpu-placeholder"
    assert pod["terminationGracePeriodSeconds"] == 0
    (container,) = pod["containers"]
    assert container["image"] == "registry.k8s.io/pause:3.10"
    resources = container["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == 1 and resources["limits"]["nvidia.com/gpu"] == 1
    annotations = deployment["spec"]["template"]["metadata"].get("annotations", {})
    assert "karpenter.sh/do-not-disrupt" not in annotations
    nodepool = one("examples", "NodePool")
    assert pod["nodeSelector"] == {"karpenter.sh/nodepool": nodepool["metadata"]["name"]}
    for taint in nodepool["spec"]["template"]["spec"]["taints"]:
        assert any(
            toleration["key"] == taint["key"]
            and toleration.get("effect") == taint["effect"]
            and (toleration.get("operator") == "Exists" or toleration.get("value") == taint.get("value"))
            for toleration in pod["tolerations"]
        ), taint


def test_nodepool():
    spec = one("examples", "NodePool", "gpu")["spec"]
    assert spec["limits"]["nvidia.com/gpu"] == 64
    assert spec["template"]["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    assert spec["template"]["spec"]["nodeClassRef"] == {
        "group": "karpenter.k8s.aws",
        "kind": "EC2NodeClass",
        "name": "default",
    }
    disruption = spec["disruption"]
    assert (disruption["consolidationPolicy"], disruption["consolidateAfter"]) == ("WhenEmpty", "10m")
    assert any("schedule" in budget and "duration" in budget for budget in disruption["budgets"])


def hpa_metrics(kustomization: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [
        (hpa, metric["external"])
        for hpa in objects(kustomization, "HorizontalPodAutoscaler")
        for metric in hpa["spec"]["metrics"]
        if metric["type"] == "External"
    ]


def test_the_placeholder_hpa_follows_the_headroom_to_the_gpu():
    """Tolerance 0 on the way up (the cluster-wide 10 % would make the headroom a staircase), a small
    one on the way down; Kubernetes 1.35's schema takes it, 1.32's refuses the field, and the
    fallback tree for older clusters is the same HPA without it, valid there."""
    hpa = one("examples", "HorizontalPodAutoscaler", "gpu-placeholder")
    behavior = hpa["spec"]["behavior"]
    assert behavior["scaleUp"]["tolerance"] == "0"
    assert 0 < float(behavior["scaleDown"]["tolerance"]) <= 0.05
    kubernetes_validate.validate(hpa, "1.35", strict=True)
    with pytest.raises(kubernetes_validate.ValidationError, match="tolerance"):
        kubernetes_validate.validate(hpa, "1.32", strict=True)
    older = one("examples-before-1.35", "HorizontalPodAutoscaler", "gpu-placeholder")
    kubernetes_validate.validate(older, "1.32", strict=True)
    without = copy.deepcopy(hpa)
    for rules in without["spec"]["behavior"].values():
        del rules["tolerance"]
    assert older == without
    # Everything else in the fallback tree is the examples' own.
    assert [ident(doc) for doc in render("examples-before-1.35")] == [ident(doc) for doc in render("examples")]


def test_hpa_metric_names_are_served():
    # The service's metric list (autoscaler/refresh/demo.py; `serve` uses it outside the demo too). Imported
    # here so that a move breaks this test only, with a clear ImportError.
    from autoscaler.refresh.demo import METRICS

    served = {info.name for info in METRICS}
    assert {"gpu_demand_forecast", "gpu_headroom", "request_rate_forecast"} <= served
    names = {external["metric"]["name"] for _, external in hpa_metrics("examples")}
    assert names == {"gpu_headroom", "request_rate_forecast"}
    assert names <= served


def test_hpa_selectors_match_the_configured_series(config_file):
    """Each HPA asks for a configured metric by labels its signal actually carries."""
    settings = load_settings(config_file("base"), environ={})
    signals = {signal.name: signal for signal in settings.signals}
    for hpa, external in hpa_metrics("examples"):
        name = external["metric"]["name"]
        assert name in settings.metrics, f"{hpa['metadata']['name']}: {name} is not configured"
        signal = signals[settings.metrics[name].signal]
        assert set(external["metric"]["selector"]["matchLabels"]) <= set(signal.by or ()), name
    placeholder = one("examples", "Deployment", "gpu-placeholder")["metadata"]["namespace"]
    assert settings.metrics["gpu_headroom"].placeholder_namespace == placeholder


def test_gpus_requested_is_the_preset_without_placeholders(config_file):
    """The ConfigMap counts GPUs with the preset, leaving the placeholders' namespace out."""
    from autoscaler.refresh.sources import signal_query

    settings = load_settings(config_file("base"), environ={})
    signal = next(signal for signal in settings.signals if signal.name == "gpus_requested")
    placeholder = one("examples", "Deployment", "gpu-placeholder")["metadata"]["namespace"]
    assert signal.preset == "gpus_requested" and signal.by == ("nodepool",)
    assert signal.exclude_namespaces == (placeholder,)
    query = signal_query(signal)
    assert query.per_step == "peak" and query.zero_when_absent and query.liveness and query.pools
    assert f'namespace!~"{placeholder}"' in query.promql


def test_configured_queries_parse(config_file, tmp_path):
    from autoscaler.refresh.sources import signal_query

    promtool = tool("promtool")
    settings = load_settings(config_file("base"), environ={})
    # What is sent to Prometheus, subquery included, with each exporter's liveness and the known pools.
    queries = [signal_query(spec) for spec in settings.signals]
    checks = [check for query in queries for check in (query.liveness_query(), query.pools_query()) if check]
    rules = [{"record": f"signal:{q.name.replace(':', '_')}", "expr": q.range_promql} for q in queries + checks]
    assert len(checks) == 3  # gpus_requested: liveness and pools; request_rate: liveness
    path = tmp_path / "signals.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "signals", "rules": rules}]}))
    checked = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_stale_alert_threshold_is_the_staleness_ttl(config_file):
    settings = load_settings(config_file("base"), environ={})
    ttls = {metric.staleness_ttl.total_seconds() for metric in settings.metrics.values()}
    rule = next(
        rule for group in rule_groups() for rule in group["rules"] if rule.get("alert") == "GpuAutoscalerForecastStale"
    )
    threshold = float(re.search(r">\s*([0-9.]+)", rule["expr"]).group(1))
    assert ttls == {threshold}


def test_hpas_target_what_they_should():
    by_name = {hpa["metadata"]["name"]: (hpa, external) for hpa, external in hpa_metrics("examples")}
    hpa, external = by_name["gpu-placeholder"]
    spec = hpa["spec"]
    assert spec["scaleTargetRef"]["name"] == "gpu-placeholder"
    assert one("examples", "Deployment", "gpu-placeholder")["metadata"]["namespace"] == hpa["metadata"]["namespace"]
    assert external["metric"]["selector"]["matchLabels"] == {
        "nodepool": one("examples", "NodePool")["metadata"]["name"]
    }
    assert external["target"] == {"type": "AverageValue", "averageValue": "1"}
    assert spec["minReplicas"] == 1  # 0 needs the HPAScaleToZero feature gate
    assert spec["maxReplicas"] < one("examples", "NodePool")["spec"]["limits"]["nvidia.com/gpu"]
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300
    hpa, external = by_name["inference"]
    assert external["metric"]["name"] == "request_rate_forecast"
    assert external["target"] == {"type": "AverageValue", "averageValue": "20"}


def test_time_slicing_config():
    config_map = one("examples", "ConfigMap", "time-slicing-config")
    configs = {key: yaml.safe_load(text) for key, text in config_map["data"].items()}
    assert "sharing" not in configs["default"], "the default keeps GPUs whole for placeholders"
    sliced = configs["time-sliced-4"]
    assert sliced["version"] == "v1"
    assert sliced["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]


# --- monitoring ----------------------------------------------------------------------------------------


def test_service_monitor_scrapes_the_http_port():
    monitor = one("monitoring", "ServiceMonitor")["spec"]
    service = one("base", "Service")
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert service["metadata"]["namespace"] in monitor["namespaceSelector"]["matchNames"]
    (endpoint,) = monitor["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics")


def rule_groups() -> list[dict[str, Any]]:
    return one("monitoring", "PrometheusRule")["spec"]["groups"]


def test_alerts_cover_what_an_operator_needs():
    rules = {rule["alert"]: rule for group in rule_groups() for rule in group["rules"] if "alert" in rule}
    expected = {
        "GpuAutoscalerForecastStale": "gpu_autoscaler_series_age_seconds",
        "GpuAutoscalerPullsFailing": "gpu_autoscaler_refresh_failures_total",
        "GpuAutoscalerGpusShort": "gpu_autoscaler_gpus_short",
        "GpuAutoscalerWindowPodsLate": "gpu_autoscaler_window_start_delay_seconds_bucket",
        "GpuAutoscalerCoverageBelowQuantile": "gpu_autoscaler_coverage_judged_total",
        "GpuAutoscalerNodeClaimLaunchesFailing": "gpu_autoscaler_nodeclaim_launch_failures_total",
        "GpuAutoscalerAPIServiceUnavailable": (
            'aggregator_unavailable_apiservice{name="v1beta1.external.metrics.k8s.io"}'
        ),
        # The SRE workbook's windows and burn rates (issue #36), against each headroom's target.
        "GpuAutoscalerErrorBudgetBurnFast": "ratio_rate1h",
        "GpuAutoscalerErrorBudgetBurnSlow": "ratio_rate6h",
    }
    for alert, needle in expected.items():
        assert needle in rules[alert]["expr"], alert
    for alert, (long, short, rate) in {
        "GpuAutoscalerErrorBudgetBurnFast": ("1h", "5m", "14.4"),
        "GpuAutoscalerErrorBudgetBurnSlow": ("6h", "30m", "6"),
    }.items():
        burns = re.findall(
            r"ratio_rate(\w+)\s*/ on \(namespace, nodepool\) group_right\s*max by \(namespace, nodepool, "
            r"metric\) \(gpu_autoscaler_target_ratio\)\s*\) > ([0-9.]+)",
            rules[alert]["expr"],
        )
        assert burns == [(long, rate), (short, rate)], alert
    # Live outcomes replace the backtest's hold-out figure (issue #26).
    assert "GpuAutoscalerUnderProvisioning" not in rules
    for rule in rules.values():
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_alert_rules_pass_promtool(tmp_path):
    promtool = tool("promtool")
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule_groups()}))
    checked = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # Unit tests pin when each alert fires; annotations are templates, checked above, not pinned.
    bare = copy.deepcopy(rule_groups())
    for group in bare:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    rules.write_text(yaml.safe_dump({"groups": bare}))
    shutil.copy(HERE / "alerts_test.yaml", tmp_path / "alerts_test.yaml")
    tested = subprocess.run(
        [promtool, "test", "rules", str(tmp_path / "alerts_test.yaml")], capture_output=True, text=True, check=False
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def dashboard() -> dict[str, Any]:
    config_map = one("monitoring", "ConfigMap", "gpu-autoscaler-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    ((name, text),) = config_map["data"].items()
    assert name.endswith(".json")
    return json.loads(text)


def test_dashboard_panels_show_the_service_metrics():
    exprs = " ".join(target["expr"] for panel in dashboard()["panels"] for target in panel["targets"])
    for metric in (
        "gpu_autoscaler_served_value",
        "gpu_autoscaler_series_age_seconds",
        "gpu_autoscaler_api_requests_total",
        "gpu_autoscaler_api_request_duration_seconds",
    ):
        assert metric in exprs, metric
    ids = [panel["id"] for panel in dashboard()["panels"]]
    assert len(ids) == len(set(ids))


def test_dashboard_queries_parse(tmp_path):
    """Grafana variables replaced by plain values, each query must be valid PromQL (as a recording rule)."""
    promtool = tool("promtool")
    replacements = {"$__rate_interval": "5m", "$namespace": ".*", "$metric": ".*"}
    rules = []
    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in replacements.items():
                expr = expr.replace(variable, value)
            assert "$" not in expr, expr
            rules.append({"record": f"dashboard:panel_{panel['id']}_{target['refId']}", "expr": expr})
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


# --- README and the documentation site ----------------------------------------------------------------


def documented_texts() -> dict[str, str]:
    """The README and every page of the documentation site (docs/), by path."""
    pages = sorted((ROOT / "docs").rglob("*.md"))
    return {path.relative_to(ROOT).as_posix(): path.read_text() for path in [ROOT / "README.md", *pages]}


def test_documented_manifest_paths_exist():
    texts = documented_texts()
    for name, text in texts.items():
        for path in set(re.findall(r"(?<![\w/])manifests/[\w./-]+", text)):
            assert (ROOT / path.rstrip(".")).exists(), (name, path)
    assert "manifests/overlays/external-metrics-api" in texts["README.md"]
    assert "manifests/overlays/external-metrics-api" in texts["docs/deploying.md"]


@pytest.mark.parametrize(("document", "heading"), [("README.md", "## "), ("docs/deploying.md", "# ")])
def test_the_deploy_section_starts_with_the_preflight(document: str, heading: str):
    text = (ROOT / document).read_text()
    section = text[text.index(f"{heading}Deploying to a cluster\n") :]
    first_block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert first_block is not None
    # The command as a clone has it after `make run`: in .venv/bin, not on the PATH.
    assert first_block.group(1).splitlines()[0] == ".venv/bin/gpu-autoscaler preflight"
    # What to have first, then the preflight, which says which overlay to apply, before any `kubectl apply`.
    order = [section.index(text) for text in ("Before you start", "gpu-autoscaler preflight", "kubectl apply")]
    assert order == sorted(order)


def test_the_deploying_page_lists_its_steps_in_its_table_of_contents():
    headings = re.findall(r"^## (.+)$", (ROOT / "docs/deploying.md").read_text(), re.M)
    steps = [heading for heading in headings if heading.startswith("Step ")]
    assert [step.split(":")[0] for step in steps] == [f"Step {n}" for n in range(5)]
    assert headings.index("Before you start") < headings.index(steps[0])


# --- checkov -------------------------------------------------------------------------------------------


def checkov_bin() -> str:
    """checkov, kept out of the project's .venv on purpose.

    checkov pins packaging<24, cachetools<6 and aiohttp<3.15 among others: installed into .venv it
    downgrades a runtime dependency of the service (cachetools) and caps aiohttp for the whole test
    suite. So it lives in its own virtual environment, .venv/tools/checkov (removed by `make clean`).
    $CHECKOV or a checkov on PATH take precedence. Under CI=true a missing one is installed there
    (about 45 s, once per clone); elsewhere the test skips and says how to install it.
    """
    home = ROOT / ".venv" / "tools" / "checkov"
    candidates = [os.environ.get("CHECKOV"), shutil.which("checkov"), str(home / "bin" / "checkov")]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    install = f"python3 -m venv {home} && {home}/bin/pip install checkov=={CHECKOV_VERSION}"
    if not ci.under_ci():
        pytest.skip(f"checkov is not installed; to run this scan: {install}")
    venv.EnvBuilder(with_pip=True, clear=True).create(home)
    result = subprocess.run(
        [str(home / "bin" / "pip"), "install", "--quiet", f"checkov=={CHECKOV_VERSION}"],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"CI=true and checkov could not be installed ({install}):\n{result.stderr[-2000:]}")
    return str(home / "bin" / "checkov")


@pytest.mark.timeout(600)
def test_checkov_finds_nothing_unexplained(tmp_path):
    checkov = checkov_bin()
    for kustomization in KUSTOMIZATIONS:
        rendered = "---\n".join(yaml.safe_dump(doc, sort_keys=False) for doc in render(kustomization))
        (tmp_path / f"{kustomization.replace('/', '-')}.yaml").write_text(rendered)
    shutil.copy(ROOT / "Dockerfile", tmp_path / "Dockerfile")
    result = subprocess.run(
        [
            checkov,
            "--directory",
            str(tmp_path),
            "--framework",
            "kubernetes",
            "dockerfile",
            "--skip-download",  # offline: no guideline or policy download
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    frameworks = {report["check_type"] for report in reports}
    assert {"kubernetes", "dockerfile"} <= frameworks, result.stdout[-2000:] + result.stderr[-2000:]
    failed = [
        f"{check['check_id']} {check['resource']} ({check['file_path']}): {check['check_name']}"
        for report in reports
        for check in report["results"]["failed_checks"]
    ]
    assert not failed, "\n".join(failed)
    # Every skip carries its reason (annotation `checkov.io/skipN: ID=reason` on the object).
    for report in reports:
        for check in report["results"]["skipped_checks"]:
            reason = check["check_result"].get("suppress_comment")
            assert reason not in (None, "", "No comment provided"), f"{check['check_id']} {check['resource']}"
    assert result.returncode == 0, result.stderr[-2000:]


# --- the ops port and the gRPC port ask who is calling (issue #30) ------------------------------------


def _container(kustomization: str) -> dict[str, Any]:
    return one(kustomization, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def test_the_ops_port_needs_a_token_and_listens_on_the_pod_ip(config_file):
    for kustomization in SERVICES:
        container = _container(kustomization)
        env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        settings = load_settings(config_file(kustomization), environ=env)
        assert settings.server.http_auth == "delegated", kustomization
        bind = next(e for e in container["env"] if e["name"] == "GPU_AUTOSCALER_SERVER__BIND_ADDRESS")
        assert bind["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}, kustomization
        # The kubelet's probes reach the pod IP, and only paths that stay open without a token.
        probes = [container[name]["httpGet"] for name in ("startupProbe", "livenessProbe", "readinessProbe")]
        assert {probe["path"] for probe in probes} <= {"/healthz", "/livez", "/readyz"}, kustomization


def test_prometheus_presents_a_token_that_may_read_the_metrics():
    monitor = one("monitoring", "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["authorization"]["type"] == "Bearer"
    credentials = endpoint["authorization"]["credentials"]
    secret = one("monitoring", "Secret", credentials["name"])
    # The token controller fills the Secret's token for its ServiceAccount, in the monitor's namespace.
    assert (secret["type"], credentials["key"]) == ("kubernetes.io/service-account-token", "token")
    assert secret["metadata"]["namespace"] == monitor["metadata"]["namespace"]
    account = one(
        "monitoring", "ServiceAccount", secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    )
    role = one("monitoring", "ClusterRole", "gpu-autoscaler:metrics-reader")
    assert role["rules"] == [{"nonResourceURLs": [endpoint["path"]], "verbs": ["get"]}]
    binding = one("monitoring", "ClusterRoleBinding", "gpu-autoscaler:metrics-reader")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": account["metadata"]["namespace"]}
    ]


def test_kedas_calls_are_authorised_for_the_user_its_certificate_names(config_file):
    container = _container("overlays/keda")
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    settings = load_settings(config_file("overlays/keda"), environ=env)
    assert settings.server.grpc_authorization == "subjectaccessreview"
    assert settings.server.grpc_client_ca_file is not None  # the identity comes from a client certificate
    certificate = one("overlays/keda", "Certificate", "gpu-autoscaler-keda-client")
    binding = one("overlays/keda", "ClusterRoleBinding", "gpu-autoscaler:keda-external-metrics-reader")
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": certificate["spec"]["commonName"]}
    ]
    role = one("overlays/keda", "ClusterRole", binding["roleRef"]["name"])
    assert {"apiGroups": ["external.metrics.k8s.io"], "resources": ["*"], "verbs": ["get", "list"]} in role["rules"]
