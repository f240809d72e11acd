"""Who serves ``v1beta1.external.metrics.k8s.io``, and which install overlay fits the cluster.

A cluster has one provider of the external metrics API. KEDA registers it in most clusters that scale
on external metrics (its Service ``keda/keda-operator-metrics-apiserver`` from the Helm chart,
``keda/keda-metrics-apiserver`` from its own manifests, labels ``app.kubernetes.io/part-of:
keda-operator``), prometheus-adapter in many others. Applying this service's APIService over theirs
would silently cut every ScaledObject or adapter-backed HPA off its metrics. So the manifests' base
carries no APIService, and the verdict here names the overlay that fits:

- no provider (or this service): ``manifests/overlays/external-metrics-api``;
- KEDA: ``manifests/overlays/keda`` (KEDA keeps the APIService and calls this service over gRPC);
- anyone else: none fits; refused with the ways forward (move to KEDA, or ``--take-over``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoscaler.config.preflight_settings import PreflightSettings

EXTERNAL_METRICS_APISERVICE = "v1beta1.external.metrics.k8s.io"
KEDA_OVERLAY = "kubectl apply -k manifests/overlays/keda"
EXTERNAL_METRICS_OVERLAY = "kubectl apply -k manifests/overlays/external-metrics-api"
KEDA = "KEDA"
# Labels that say which product made an object (Helm charts and the recommended labels).
PRODUCT_LABELS = (
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
    "app",
)
KNOWN_PRODUCTS = (("keda", KEDA), ("prometheus-adapter", "prometheus-adapter"), ("metrics-server", "metrics-server"))
CUT_OFF = (
    "applying this service's APIService would cut every HPA and ScaledObject that reads external metrics from it "
    "off its metrics"
)


@dataclass(frozen=True)
class ApiServiceVerdict:
    ok: bool
    message: str
    # serve stops only when it would run as the provider (claim_apiservice) while someone else is.
    blocks_start: bool = False


def _service(apiservice: Mapping[str, Any]) -> tuple[str, str] | None:
    service = (apiservice.get("spec") or {}).get("service")
    if not isinstance(service, Mapping):
        return None  # a local APIService: kube-apiserver itself serves the group
    return str(service.get("namespace", "")), str(service.get("name", ""))


def _evidence(apiservice: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    metadata = apiservice.get("metadata") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    evidence = [f"{key}={labels[key]}" for key in PRODUCT_LABELS if key in labels]
    owners = [f"{ref.get('kind')} {ref.get('name')}" for ref in metadata.get("ownerReferences") or []]
    return evidence, owners


def owner_product(apiservice: Mapping[str, Any]) -> str | None:
    """The product behind the APIService (KEDA, prometheus-adapter, metrics-server), or None."""
    evidence, owners = _evidence(apiservice)
    clues = " ".join([*(_service(apiservice) or ()), *evidence, *owners]).lower()
    return next((name for clue, name in KNOWN_PRODUCTS if clue in clues), None)


def owner_description(apiservice: Mapping[str, Any]) -> str:
    """``Service keda/keda-operator-metrics-apiserver (KEDA; labels ...; owned by ...)``."""
    evidence, owners = _evidence(apiservice)
    service = _service(apiservice)
    described = f"Service {service[0]}/{service[1]}" if service else "kube-apiserver itself (no spec.service)"
    details = [owner_product(apiservice) or "unknown product"]
    if evidence:
        details.append("labels " + ", ".join(evidence))
    if owners:
        details.append("owned by " + ", ".join(owners))
    return f"{described} ({'; '.join(details)})"


def apiservice_check(apiservice: Mapping[str, Any] | None, settings: PreflightSettings) -> ApiServiceVerdict:
    """The APIService as it is now: the overlay that fits, or why none does."""
    ours = (settings.service_namespace, settings.service_name)
    if apiservice is None:
        return ApiServiceVerdict(
            True,
            f"absent, no provider yet: install with {EXTERNAL_METRICS_OVERLAY}, which registers "
            f"Service {ours[0]}/{ours[1]}",
        )
    if _service(apiservice) == ours:
        return ApiServiceVerdict(
            True, f"served by this service (Service {ours[0]}/{ours[1]}): the install of {EXTERNAL_METRICS_OVERLAY}"
        )
    owner = owner_description(apiservice)
    if settings.take_over:
        return ApiServiceVerdict(
            True,
            f"served by {owner}; taken over (--take-over): install with {EXTERNAL_METRICS_OVERLAY}; once its "
            "APIService is applied, everything that read external metrics from it reads this service's instead",
        )
    beside_keda = f"install beside it with {KEDA_OVERLAY} (KEDA keeps the APIService and calls this service over gRPC)"
    if owner_product(apiservice) == KEDA:
        if not settings.claim_apiservice:
            return ApiServiceVerdict(True, f"served by {owner}: {beside_keda}")
        return ApiServiceVerdict(
            False,
            f"already served by {owner}; {CUT_OFF}. Either {beside_keda}, or replace it on purpose with --take-over",
            blocks_start=True,
        )
    return ApiServiceVerdict(
        False,
        f"already served by {owner}; no overlay fits: {CUT_OFF}, and {KEDA_OVERLAY} needs KEDA to own it. Either "
        "move to KEDA (prometheus-adapter is deprecated in its favour): install KEDA, which takes the APIService, "
        f"move the HPAs that read this provider to ScaledObjects, then {KEDA_OVERLAY}; or replace it on purpose: "
        f"--take-over, then {EXTERNAL_METRICS_OVERLAY}",
        blocks_start=settings.claim_apiservice,
    )
