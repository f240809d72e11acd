"""CapacityBuffers are checked against the upstream CRDs: v1beta1 (Karpenter's copy) and the deprecated
v1alpha1 (Cluster Autoscaler's), with both CEL rules of ``spec``, as kube-apiserver checks them."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from tests import fakekube
from tests.kube_schemas import Refused, validate

fake_kube = fakekube.fake_kube
kube_api = fakekube.kube_api

GROUP, KIND = "autoscaling.x-k8s.io", "CapacityBuffer"
VERSIONS = ["v1beta1", "v1alpha1"]


def capacity_buffer(version: str, **spec: Any) -> dict[str, Any]:
    metadata = {"name": "b", "namespace": "gpu"}
    return {"apiVersion": f"{GROUP}/{version}", "kind": KIND, "metadata": metadata, "spec": spec}


def refusal(obj: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(Refused) as refused:
        validate(GROUP, KIND, obj)
    return refused.value.status


# The examples the CRD's descriptions give: a PodTemplate with replicas, a PodTemplate with limits only
# ("as many chunks as fit into these limits"), a scalableRef with a percentage ("10 replicas and
# percentage 20: 2 chunks"), and the status Karpenter writes back.
VALID = [
    {"podTemplateRef": {"name": "chunk"}, "replicas": 3},
    {"podTemplateRef": {"name": "chunk"}, "limits": {"nvidia.com/gpu": "16", "cpu": 64}},
    {"podTemplateRef": {"name": "chunk"}, "replicas": 0, "provisioningStrategy": "buffer.x-k8s.io/active-capacity"},
    {"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"}, "percentage": 20},
    {"scalableRef": {"kind": "Deployment", "name": "web"}, "replicas": 2},
    # The two examples of SIG Autoscaling's buffer proposal: a Deployment's buffer by percentage and
    # replicas, and a PodTemplate buffer bounded by limits only.
    {
        "scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "my-deployment"},
        "percentage": 10,
        "replicas": 1,
    },
    {"limits": {"memory": "5120Mi", "cpu": 40}, "podTemplateRef": {"name": "my-custom-template"}},
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("spec", VALID)
def test_the_crd_examples_are_accepted(version, spec):
    validate(GROUP, KIND, capacity_buffer(version, **spec))


@pytest.mark.parametrize("version", VERSIONS)
def test_a_reported_status_is_accepted(version):
    buffer = capacity_buffer(version, podTemplateRef={"name": "chunk"}, replicas=2)
    condition = {"type": "ReadyForProvisioning", "status": "True", "reason": "AttributesSetSuccessfully",
                 "message": "ready", "lastTransitionTime": "2026-11-23T22:00:00Z"}  # fmt: skip
    buffer["status"] = {"replicas": 2, "podTemplateRef": {"name": "chunk"}, "podTemplateGeneration": 1,
                        "conditions": [condition, {**condition, "type": "Provisioning"}]}  # fmt: skip
    validate(GROUP, KIND, buffer)


# (spec breaking one rule, the CRD's message for it in v1beta1, in v1alpha1): one case per rule text. The
# v1alpha1 messages are Cluster Autoscaler's, word for word (the second one says the opposite of its rule).
CEL_CASES = [
    (
        {"podTemplateRef": {"name": "chunk"}},
        {"v1beta1": "If podTemplateRef is set, replicas or limits must also be set",
         "v1alpha1": "If X is set, replicas or limits must also be set"},
    ),
    (
        {"podTemplateRef": {"name": "chunk"}, "percentage": 10},
        {"v1beta1": "If podTemplateRef is set, replicas or limits must also be set",
         "v1alpha1": "If X is set, replicas or limits must also be set"},
    ),
    (
        {"podTemplateRef": {"name": "chunk"}, "scalableRef": {"kind": "Deployment", "name": "w"}, "replicas": 1},
        {"v1beta1": "You must define either PodTemplateRef or ScalableRef, but not both",
         "v1alpha1": "You must define both PodTemplateRef and ScalableRef"},
    ),
]  # fmt: skip


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("spec", "messages"), CEL_CASES)
def test_each_cel_rule_refuses_with_the_crd_message(version, spec, messages):
    message = messages[version]
    status = refusal(capacity_buffer(version, **spec))
    assert status["code"] == 422
    assert [cause["field"] for cause in status["details"]["causes"]] == ["spec"]
    assert message in status["details"]["causes"][0]["message"]


@pytest.mark.parametrize("version", VERSIONS)
def test_schema_bounds_and_types_are_checked(version):
    status = refusal(capacity_buffer(version, podTemplateRef={"name": "chunk"}, replicas=-1))
    assert status["message"] == (
        'CapacityBuffer.autoscaling.x-k8s.io "b" is invalid: spec.replicas: Invalid value: -1: '
        "spec.replicas in body should be greater than or equal to 0"
    )
    status = refusal(capacity_buffer(version, podTemplateRef={"name": ""}, replicas=1))
    assert status["details"]["causes"][0]["field"] == "spec.podTemplateRef.name"
    status = refusal(capacity_buffer(version, podTemplateRef={"name": "chunk"}, replicas="3"))
    assert status["details"]["causes"][0]["reason"] == "FieldValueTypeInvalid"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_misspelt_field_is_refused(version):
    status = refusal(capacity_buffer(version, podTemplateRef={"name": "chunk"}, replica=1))
    assert status["message"] == 'strict decoding error: unknown field "spec.replica"'


def test_the_spec_is_required():
    obj = capacity_buffer("v1beta1")
    del obj["spec"]
    assert refusal(obj)["message"] == 'CapacityBuffer.autoscaling.x-k8s.io "b" is invalid: spec: Required value'


@pytest.mark.parametrize("version", VERSIONS)
async def test_the_fake_api_refuses_a_broken_buffer_in_either_version(fake_kube, kube_api, version):
    custom = CustomObjectsApi(kube_api)
    with pytest.raises(ApiException) as refused:
        await custom.create_namespaced_custom_object(
            GROUP, version, "gpu", "capacitybuffers", capacity_buffer(version, podTemplateRef={"name": "chunk"})
        )
    assert refused.value.status == 422
    created = await custom.create_namespaced_custom_object(
        GROUP, version, "gpu", "capacitybuffers", capacity_buffer(version, podTemplateRef={"name": "c"}, replicas=1)
    )
    assert created["spec"]["replicas"] == 1
