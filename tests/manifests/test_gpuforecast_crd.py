"""The GPUForecast CRD (manifests/base/crd-gpuforecasts.yaml): a valid CustomResourceDefinition, with a
structural schema (the rules kube-apiserver enforces for apiextensions.k8s.io/v1), printer columns that
point at typed fields, and the RBAC the service needs to publish and watch the objects."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from adapters.kubernetes.nodeclaims import LeadTimeSample
from autoscaler.replication.forecast_objects import object_name, sample_item, shard_status
from tests import kube_schemas

BASE = Path(__file__).resolve().parents[2] / "manifests" / "base"
CRD = yaml.safe_load((BASE / "crd-gpuforecasts.yaml").read_text())
(VERSION,) = CRD["spec"]["versions"]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]


def test_crd_is_a_valid_custom_resource_definition():
    kubernetes_validate.validate(CRD, kube_schemas.KUBERNETES_VERSION, strict=True)
    assert CRD["metadata"]["name"] == f"{CRD['spec']['names']['plural']}.{CRD['spec']['group']}"
    assert (CRD["spec"]["group"], VERSION["name"], CRD["spec"]["scope"]) == (
        "gpu-autoscaler.io",
        "v1alpha1",
        "Namespaced",
    )
    assert VERSION["subresources"] == {"status": {}}
    assert "crd-gpuforecasts.yaml" in yaml.safe_load((BASE / "kustomization.yaml").read_text())["resources"]


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path or ".", schema
    for name, child in (schema.get("properties") or {}).items():
        yield from nodes(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}{{}}")


def test_schema_is_structural():
    """apiextensions' structural rules: every node typed, no unknown fields kept, metadata left alone,
    properties and additionalProperties never together, only the keywords a structural schema allows."""
    allowed = {
        "type", "properties", "items", "additionalProperties", "required", "description", "format", "enum",
        "minimum", "maximum", "maxLength", "minLength", "maxItems", "pattern", "x-kubernetes-validations",
    }  # fmt: skip
    for path, node in nodes(SCHEMA):
        assert node.get("type"), f"{path}: no type"
        assert not node.get("x-kubernetes-preserve-unknown-fields"), f"{path}: keeps unknown fields"
        assert not ("properties" in node and "additionalProperties" in node), path
        assert set(node) <= allowed, f"{path}: {set(node) - allowed}"
    assert SCHEMA["properties"]["metadata"] == {"type": "object"}


def schema_at(json_path: str) -> dict[str, Any]:
    node = SCHEMA
    for part in json_path.strip(".").split("."):
        node = node["properties"][part] if part != "metadata" else {"properties": {"creationTimestamp": {
            "type": "string", "format": "date-time"}}}  # fmt: skip
    return node


def test_printer_columns_point_at_fields_of_their_type():
    expected = {"integer": ("integer", None), "string": ("string", None), "date": ("string", "date-time")}
    columns = {column["name"]: column for column in VERSION["additionalPrinterColumns"]}
    assert list(columns) == ["Shard", "Of", "Series", "Metrics", "Labels", "Models", "Newest", "Published", "Age"]
    for name, column in columns.items():
        field = schema_at(column["jsonPath"])
        assert (field["type"], field.get("format")) == expected[column["type"]], name


def item(value: float = 12.5) -> dict[str, Any]:
    return {
        "metric": "gpu_headroom",
        "labels": {"nodepool": "a100"},
        "value": value,
        "timestamp": "2026-11-20T09:00:00Z",
        "explanation": "p90 over 10m",
        "model": "ets",
        "quantile": 0.9,
        "work": "select",
        "decidedAt": "2026-11-20T09:00:30Z",
        "leadTime": {"seconds": 600, "source": "configured"},
        "windows": [
            {
                "source": "cronjob",
                "namespace": "ml",
                "name": "train",
                "start": "2026-11-20T09:05:00Z",
                "end": "2026-11-20T11:05:00Z",
                "gpus": 8.0,
            }
        ],
        "adjustments": [{"kind": "step_down", "before": 10.0, "after": 12.5, "reason": "max_decrease_per_minute"}],
        "stepDown": {"value": 12.5, "at": "2026-11-20T09:00:30Z"},
        "target": {
            "kind": "minutes_short_fraction",
            "value": 0.01,
            "chosen": "buffer:24",
            "asked": 0.01,
            "chosenAt": "2026-11-20T00:00:00Z",
            "reason": "chosen by replaying 11 levels and 45 buffers over the last 7.0 days",
        },
    }


def gpuforecast(status: dict[str, Any], shard: int = 3, shards: int = 16) -> dict[str, Any]:
    return {
        "apiVersion": "gpu-autoscaler.io/v1alpha1",
        "kind": "GPUForecast",
        "metadata": {"name": object_name(shard, shards), "namespace": "gpu-autoscaler"},
        "spec": {"shard": shard, "shards": shards},
        "status": {**status, "publishedAt": datetime(2026, 11, 20, 9, 1, tzinfo=UTC).isoformat()},
    }


SAMPLE = LeadTimeSample(
    "a100", "a100-x1", "uid-1", datetime(2026, 11, 20, 8, tzinfo=UTC), datetime(2026, 11, 20, 8, 5, tzinfo=UTC), "Ready"
)


def test_what_the_publisher_writes_is_accepted():
    obj = gpuforecast(shard_status([item()], [sample_item(SAMPLE)]))
    assert obj["status"]["leadTimeSamples"][0]["ready"] == "2026-11-20T08:05:00Z"
    kube_schemas.validate("gpu-autoscaler.io", "GPUForecast", obj)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda obj: obj["status"]["items"][0].update(vlaue=1.0), "status.items[0].vlaue"),
        (lambda obj: obj["status"]["items"][0].update(value=-1.0), "status.items[0].value"),
        (lambda obj: obj["status"]["items"][0].update(work="guess"), "status.items[0].work"),
        (lambda obj: obj["status"]["items"][0]["labels"].update(pool=3), "status.items[0].labels.pool"),
        (lambda obj: obj["spec"].update(shard=16), "spec"),
        (lambda obj: obj["status"]["items"][0]["target"].update(kind="nines"), "status.items[0].target.kind"),
        (lambda obj: obj["status"]["items"][0]["target"].update(chosen="b" * 64), "status.items[0].target.chosen"),
        (
            lambda obj: obj["status"]["leadTimeSamples"][0].update(condition="Launched"),
            "status.leadTimeSamples[0].condition",
        ),
    ],
)
def test_a_bad_gpuforecast_is_refused(change, field):
    obj = gpuforecast(shard_status([item()], [sample_item(SAMPLE)]))
    change(obj)
    with pytest.raises(kube_schemas.Refused) as refused:
        kube_schemas.validate("gpu-autoscaler.io", "GPUForecast", obj)
    status = refused.value.status
    if status["code"] == 400:
        assert status["message"] == f'strict decoding error: unknown field "{field}"'
    else:
        assert [cause["field"] for cause in status["details"]["causes"]] == [field]


def test_the_service_account_may_publish_and_watch_gpuforecasts():
    role = yaml.safe_load((BASE / "role-gpuforecasts.yaml").read_text())
    binding = yaml.safe_load((BASE / "rolebinding-gpuforecasts.yaml").read_text())
    rules = {tuple(rule["resources"]): set(rule["verbs"]) for rule in role["rules"]}
    assert rules[("gpuforecasts",)] == {"get", "list", "watch", "create", "patch", "update"}
    assert rules[("gpuforecasts/status",)] >= {"patch", "update"}
    assert {rule["apiGroups"][0] for rule in role["rules"]} == {"gpu-autoscaler.io"}
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpu-autoscaler", "namespace": "gpu-autoscaler"}]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "gpu-autoscaler"
