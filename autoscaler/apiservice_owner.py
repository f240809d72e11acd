"""Who serves ``v1beta1.external.metrics.k8s.io``, and whether this service may take it.

A cluster has one provider of the external metrics API. KEDA registers it in most clusters that scale
on external metrics (its Service ``keda/keda-operator-metrics-apiserver`` from the Helm chart,
``keda/keda-metrics-apiserver`` from its own manifests, labels ``app.kubernetes.io/part-of:
keda-operator``), prometheus-adapter in many others. Applying this service's APIService over theirs
would silently cut every ScaledObject or adapter-backed HPA off its metrics, so it is refused with the
two ways forward.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoscaler.settings import PreflightSettings

EXTERNAL_METRICS_APISERVICE = "v1beta1.external.metrics.k8s.io"
KEDA_OVERLAY = "kubectl apply -k manifests/overlays/keda"
# Labels that say which product made an object (Helm charts and the recommended labels).
PRODUCT_LABELS = (
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
    "app",
)
KNOWN_PRODUCTS = (("keda", "KEDA"), ("prometheus-adapter", "prometheus-adapter"), ("metrics-server", "metrics-server"))


def _service(apiservice: Mapping[str, Any]) -> tuple[str, str] | None:
    service = (apiservice.get("spec") or {}).get("service")
    if not isinstance(service, Mapping):
        return None  # a local APIService: kube-apiserver itself serves the group
    return str(service.get("namespace", "")), str(service.get("name", ""))


def owner_description(apiservice: Mapping[str, Any]) -> str:
    """``Service keda/keda-operator-metrics-apiserver (KEDA; labels ...; owned by ...)``."""
    metadata = apiservice.get("metadata") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    service = _service(apiservice)
    described = f"Service {service[0]}/{service[1]}" if service else "kube-apiserver itself (no spec.service)"
    evidence = [f"{key}={labels[key]}" for key in PRODUCT_LABELS if key in labels]
    owners = [f"{ref.get('kind')} {ref.get('name')}" for ref in metadata.get("ownerReferences") or []]
    clues = " ".join([*(service or ()), *evidence, *owners]).lower()
    product = next((name for clue, name in KNOWN_PRODUCTS if clue in clues), None)
    details = [product or "unknown product"]
    if evidence:
        details.append("labels " + ", ".join(evidence))
    if owners:
        details.append("owned by " + ", ".join(owners))
    return f"{described} ({'; '.join(details)})"


def apiservice_check(apiservice: Mapping[str, Any] | None, settings: PreflightSettings) -> tuple[bool, str]:
    """(ok, message) for the APIService as it is now, given whose it should be."""
    ours = (settings.service_namespace, settings.service_name)
    if apiservice is None:
        if not settings.claim_apiservice:
            return True, "absent; not needed (preflight.claim_apiservice: false)"
        return True, f"absent; the manifests create it for Service {ours[0]}/{ours[1]}"
    if _service(apiservice) == ours:
        return True, f"served by this service (Service {ours[0]}/{ours[1]})"
    owner = owner_description(apiservice)
    if not settings.claim_apiservice:
        return True, f"served by {owner}; left to it (preflight.claim_apiservice: false)"
    if settings.take_over:
        return True, (
            f"served by {owner}; taken over (--take-over): once this service's APIService is applied, "
            "everything that read external metrics from it reads this service's instead"
        )
    return False, (
        f"already served by {owner}; applying this service's APIService would cut every HPA and "
        f"ScaledObject that reads external metrics from it off its metrics. Either install beside it "
        f"with the KEDA overlay ({KEDA_OVERLAY}: KEDA keeps the APIService and calls this service "
        f"over gRPC), or replace it on purpose with --take-over"
    )
