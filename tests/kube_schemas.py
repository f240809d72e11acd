"""What kube-apiserver would refuse, for the objects the fake API (``tests/fakekube.py``) stores or accepts.

- Karpenter NodePools and NodeClaims, KEDA ScaledObjects and (Cluster)TriggerAuthentications, SIG
  Autoscaling CapacityBuffers (``v1beta1`` from Karpenter's CRD, the deprecated ``v1alpha1`` from
  Cluster Autoscaler's), Kueue's Workloads, LocalQueues, ClusterQueues and ResourceFlavors (its CEL
  rules in ``tests/kueue_cel.py``), and the project's own GPUForecasts: the ``openAPIV3Schema`` of the version
  named by the object's ``apiVersion`` in the upstream CRDs vendored in ``tests/data/schemas/``
  (GPUForecast: its CRD in ``manifests/base/``, this project being its upstream) (jsonschema,
  Draft 2020-12), with the Kubernetes extensions handled as the
  API server does: ``x-kubernetes-validations`` CEL rules by explicit code per rule text
  (``CEL_RULES``; a rule the code does not know fails loudly, so a CRD update is noticed),
  ``x-kubernetes-list-type`` ``set``/``map`` as uniqueness (rules that read ``oldSelf`` are
  transition rules, skipped); the other ``x-kubernetes-*`` keywords
  (int-or-string, map types) are annotations jsonschema ignores.
- Pods, CronJobs, Jobs, ConfigMaps, ResourceQuotas, PodTemplates, Leases, APIServices,
  CustomResourceDefinitions, SelfSubjectAccessReviews and DRA's ResourceClaims, ResourceClaimTemplates,
  DeviceClasses and ResourceSlices (``resource.k8s.io/v1``): ``kubernetes-validate``'s JSON schemas of
  Kubernetes 1.37, the newest it carries (pyproject asks for kubernetes-validate 1.37.0 or later).

Unknown fields are refused (HTTP 400, as with ``fieldValidation=Strict``, kubectl's default), so a
misspelt fixture field fails instead of being dropped. Not checked: ``metadata`` (names, label
syntax), the transition rules that compare with ``oldSelf`` (``TRANSITION_RULES``), and defaulting
(stored objects keep only what was sent).
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import referencing
import yaml
from jsonschema import ValidationError
from jsonschema.protocols import Validator

from tests.kueue_cel import KUEUE_CEL_RULES

SCHEMAS = Path(__file__).resolve().parent / "data" / "schemas"
# The project's own CRDs: their upstream is this repository's manifests.
OWN_CRDS = Path(__file__).resolve().parents[1] / "manifests" / "base"
KUBERNETES_VERSION = "1.37"
# (group, kind) -> the CRD that defines it: a file name in SCHEMAS (vendored) or an absolute path.
CRDS: dict[tuple[str, str], str] = {
    ("karpenter.sh", "NodePool"): "karpenter.sh_nodepools.yaml",
    ("karpenter.sh", "NodeClaim"): "karpenter.sh_nodeclaims.yaml",
    ("keda.sh", "ScaledObject"): "keda.sh_scaledobjects.yaml",
    ("keda.sh", "TriggerAuthentication"): "keda.sh_triggerauthentications.yaml",
    ("keda.sh", "ClusterTriggerAuthentication"): "keda.sh_clustertriggerauthentications.yaml",
    ("autoscaling.x-k8s.io", "CapacityBuffer"): "autoscaling.x-k8s.io_capacitybuffers.yaml",
    ("gpu-autoscaler.io", "GPUForecast"): str(OWN_CRDS / "crd-gpuforecasts.yaml"),
    ("kueue.x-k8s.io", "Workload"): "kueue.x-k8s.io_workloads.yaml",
    ("kueue.x-k8s.io", "LocalQueue"): "kueue.x-k8s.io_localqueues.yaml",
    ("kueue.x-k8s.io", "ClusterQueue"): "kueue.x-k8s.io_clusterqueues.yaml",
    ("kueue.x-k8s.io", "ResourceFlavor"): "kueue.x-k8s.io_resourceflavors.yaml",
    ("kueue.x-k8s.io", "AdmissionCheck"): "kueue.x-k8s.io_admissionchecks.yaml",
}
# (group, kind, version) -> the vendored CRD for a version the file in CRDS does not serve: Karpenter's
# CapacityBuffer CRD has only v1beta1; Cluster Autoscaler's still serves the deprecated v1alpha1.
CRD_VERSION_FILES = {
    ("autoscaling.x-k8s.io", "CapacityBuffer", "v1alpha1"): (
        "cluster-autoscaler_autoscaling.x-k8s.io_capacitybuffers.yaml"
    ),
}
CORE_KINDS = frozenset(
    {
        ("", "Pod"), ("", "ConfigMap"), ("", "ResourceQuota"), ("", "PodTemplate"), ("batch", "CronJob"),
        ("batch", "Job"), ("coordination.k8s.io", "Lease"), ("apiregistration.k8s.io", "APIService"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"), ("authorization.k8s.io", "SelfSubjectAccessReview"),
        ("authorization.k8s.io", "SubjectAccessReview"), ("authentication.k8s.io", "TokenReview"),
        ("resource.k8s.io", "ResourceClaim"),
        ("resource.k8s.io", "ResourceClaimTemplate"), ("resource.k8s.io", "DeviceClass"),
        ("resource.k8s.io", "ResourceSlice"),
    }
)  # fmt: skip


class Refused(Exception):
    """The API server's answer to an object it does not accept: a metav1.Status (422 or 400)."""

    def __init__(self, status: dict[str, Any]) -> None:
        super().__init__(status["message"])
        self.status = status


