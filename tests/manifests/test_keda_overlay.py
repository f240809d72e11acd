"""manifests/overlays/keda: the service beside KEDA, which keeps the external metrics APIService and
calls the service's External Scaler over gRPC. Every object's schema (KEDA's own CRDs, vendored in
tests/data/schemas) is checked by test_manifests.test_objects_validate_against_their_schemas; here,
what the objects must say to one another."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from autoscaler.config.settings_loader import load_settings
from tests import kube_schemas
from tests.manifests.test_manifests import config_file, objects, one, render

__all__ = ["config_file"]  # the fixture, used here

KEDA = "overlays/keda"
GRPC_PORT = 6000

pytestmark = pytest.mark.kubectl


def container_env(kustomization: str) -> dict[str, str]:
    container = one(kustomization, "Deployment", "gpu-autoscaler")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}  # POD_NAME: valueFrom


def test_the_overlay_is_the_cert_manager_install_plus_kedas_objects():
    assert objects(KEDA, "APIService") == []
    cert_manager = {(d["kind"], d["metadata"]["name"]) for d in render("overlays/cert-manager")}
    keda = {(d["kind"], d["metadata"]["name"]) for d in render(KEDA)}
    assert cert_manager <= keda


def test_grpc_port_on_the_container_and_the_service():
    container = one(KEDA, "Deployment", "gpu-autoscaler")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"} in container["ports"]
    ports = one(KEDA, "Service", "gpu-autoscaler")["spec"]["ports"]
    assert {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP"} in ports
    assert {p["name"] for p in ports} == {"https", "http", "grpc"}


def test_the_preflight_leaves_the_apiservice_to_keda(config_file):
    settings = load_settings(config_file(KEDA), environ=container_env(KEDA))
    assert settings.preflight.claim_apiservice is False


def test_the_config_serves_grpc_on_the_named_port(config_file):
    assert container_env(KEDA)["GPU_AUTOSCALER_SERVER__GRPC_PORT"] == str(GRPC_PORT)
    settings = load_settings(config_file(KEDA), environ=container_env(KEDA))
    assert settings.server.grpc_port == GRPC_PORT
    # Mutual TLS: KEDA's client certificate is issued by the serving certificate's CA, mounted here.
    assert settings.server.grpc_client_ca_file == Path("/var/run/serving-cert/ca.crt")
    assert settings.server.tls.cert_file == Path("/var/run/serving-cert/tls.crt")


def test_network_policy_admits_only_kedas_operator_to_the_grpc_port():
    policy = one(KEDA, "NetworkPolicy", "gpu-autoscaler-keda")["spec"]
    pod_labels = one(KEDA, "Deployment", "gpu-autoscaler")["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    # KEDA's operator pods carry app=keda-operator in its Helm chart and in its own manifests.
    assert policy["ingress"] == [
        {
            "from": [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keda"}},
                    "podSelector": {"matchLabels": {"app": "keda-operator"}},
                }
            ],
            "ports": [{"port": GRPC_PORT, "protocol": "TCP"}],
        }
    ]
    # The base policy does not open the gRPC port to anyone else.
    base = one(KEDA, "NetworkPolicy", "gpu-autoscaler")["spec"]
    assert all({"port": GRPC_PORT, "protocol": "TCP"} not in rule["ports"] for rule in base["ingress"])


def test_tls_material_comes_from_a_client_certificate_of_the_serving_ca():
    auth = one(KEDA, "ClusterTriggerAuthentication", "gpu-autoscaler")["spec"]["secretTargetRef"]
    assert {(ref["parameter"], ref["key"]) for ref in auth} == {
        ("caCert", "ca.crt"),
        ("tlsClientCert", "tls.crt"),
        ("tlsClientKey", "tls.key"),
    }
    (secret,) = {ref["name"] for ref in auth}
    client = next(c for c in objects(KEDA, "Certificate") if c["spec"]["secretName"] == secret)["spec"]
    serving = one(KEDA, "Certificate", "gpu-autoscaler-serving-cert")["spec"]
    assert "client auth" in client["usages"] and "server auth" not in client["usages"]
    assert client["issuerRef"] == serving["issuerRef"]


SCALED = {
    # ScaledObject -> (metric, the examples' HPA it replaces)
    "gpu-placeholder": ("gpu_headroom", "gpu-placeholder"),
    "inference": ("request_rate_forecast", "inference"),
}


@pytest.mark.parametrize("name", sorted(SCALED))
def test_scaled_objects_ask_the_service_what_the_examples_hpas_ask(name, config_file):
    scaled = one(KEDA, "ScaledObject", name)
    metric, hpa_name = SCALED[name]
    hpa = one("examples", "HorizontalPodAutoscaler", hpa_name)
    assert scaled["metadata"]["namespace"] == hpa["metadata"]["namespace"]
    spec = scaled["spec"]
    assert spec["scaleTargetRef"] == hpa["spec"]["scaleTargetRef"]
    replicas = (spec["minReplicaCount"], spec["maxReplicaCount"])
    assert replicas == (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"])
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == hpa["spec"]["behavior"]
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "external"
    assert trigger["authenticationRef"] == {"kind": "ClusterTriggerAuthentication", "name": "gpu-autoscaler"}
    service = one(KEDA, "Service", "gpu-autoscaler")["metadata"]
    external = hpa["spec"]["metrics"][0]["external"]
    selector = ",".join(f"{k}={v}" for k, v in sorted(external["metric"]["selector"]["matchLabels"].items()))
    assert trigger["metadata"] == {
        "scalerAddress": f"{service['name']}.{service['namespace']}.svc:{GRPC_PORT}",
        "metric": metric,
        "labelSelector": selector,
        "targetValue": external["target"]["averageValue"],
    }
    assert metric == external["metric"]["name"]
    assert metric in load_settings(config_file(KEDA), environ={}).metrics


def test_kedas_crd_refuses_what_keda_would_refuse():
    scaled = one(KEDA, "ScaledObject", "gpu-placeholder")
    kube_schemas.validate("keda.sh", "ScaledObject", scaled)
    misspelt = copy.deepcopy(scaled)
    misspelt["spec"]["triggers"][0]["authenticationReff"] = {"name": "x"}
    inverted = copy.deepcopy(scaled)
    inverted["spec"]["minReplicaCount"] = 40  # above maxReplicaCount: the CRD's CEL rule
    no_triggers = copy.deepcopy(scaled)
    del no_triggers["spec"]["triggers"]
    for refused in (misspelt, inverted, no_triggers):
        with pytest.raises(kube_schemas.Refused):
            kube_schemas.validate("keda.sh", "ScaledObject", refused)
    with pytest.raises(kube_schemas.Refused, match="minReplicaCount must be less than or equal to maxReplicaCount"):
        kube_schemas.validate("keda.sh", "ScaledObject", inverted)
