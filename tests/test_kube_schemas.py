"""The fake API checks objects against the upstream schemas, and refuses bad ones as kube-apiserver does."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from adapters.kubernetes.pending_pods import pending_pod_resource
from adapters.kubernetes.watch import WatchGroup, WatchSettings
from tests import fakekube
from tests.eventually import eventually
from tests.kube_objects import expression, gpu_pod_spec, nodepool, pending_pod
from tests.kube_schemas import (
    CEL_RULES,
    CRD_VERSION_FILES,
    CRDS,
    KUBERNETES_VERSION,
    Refused,
    cel_rules,
    crd_schema,
    is_transition_rule,
    validate,
)

fake_kube = fakekube.fake_kube
kube_api = fakekube.kube_api


def test_built_in_kinds_use_the_newest_kubernetes_the_package_carries():
    from kubernetes_validate import utils

    assert utils.major_minor(utils.latest_version()) == KUBERNETES_VERSION


def refusal(group: str, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(Refused) as refused:
        validate(group, kind, obj)
    return refused.value.status


# ----------------------------------------------------------------------------- CEL rules


SERVED_SCHEMAS = [(crd, None) for crd in sorted(CRDS.values())]
SERVED_SCHEMAS += [(crd, version) for (_, _, version), crd in sorted(CRD_VERSION_FILES.items())]


@pytest.mark.parametrize(("crd", "version"), SERVED_SCHEMAS)
def test_every_cel_rule_of_the_served_crds_is_checked_or_an_update_rule(crd, version):
    rules = {rule for rule, _ in cel_rules(crd_schema(crd, version))}
    assert crd_schema(crd, version)["properties"]["spec"], crd  # loaded; KEDA's TriggerAuthentications have no rules
    unmodelled = rules - CEL_RULES.keys()
    assert all(is_transition_rule(rule) for rule in unmodelled), unmodelled
    assert not any("oldSelf" in rule for rule in CEL_RULES)


def test_every_modelled_rule_is_used_by_a_crd():
    used = {rule for crd in CRDS.values() for rule, _ in cel_rules(crd_schema(crd))}
    assert set(CEL_RULES) <= used


def with_template(**changes: Any) -> dict[str, Any]:
    pool = nodepool("bad")
    pool["spec"]["template"]["spec"].update(changes)
    return pool


def static_pool(**spec: Any) -> dict[str, Any]:
    pool = nodepool("bad")
    pool["spec"].update({"replicas": 2, **spec})
    return pool


# (broken NodePool, the CRD's message for the rule it breaks): one case per rule text.
CEL_CASES = [
    (with_template(nodeClassRef={"group": "", "kind": "EC2NodeClass", "name": "x"}), "group may not be empty"),
    (nodepool("bad", labels={"karpenter.sh/nodepool": "x"}), 'label "karpenter.sh/nodepool" is restricted'),
    (nodepool("bad", labels={"kubernetes.io/hostname": "x"}), 'label "kubernetes.io/hostname" is restricted'),
    (nodepool("bad", labels={"team.karpenter.sh/x": "y"}), 'label domain "karpenter.sh" is restricted'),
    (nodepool("bad", requirements=[expression("karpenter.sh/nodepool", "In", "a")]), 'label "karpenter.sh/nodepool"'),
    (nodepool("bad", requirements=[expression("kubernetes.io/hostname", "Exists")]), '"kubernetes.io/hostname" is'),
    (nodepool("bad", requirements=[expression("karpenter.sh/x", "Exists")]), 'label domain "karpenter.sh" is'),
    (nodepool("bad", requirements=[expression("zone", "In")]), "requirements with operator 'In' must have a value"),
    (nodepool("bad", requirements=[expression("n", "Gt", "-1")]), "must have a single positive integer value"),
    (nodepool("bad", requirements=[expression("n", "Lte", "1", "2")]), "must have a single positive integer value"),
    (
        nodepool("bad", requirements=[{**expression("zone", "In", "a"), "minValues": 2}]),
        "requirements with 'minValues' must have at least that many values",
    ),
    (static_pool(weight=10), "'weight' is not supported on static NodePools"),
    (static_pool(limits={"cpu": "10"}), "only 'limits.nodes' is supported on static NodePools"),
]


@pytest.mark.parametrize(("pool", "message"), CEL_CASES)
def test_cel_rules_refuse_with_the_crd_message(pool, message):
    status = refusal("karpenter.sh", "NodePool", pool)
    assert status["code"] == 422
    assert any(message in cause["message"] for cause in status["details"]["causes"]), status


def test_budgets_need_schedule_and_duration_together():
    pool = nodepool("bad")
    pool["spec"]["disruption"] = {"budgets": [{"nodes": "10%", "schedule": "0 8 * * *"}]}
    assert "'schedule' must be set with 'duration'" in refusal("karpenter.sh", "NodePool", pool)["message"]
    pool["spec"]["disruption"]["budgets"][0]["duration"] = "8h"
    validate("karpenter.sh", "NodePool", pool)


def test_what_the_rules_allow_passes():
    fine = nodepool(
        "fine",
        labels={"karpenter.sh/capacity-type": "spot", "team": "ml"},
        requirements=[
            expression("karpenter.sh/capacity-type", "In", "on-demand"),
            expression("karpenter.k8s.aws/instance-gpu-count", "Gt", "0"),
            {**expression("node.kubernetes.io/instance-type", "In", "a", "b"), "minValues": 2},
            expression("zone", "Exists"),
        ],
    )
    validate("karpenter.sh", "NodePool", fine)
    validate("karpenter.sh", "NodePool", static_pool(limits={"nodes": "4"}))


def test_list_map_keys_must_be_unique():
    pool = nodepool("bad")
    pool["status"]["conditions"] = pool["status"]["conditions"] * 2
    status = refusal("karpenter.sh", "NodePool", pool)
    assert status["details"]["causes"][0]["reason"] == "FieldValueDuplicate"


# ----------------------------------------------------------------------------- the Status body


def test_an_unknown_operator_is_refused_as_kube_apiserver_refuses_it():
    status = refusal("karpenter.sh", "NodePool", nodepool("bad", requirements=[expression("zone", "Near", "a")]))
    supported = '"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"'
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'NodePool.karpenter.sh "bad" is invalid: spec.template.spec.requirements[0].operator: '
        f'Unsupported value: "Near": supported values: {supported}',
        "reason": "Invalid",
        "details": {
            "name": "bad",
            "group": "karpenter.sh",
            "kind": "NodePool",
            "causes": [
                {
                    "reason": "FieldValueNotSupported",
                    "message": f'Unsupported value: "Near": supported values: {supported}',
                    "field": "spec.template.spec.requirements[0].operator",
                }
            ],
        },
        "code": 422,
    }


def test_several_errors_are_listed_together():
    pool = nodepool("bad", weight=101)
    del pool["spec"]["template"]["spec"]["nodeClassRef"]
    status = refusal("karpenter.sh", "NodePool", pool)
    assert status["message"] == (
        'NodePool.karpenter.sh "bad" is invalid: [spec.template.spec.nodeClassRef: Required value, '
        "spec.weight: Invalid value: 101: spec.weight in body should be less than or equal to 100]"
    )
    assert [c["reason"] for c in status["details"]["causes"]] == ["FieldValueRequired", "FieldValueInvalid"]


def test_nodeclaims_need_their_spec():
    claim = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "n"}}
    message = refusal("karpenter.sh", "NodeClaim", claim)["message"]
    assert message == 'NodeClaim.karpenter.sh "n" is invalid: spec: Required value'


def test_unknown_fields_are_refused_as_with_strict_field_validation():
    pool = nodepool("typo")
    pool["spec"]["wieght"] = 5
    assert refusal("karpenter.sh", "NodePool", pool) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'strict decoding error: unknown field "spec.wieght"',
        "reason": "BadRequest",
        "code": 400,
    }
    pod = pending_pod("p", {**gpu_pod_spec(), "nodeSelecter": {}})
    assert refusal("", "Pod", pod)["message"] == 'strict decoding error: unknown field "spec.nodeSelecter"'


def test_core_objects_are_checked_against_kubernetes_schemas():
    pod = pending_pod("p", gpu_pod_spec())
    validate("", "Pod", pod)
    broken = copy.deepcopy(pod)
    del broken["spec"]["containers"]
    assert refusal("", "Pod", broken)["message"] == 'Pod "p" is invalid: spec.containers: Required value'
    cronjob = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"}, "spec": {"schedule": "@daily"}}
    assert "spec.jobTemplate: Required value" in refusal("batch", "CronJob", cronjob)["message"]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"parallelism": "two"}}
    assert "spec.parallelism" in refusal("batch", "Job", job)["message"]


# ----------------------------------------------------------------------------- through the API


async def test_the_fake_api_refuses_an_invalid_nodepool_with_422(fake_kube, kube_api):
    custom = CustomObjectsApi(kube_api)
    bad = nodepool("bad", requirements=[expression("zone", "Near", "a")])
    with pytest.raises(ApiException) as refused:
        await custom.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", bad)
    assert refused.value.status == 422
    body = json.loads(refused.value.body)
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "Invalid", 422)
    assert body["details"]["causes"][0]["field"] == "spec.template.spec.requirements[0].operator"
    assert fake_kube.get("nodepools", "bad") is None
    created = await custom.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", nodepool("good"))
    assert created["metadata"]["name"] == "good"
    assert fake_kube.get("nodepools", "good") is not None


async def test_the_fake_api_refuses_an_invalid_pod(fake_kube, kube_api):
    pod = pending_pod("p", gpu_pod_spec())
    pod["spec"]["containers"][0]["name"] = None
    with pytest.raises(ApiException) as refused:
        await CoreV1Api(kube_api).create_namespaced_pod("ml", pod)
    assert refused.value.status == 422
    assert json.loads(refused.value.body)["details"]["kind"] == "Pod"


def test_fixtures_with_mistakes_fail_when_added(fake_kube):
    with pytest.raises(Refused, match=r"spec\.template: Required value"):
        fake_kube.add("nodepools", {"metadata": {"name": "bare"}, "spec": {}})


async def test_a_field_selector_watch_sees_objects_enter_and_leave(fake_kube, kube_api):
    async with WatchGroup(WatchSettings(backoff_jitter=0.0)) as group:
        cache = group.start(pending_pod_resource(kube_api))
        await asyncio.wait_for(fake_kube.wait_for_watchers("pods"), 5)
        fake_kube.add("pods", pending_pod("waiting", gpu_pod_spec()))
        running = pending_pod("running", gpu_pod_spec())
        running["status"] = {"phase": "Running"}
        fake_kube.add("pods", running)
        await eventually(lambda: "ml/waiting" in cache.objects, message="the Pending pod in the watch cache")
        scheduled = pending_pod("waiting", {**gpu_pod_spec(), "nodeName": "node-1"})
        scheduled["status"] = {"phase": "Running"}
        fake_kube.modify("pods", scheduled)
        await eventually(lambda: "ml/waiting" not in cache.objects, message="the bound pod gone from the cache")
    assert "ml/running" not in cache.objects
    assert fake_kube.requests_for("pods", watch=True)[0].query["fieldSelector"] == "status.phase=Pending"
