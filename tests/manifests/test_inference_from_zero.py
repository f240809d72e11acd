"""manifests/examples/inference-from-zero: an inference Deployment at zero replicas, woken by
request_rate_forecast through an HPA (minReplicas 0) or a KEDA ScaledObject (activationValue).
Schemas (Kubernetes 1.37's, KEDA's vendored CRD) are checked by
test_manifests.test_objects_validate_against_their_schemas; here, what the objects say to each other
and to the service."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest

from autoscaler.config.settings_loader import load_settings
from autoscaler.keda.metadata import parse_trigger
from tests import kube_schemas
from tests.manifests.test_manifests import KUBERNETES_VERSION, config_file, one

__all__ = ["config_file"]  # the fixture, used here

ROOT = "examples/inference-from-zero"
HPA, KEDA = f"{ROOT}/hpa", f"{ROOT}/keda"

pytestmark = pytest.mark.kubectl


def test_the_hpa_sleeps_at_zero_and_scales_on_the_forecast(config_file):
    hpa = one(HPA, "HorizontalPodAutoscaler", "inference")
    deployment = one(HPA, "Deployment", "inference")
    spec = hpa["spec"]
    assert spec["minReplicas"] == 0
    assert "replicas" not in deployment["spec"]  # the HPA owns the count; re-applying keeps it
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "inference"}
    assert hpa["metadata"]["namespace"] == deployment["metadata"]["namespace"] == "inference"
    (metric,) = spec["metrics"]
    assert metric["type"] == "External"
    external = metric["external"]
    assert external["metric"] == {
        "name": "request_rate_forecast",
        "selector": {"matchLabels": {"service": "inference"}},
    }
    assert external["target"] == {"type": "AverageValue", "averageValue": "20"}
    assert spec["behavior"]["scaleUp"] == {"stabilizationWindowSeconds": 0, "tolerance": "0"}
    assert "request_rate_forecast" in load_settings(config_file("overlays/external-metrics-api"), environ={}).metrics


def test_kubernetes_137_takes_min_replicas_zero_and_refuses_a_misspelt_field():
    hpa = one(HPA, "HorizontalPodAutoscaler", "inference")
    kubernetes_validate.validate(hpa, KUBERNETES_VERSION, strict=True)
    typo = copy.deepcopy(hpa)
    typo["spec"]["minReplica"] = 0
    with pytest.raises(kubernetes_validate.ValidationError, match="minReplica"):
        kubernetes_validate.validate(typo, KUBERNETES_VERSION, strict=True)


def test_the_deployment_is_ready_only_once_its_model_is_loaded():
    pod = one(HPA, "Deployment", "inference")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600  # room for a long model load
    assert container["resources"]["requests"]["nvidia.com/gpu"] == container["resources"]["limits"]["nvidia.com/gpu"]


def test_the_scaled_object_wakes_on_an_activation_value_the_service_reads(config_file):
    scaled = one(KEDA, "ScaledObject", "inference")
    hpa = one(HPA, "HorizontalPodAutoscaler", "inference")
    spec = scaled["spec"]
    assert spec["scaleTargetRef"] == hpa["spec"]["scaleTargetRef"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (0, hpa["spec"]["maxReplicas"])
    assert spec["cooldownPeriod"] == hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"]
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "external"
    assert trigger["authenticationRef"] == {"kind": "ClusterTriggerAuthentication", "name": "gpu-autoscaler"}
    # The service's own reading of the trigger's metadata (what GetMetricSpec and IsActive use).
    parsed = parse_trigger(trigger["metadata"])
    assert (parsed.metric, parsed.target, parsed.activation) == ("request_rate_forecast", 20.0, 0.01)
    assert parsed.selector.matches({"service": "inference"}) and not parsed.selector.matches({"service": "other"})
    assert "request_rate_forecast" in load_settings(config_file("overlays/keda"), environ={}).metrics


def test_kedas_crd_takes_the_scaled_object_and_refuses_a_misspelt_field():
    scaled = one(KEDA, "ScaledObject", "inference")
    kube_schemas.validate("keda.sh", "ScaledObject", scaled)
    misspelt = copy.deepcopy(scaled)
    misspelt["spec"]["minReplicaCounts"] = 0
    with pytest.raises(kube_schemas.Refused):
        kube_schemas.validate("keda.sh", "ScaledObject", misspelt)