# ----------------------------------------------------------------------------- CEL rules


def _label_domain(key: str) -> str:
    match = re.match(r"^([^/]+)", key)  # CEL's find() answers "" when nothing matches
    return match.group(0) if match else ""


def _karpenter_domain_allowed(key: str) -> bool:
    return key in ("karpenter.sh/capacity-type", "karpenter.sh/nodepool") or not _label_domain(key).endswith(
        "karpenter.sh"
    )


def _cel_int(text: Any) -> int | None:
    """CEL's int(string): strconv.ParseInt base 10, else an evaluation error (None)."""
    if not isinstance(text, str) or not re.fullmatch(r"[+-]?[0-9]+", text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def _bounded_operators_have_one_integer(requirements: list[Mapping[str, Any]]) -> bool:
    for item in requirements:
        if item.get("operator") in ("Gt", "Lt", "Gte", "Lte"):
            values = item.get("values") or []
            number = _cel_int(values[0]) if len(values) == 1 else None
            if number is None or number < 0:
                return False
    return True


def _static_pool_limits(spec: Mapping[str, Any]) -> bool:
    limits = spec.get("limits")
    return "replicas" not in spec or "limits" not in spec or not limits or list(limits) == ["nodes"]


# rule text (exactly as in the CRDs) -> the same check in Python. Absent fields that a rule reads
# (``x.values`` of an ``In`` requirement) are CEL evaluation errors, which refuse the object too.
CEL_RULES: dict[str, Callable[[Any], bool]] = {
    "self != ''": lambda value: value != "",
    'self != "karpenter.sh/nodepool"': lambda key: key != "karpenter.sh/nodepool",
    'self != "kubernetes.io/hostname"': lambda key: key != "kubernetes.io/hostname",
    (
        'self in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || '
        '!self.find("^([^/]+)").endsWith("karpenter.sh")'
    ): _karpenter_domain_allowed,
    'self.all(x, x != "karpenter.sh/nodepool")': lambda labels: "karpenter.sh/nodepool" not in labels,
    'self.all(x, x != "kubernetes.io/hostname")': lambda labels: "kubernetes.io/hostname" not in labels,
    (
        'self.all(x, x in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || '
        '!x.find("^([^/]+)").endsWith("karpenter.sh"))'
    ): lambda labels: all(_karpenter_domain_allowed(key) for key in labels),
    "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)": lambda requirements: all(
        item.get("values") for item in requirements if item.get("operator") == "In"
    ),
    (
        "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? "
        "(x.values.size() == 1 && int(x.values[0]) >= 0) : true)"
    ): _bounded_operators_have_one_integer,
    # KEDA ScaledObject (spec): without maxReplicaCount KEDA's default of 100 is the bound.
    (
        "!has(self.minReplicaCount) || self.minReplicaCount <= (has(self.maxReplicaCount) ? self.maxReplicaCount : 100)"
    ): lambda spec: spec.get("minReplicaCount") is None or spec["minReplicaCount"] <= spec.get("maxReplicaCount", 100),
    "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)": lambda reqs: all(
        len(item.get("values") or []) >= item["minValues"]
        for item in reqs
        if item.get("operator") == "In" and "minValues" in item
    ),
    "self.all(x, has(x.schedule) == has(x.duration))": lambda budgets: all(
        ("schedule" in budget) == ("duration" in budget) for budget in budgets
    ),
    "self.shard < self.shards": lambda spec: spec.get("shard", 0) < spec.get("shards", 1),
    "!has(self.replicas) || !has(self.weight)": lambda spec: "replicas" not in spec or "weight" not in spec,
    # CapacityBuffer spec (v1beta1 and v1alpha1 alike)
    "!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)": lambda spec: (
        "podTemplateRef" not in spec or "replicas" in spec or "limits" in spec
    ),
    "!(has(self.podTemplateRef) && has(self.scalableRef))": lambda spec: (
        not ("podTemplateRef" in spec and "scalableRef" in spec)
    ),
    (
        "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || "
        "(size(self.limits) == 1 && 'nodes' in self.limits))"
    ): _static_pool_limits,
    **KUEUE_CEL_RULES,
}


def is_transition_rule(text: str) -> bool:
    """A rule about updates (it reads oldSelf): kube-apiserver skips it on create, and the fake always."""
    return "oldSelf" in text


def _cel_keyword(
    validator: Validator, rules: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    for rule in rules:
        text = rule["rule"]
        if is_transition_rule(text):
            continue
        if text not in CEL_RULES:
            raise NotImplementedError(f"CEL rule not modelled by tests/kube_schemas.py: {text}")
        if not CEL_RULES[text](instance):
            yield ValidationError(rule.get("message") or f"failed rule: {text}", validator="cel")


def _list_type_keyword(
    validator: Validator, list_type: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not isinstance(instance, list):
        return
    if list_type == "set":
        keys = [repr(item) for item in instance]
    elif list_type == "map":
        names = schema.get("x-kubernetes-list-map-keys") or []
        keys = [repr([item.get(name) for name in names]) if isinstance(item, dict) else "" for item in instance]
    else:
        return
    for index, key in enumerate(keys):
        if key in keys[:index]:
            yield ValidationError(f"Duplicate value: {instance[index]!r}", validator="duplicate", path=[index])


def _properties_keyword(
    validator: Validator, properties: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    yield from jsonschema.Draft202012Validator.VALIDATORS["properties"](validator, properties, instance, schema)
    if not isinstance(instance, dict) or "additionalProperties" in schema:
        return
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    for name in instance:
        if name not in properties:
            yield ValidationError(f"unknown field {name!r}", validator="unknown", path=[name])


CrdValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    {
        "x-kubernetes-validations": _cel_keyword,
        "x-kubernetes-list-type": _list_type_keyword,
        "properties": _properties_keyword,
    },
)


@functools.cache
def crd_schema(file_name: str, version: str | None = None) -> dict[str, Any]:
    """The openAPIV3Schema of one served version (default: the storage version) of a CRD (a file name
    in SCHEMAS, or a path)."""
    # libyaml when there is one: Kueue's Workload CRD is 1.4 MB, 4 s to parse in pure Python.
    safe_loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load((SCHEMAS / file_name).read_text(), Loader=safe_loader)  # noqa: S506 - a safe loader
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version or (version is None and v["storage"])]
    schema: dict[str, Any] = served["schema"]["openAPIV3Schema"]
    return schema


def cel_rules(schema: Any) -> Iterator[tuple[str, str]]:
    """Every (rule, message) of ``x-kubernetes-validations`` anywhere in a schema."""
    if isinstance(schema, dict):
        for rule in schema.get("x-kubernetes-validations") or []:
            yield rule["rule"], rule.get("message", "")
        for value in schema.values():
            yield from cel_rules(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from cel_rules(value)


# ----------------------------------------------------------------------------- errors as Status


def field_path(path: Any) -> str:
    """``spec.template.spec.requirements[0].operator``, as kube-apiserver names fields."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _shown(value: Any) -> str:
    """A value as kube-apiserver shows it in a field error: objects and arrays by their type."""
    if isinstance(value, dict):
        return '"object"'
    if isinstance(value, list):
        return '"array"'
    return json.dumps(value)


# jsonschema keyword -> kube-openapi's wording of the failure, given the keyword's value.
_SCHEMA_WORDING = {
    "maximum": "should be less than or equal to {}",
    "minimum": "should be greater than or equal to {}",
    "pattern": "should match '{}'",
    "maxLength": "may not be longer than {}",
    "minLength": "should be at least {} chars long",
    "maxItems": "must have at most {} items",
    "maxProperties": "must have at most {} properties",
}


def cause(error: ValidationError) -> dict[str, str]:
    """One ``details.causes`` entry in the wording of k8s.io/apiextensions-apiserver's validation."""
    field = field_path(error.absolute_path)
    value, validator = error.instance, error.validator
    if validator == "required":
        missing = re.match(r"'([^']+)'", error.message)
        name = missing.group(1) if missing else "?"
        return {"reason": "FieldValueRequired", "message": "Required value", "field": f"{field}.{name}".lstrip(".")}
    if validator == "enum":
        supported = ", ".join(f'"{item}"' for item in error.validator_value)
        message = f"Unsupported value: {_shown(value)}: supported values: {supported}"
        return {"reason": "FieldValueNotSupported", "message": message, "field": field}
    if validator == "type":
        message = f"Invalid value: {_shown(value)}: {field} in body must be of type {error.validator_value}"
        return {"reason": "FieldValueTypeInvalid", "message": message, "field": field}
    if validator == "duplicate":
        return {"reason": "FieldValueDuplicate", "message": error.message, "field": field}
    if validator == "cel":
        detail = error.message
    elif validator in _SCHEMA_WORDING:
        detail = f"{field} in body {_SCHEMA_WORDING[str(validator)].format(error.validator_value)}"
    else:
        detail = f"{field} in body: {error.message}"
    return {"reason": "FieldValueInvalid", "message": f"Invalid value: {_shown(value)}: {detail}", "field": field}


def invalid(group: str, kind: str, name: str, causes: list[dict[str, str]]) -> Refused:
    """422 Invalid with the causes, worded as kube-apiserver words them."""
    listed = [f"{c['field']}: {c['message']}" for c in causes]
    summary = listed[0] if len(listed) == 1 else "[" + ", ".join(listed) + "]"
    qualified = f"{kind}.{group}" if group else kind
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'{qualified} "{name}" is invalid: {summary}',
        "reason": "Invalid",
        "details": {"name": name, "group": group, "kind": kind, "causes": causes},
        "code": 422,
    }
    return Refused(status)


def unknown_fields(fields: list[str]) -> Refused:
    message = "strict decoding error: " + ", ".join(f'unknown field "{field}"' for field in fields)
    return Refused(
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
         "reason": "BadRequest", "code": 400}
    )  # fmt: skip


# ----------------------------------------------------------------------------- entry point


@functools.cache
def core_validator(api_version: str, kind: str) -> Validator:
    """kubernetes-validate's strict schema of a built-in kind, loaded once (its ``validate`` reads the
    files on every call and stops at the first error; the fake wants every error, quickly)."""
    version = [v for v in kubernetes_validate.utils.all_versions() if v.startswith(KUBERNETES_VERSION + ".")][-1]
    directory = f"kubernetes-json-schema/v{version}-local-strict"
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    files = importlib.resources.files("kubernetes_validate")
    schema = json.loads(files.joinpath(f"{directory}/{kind.lower()}-{group_version}.json").read_text())
    definitions = json.loads(files.joinpath(f"{directory}/_definitions.json").read_text())
    registry: referencing.Registry[Any] = referencing.Registry().with_resources(
        [(schema.get("$id", ""), referencing.Resource.from_contents(schema)),
         (definitions.get("$id", ""), referencing.Resource.from_contents(definitions))]
    )  # fmt: skip
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _errors(group: str, kind: str, obj: Mapping[str, Any]) -> list[ValidationError]:
    if (group, kind) in CRDS:
        version = str(obj.get("apiVersion", "")).rpartition("/")[2]
        crd = CRD_VERSION_FILES.get((group, kind, version), CRDS[(group, kind)])
        validator = CrdValidator(crd_schema(crd, version))
    else:
        validator = core_validator(str(obj.get("apiVersion", "")), kind)
    return sorted(validator.iter_errors(dict(obj)), key=lambda e: [str(p) for p in e.absolute_path])


def validate(group: str, kind: str, obj: Mapping[str, Any]) -> None:
    """Raise ``Refused`` when kube-apiserver would refuse ``obj``; kinds without a schema pass."""
    if (group, kind) not in CRDS and (group, kind) not in CORE_KINDS:
        return
    errors = _errors(group, kind, obj)
    unknown = [field_path([*e.absolute_path]) for e in errors if e.validator == "unknown"]
    unknown += [  # strict built-in schemas: the error is on the parent, naming the fields it did not expect
        field_path([*e.absolute_path, name])
        for e in errors
        if e.validator == "additionalProperties" and "unexpected" in e.message
        for name in re.findall(r"'([^']+)'", e.message.partition("(")[2])
    ]
    if unknown:
        raise unknown_fields(unknown)
    if errors:
        name = str((obj.get("metadata") or {}).get("name", ""))
        raise invalid(group, kind, name, [cause(error) for error in errors])
