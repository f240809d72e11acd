"""The fake API's writes behave as kube-apiserver's, seen through the real kubernetes-asyncio client:
updates with optimistic concurrency (409 Conflict), the patch types, server-side apply, the status
subresource, deletion, discovery and a resource served in another version."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes_asyncio.client import (
    ApisApi,
    CoordinationV1Api,
    CoreV1Api,
    CustomObjectsApi,
    V1Lease,
    V1LeaseSpec,
    V1ObjectMeta,
)
from kubernetes_asyncio.client.exceptions import ApiException

from tests import fakekube

fake_kube = fakekube.fake_kube
kube_api = fakekube.kube_api

GROUP, VERSION, PLURAL = "autoscaling.x-k8s.io", "v1beta1", "capacitybuffers"


def buffer(name: str = "a100-buffer", replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": "gpu"},
        "spec": {"podTemplateRef": {"name": "a100-chunk"}, "replicas": replicas},
    }


MERGE = {"_content_type": "application/merge-patch+json"}  # the client would send a dict as a JSON patch


def status_of(error: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(error.body)
    return body


async def test_a_stale_update_is_409_conflict_and_a_fresh_one_lands(fake_kube, kube_api):
    leases = CoordinationV1Api(kube_api)
    spec = V1LeaseSpec(holder_identity="replica-a", lease_duration_seconds=15)
    created = await leases.create_namespaced_lease("gpu", V1Lease(metadata=V1ObjectMeta(name="shard-0"), spec=spec))
    first_rv = created.metadata.resource_version
    created.spec.holder_identity = "replica-b"
    taken = await leases.replace_namespaced_lease("shard-0", "gpu", created)
    assert taken.spec.holder_identity == "replica-b"
    assert int(taken.metadata.resource_version) > int(first_rv)
    created.metadata.resource_version = first_rv
    created.spec.holder_identity = "replica-c"
    with pytest.raises(ApiException) as conflict:
        await leases.replace_namespaced_lease("shard-0", "gpu", created)
    assert conflict.value.status == 409
    assert status_of(conflict.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Operation cannot be fulfilled on leases.coordination.k8s.io "shard-0": the object has been '
        "modified; please apply your changes to the latest version and try again",
        "reason": "Conflict",
        "code": 409,
    }
    assert fake_kube.get("leases", "shard-0", "gpu")["spec"]["holderIdentity"] == "replica-b"


async def test_a_custom_resource_update_needs_a_resource_version(fake_kube, kube_api):
    custom = CustomObjectsApi(kube_api)
    await custom.create_namespaced_custom_object(GROUP, VERSION, "gpu", PLURAL, buffer())
    with pytest.raises(ApiException) as refused:
        await custom.replace_namespaced_custom_object(GROUP, VERSION, "gpu", PLURAL, "a100-buffer", buffer(replicas=3))
    assert refused.value.status == 422
    assert "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update" in refused.value.body
    assert fake_kube.get(PLURAL, "a100-buffer", "gpu")["spec"]["replicas"] == 2


async def test_merge_patch_and_generation(fake_kube, kube_api):
    custom = CustomObjectsApi(kube_api)
    created = await custom.create_namespaced_custom_object(GROUP, VERSION, "gpu", PLURAL, buffer())
    assert created["metadata"]["generation"] == 1
    patched = await custom.patch_namespaced_custom_object(
        GROUP, VERSION, "gpu", PLURAL, "a100-buffer", {"spec": {"replicas": 5}}, **MERGE
    )
    assert patched["spec"] == {"podTemplateRef": {"name": "a100-chunk"}, "replicas": 5}
    assert patched["metadata"]["generation"] == 2
    labelled = await custom.patch_namespaced_custom_object(
        GROUP, VERSION, "gpu", PLURAL, "a100-buffer", {"metadata": {"labels": {"team": "ml"}}}, **MERGE
    )
    assert labelled["metadata"]["generation"] == 2  # metadata is not spec
    stale = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}, "spec": {"replicas": 1}}
    with pytest.raises(ApiException) as conflict:
        await custom.patch_namespaced_custom_object(GROUP, VERSION, "gpu", PLURAL, "a100-buffer", stale, **MERGE)
    assert conflict.value.status == 409
    assert fake_kube.get(PLURAL, "a100-buffer", "gpu")["spec"]["replicas"] == 5


async def test_a_dict_sent_as_a_json_patch_is_refused_as_kube_apiserver_refuses_it(fake_kube, kube_api):
    custom = CustomObjectsApi(kube_api)
    await custom.create_namespaced_custom_object(GROUP, VERSION, "gpu", PLURAL, buffer())
    with pytest.raises(ApiException) as refused:  # kubernetes-asyncio's default content type for a dict
        await custom.patch_namespaced_custom_object(GROUP, VERSION, "gpu", PLURAL, "a100-buffer", {"spec": {}})
    assert refused.value.status == 400


async def test_json_patch_test_operation_guards_the_write(fake_kube, kube_api):
    custom = CustomObjectsApi(kube_api)
    await custom.create_namespaced_custom_object(GROUP, VERSION, "gpu", PLURAL, buffer())
    guarded = [
        {"op": "test", "path": "/spec/replicas", "value": 9},
        {"op": "replace", "path": "/spec/replicas", "value": 4},
    ]
    with pytest.raises(ApiException) as failed:
        await custom.patch_namespaced_custom_object(GROUP, VERSION, "gpu", PLURAL, "a100-buffer", guarded)
    assert failed.value.status == 422
    guarded[0]["value"] = 2
    patched = await custom.patch_namespaced_custom_object(GROUP, VERSION, "gpu", PLURAL, "a100-buffer", guarded)
    assert patched["spec"]["replicas"] == 4


async def test_server_side_apply_creates_then_merges_and_names_the_manager(fake_kube, kube_api):
    custom = CustomObjectsApi(kube_api)
    with pytest.raises(ApiException) as no_manager:
        await custom.patch_namespaced_custom_object(
            GROUP, VERSION, "gpu", PLURAL, "a100-buffer", buffer(), _content_type="application/apply-patch+yaml"
        )
    assert no_manager.value.status == 422
    assert "fieldManager: Required value: is required for apply patch" in no_manager.value.body
    await custom.patch_namespaced_custom_object(
        GROUP, VERSION, "gpu", PLURAL, "a100-buffer", buffer(replicas=3),
        field_manager="gpu-autoscaler", _content_type="application/apply-patch+yaml",
    )  # fmt: skip
    # 201 Created, which kubernetes-asyncio's generated client does not deserialise for a patch.
    assert fake_kube.requests[-1].status == 201
    created = await custom.get_namespaced_custom_object(GROUP, VERSION, "gpu", PLURAL, "a100-buffer")
    assert created["spec"]["replicas"] == 3
    applied = await custom.patch_namespaced_custom_object(
        GROUP, VERSION, "gpu", PLURAL, "a100-buffer", buffer(replicas=6),
        field_manager="gpu-autoscaler", _content_type="application/apply-patch+yaml",
    )  # fmt: skip
    assert applied["spec"]["replicas"] == 6
    assert applied["metadata"]["uid"] == created["metadata"]["uid"]
    assert [e["manager"] for e in applied["metadata"]["managedFields"]] == ["gpu-autoscaler"]
    assert applied["metadata"]["managedFields"][0]["operation"] == "Apply"


async def test_strategic_merge_is_refused_for_custom_resources_as_kube_apiserver_does(fake_kube, kube_api):
    custom = CustomObjectsApi(kube_api)
    await custom.create_namespaced_custom_object(GROUP, VERSION, "gpu", PLURAL, buffer())
    with pytest.raises(ApiException) as refused:
        await custom.patch_namespaced_custom_object(
            GROUP, VERSION, "gpu", PLURAL, "a100-buffer", {"spec": {"replicas": 1}},
            _content_type="application/strategic-merge-patch+json",
        )  # fmt: skip
    assert refused.value.status == 415
    core = CoreV1Api(kube_api)
    fake_kube.add("configmaps", {"metadata": {"name": "c", "namespace": "gpu"}, "data": {"a": "1"}})
    patched = await core.patch_namespaced_config_map("c", "gpu", {"data": {"b": "2"}})  # strategic merge
    assert patched.data == {"a": "1", "b": "2"}


async def test_status_subresource_keeps_spec_and_status_apart(fake_kube, kube_api):
    custom = CustomObjectsApi(kube_api)
    with_status = {**buffer(), "status": {"replicas": 7}}
    created = await custom.create_namespaced_custom_object(GROUP, VERSION, "gpu", PLURAL, with_status)
    assert "status" not in created  # dropped on create: status is written through /status
    reported = await custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, "gpu", PLURAL, "a100-buffer", {"spec": {"replicas": 9}, "status": {"replicas": 2}}, **MERGE
    )
    assert reported["status"] == {"replicas": 2}
    assert reported["spec"]["replicas"] == 2  # the spec part of a status write is ignored
    assert reported["metadata"]["generation"] == 1
    resized = await custom.patch_namespaced_custom_object(
        GROUP, VERSION, "gpu", PLURAL, "a100-buffer", {"spec": {"replicas": 4}, "status": {"replicas": 0}}, **MERGE
    )
    assert resized["spec"]["replicas"] == 4
    assert resized["status"] == {"replicas": 2}  # the status part of a spec write is ignored


async def test_delete_and_missing_objects(fake_kube, kube_api):
    custom = CustomObjectsApi(kube_api)
    await custom.create_namespaced_custom_object(GROUP, VERSION, "gpu", PLURAL, buffer())
    with pytest.raises(ApiException) as exists:
        await custom.create_namespaced_custom_object(GROUP, VERSION, "gpu", PLURAL, buffer())
    assert exists.value.status == 409
    assert status_of(exists.value)["reason"] == "AlreadyExists"
    assert status_of(exists.value)["message"] == 'capacitybuffers.autoscaling.x-k8s.io "a100-buffer" already exists'
    deleted = await custom.delete_namespaced_custom_object(GROUP, VERSION, "gpu", PLURAL, "a100-buffer")
    assert deleted["status"] == "Success"
    assert fake_kube.get(PLURAL, "a100-buffer", "gpu") is None
    with pytest.raises(ApiException) as missing:
        await custom.patch_namespaced_custom_object(GROUP, VERSION, "gpu", PLURAL, "a100-buffer", {"spec": {}}, **MERGE)
    assert missing.value.status == 404


async def test_discovery_lists_groups_and_resources_as_served(fake_kube, kube_api):
    groups = await ApisApi(kube_api).get_api_versions()
    by_name = {group.name: group for group in groups.groups}
    assert [v.version for v in by_name[GROUP].versions] == ["v1beta1", "v1alpha1"]
    assert by_name[GROUP].preferred_version.version == "v1beta1"
    resources, _, _ = await kube_api.call_api(
        f"/apis/{GROUP}/v1beta1", "GET", response_types_map={200: "object"}, auth_settings=["BearerToken"]
    )
    assert {r["name"] for r in resources["resources"]} == {"capacitybuffers", "capacitybuffers/status"}
    fake_kube.served_versions[PLURAL] = ("v1alpha1",)
    groups = await ApisApi(kube_api).get_api_versions()
    assert [v.version for v in {g.name: g for g in groups.groups}[GROUP].versions] == ["v1alpha1"]
    fake_kube.installed.discard(PLURAL)
    groups = await ApisApi(kube_api).get_api_versions()
    assert GROUP not in {g.name for g in groups.groups}


async def test_a_resource_served_only_in_an_older_version(fake_kube, kube_api):
    fake_kube.served_versions[PLURAL] = ("v1alpha1",)
    custom = CustomObjectsApi(kube_api)
    with pytest.raises(ApiException) as not_served:
        await custom.list_namespaced_custom_object(GROUP, "v1beta1", "gpu", PLURAL)
    assert not_served.value.status == 404
    old = {**buffer(), "apiVersion": f"{GROUP}/v1alpha1"}
    created = await custom.create_namespaced_custom_object(GROUP, "v1alpha1", "gpu", PLURAL, old)
    assert created["apiVersion"] == f"{GROUP}/v1alpha1"
    listed = await custom.list_namespaced_custom_object(GROUP, "v1alpha1", "gpu", PLURAL)
    assert [item["apiVersion"] for item in listed["items"]] == [f"{GROUP}/v1alpha1"]


async def test_a_watch_sees_patches_as_modified(fake_kube, kube_api):
    custom = CustomObjectsApi(kube_api)
    created = await custom.create_namespaced_custom_object(GROUP, VERSION, "gpu", PLURAL, buffer())
    rv = created["metadata"]["resourceVersion"]
    response = await custom.list_namespaced_custom_object(
        GROUP, VERSION, "gpu", PLURAL, watch=True, resource_version=rv, _preload_content=False
    )
    await asyncio.wait_for(fake_kube.wait_for_watchers(PLURAL), 5)
    await custom.patch_namespaced_custom_object(
        GROUP, VERSION, "gpu", PLURAL, "a100-buffer", {"spec": {"replicas": 8}}, **MERGE
    )
    line = await asyncio.wait_for(response.content.readline(), 5)
    event = json.loads(line)
    assert event["type"] == "MODIFIED"
    assert event["object"]["spec"]["replicas"] == 8
    response.close()


async def test_self_subject_access_review_answers_for_the_caller_and_checks_its_body(fake_kube, kube_api):
    from kubernetes_asyncio.client import AuthorizationV1Api

    fake_kube.ssar_rule = lambda spec: spec["user"] == "fake-admin" and spec["resourceAttributes"]["verb"] == "get"
    api = AuthorizationV1Api(kube_api)

    async def review(attributes: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attributes}}  # fmt: skip
        try:
            response = await api.create_self_subject_access_review(body, _preload_content=False)
        except ApiException as error:
            return error.status, json.loads(error.body)
        return response.status, await response.json()

    code, answer = await review({"verb": "get", "resource": "pods", "namespace": "ml"})
    assert (code, answer["kind"], answer["status"]) == (201, "SelfSubjectAccessReview", {"allowed": True})
    code, answer = await review({"verb": "list", "resource": "pods"})
    assert answer["status"] == {"allowed": False, "reason": "denied by the fake's ssar_rule"}
    # A field SelfSubjectAccessReview does not have: kube-apiserver's strict decoding refuses it.
    code, answer = await review({"verb": "get", "resource": "pods", "verbb": "list"})
    assert code == 400
    assert answer["message"] == 'strict decoding error: unknown field "spec.resourceAttributes.verbb"'
    assert [spec["resourceAttributes"]["verb"] for spec in fake_kube.ssar_requests] == ["get", "list"]


async def test_access_reviews_are_checked_against_kubernetes_own_schemas(fake_kube):
    """TokenReview and SubjectAccessReview bodies go through kubernetes-validate's schemas, as
    kube-apiserver checks them: a field the API does not define is refused, not answered."""
    import aiohttp

    headers = {"Authorization": f"Bearer {fake_kube.bearer_token}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        for group, plural, kind, spec, unknown in (
            ("authentication.k8s.io", "tokenreviews", "TokenReview", {"tokn": "x"}, "spec.tokn"),
            ("authorization.k8s.io", "subjectaccessreviews", "SubjectAccessReview", {"user": "u", "verbs": "get"},
             "spec.verbs"),
        ):  # fmt: skip
            body = {"apiVersion": f"{group}/v1", "kind": kind, "spec": spec}
            async with session.post(f"{fake_kube.url}/apis/{group}/v1/{plural}", json=body) as response:
                status = await response.json()
            assert response.status in (400, 422), (kind, status)
            assert status["kind"] == "Status" and f'unknown field "{unknown}"' in status["message"], status
    assert fake_kube.token_requests == []
