"""TokenReview, SubjectAccessReview and the request-header ConfigMap against the fake API server."""

from __future__ import annotations

import pytest

from adapters.kubernetes.auth import (
    RequestHeaderConfig,
    UserInfo,
    read_request_header_config,
    review_access,
    review_token,
)
from adapters.kubernetes.client import (
    KubeClientSettings,
    KubeError,
    KubeForbidden,
    KubeNotFound,
    KubeUnavailable,
    create_api_client,
)
from tests import fakekube

fake_kube = fakekube.fake_kube
kube_api = fakekube.kube_api

ALICE = {"username": "alice", "uid": "u-1", "groups": ["dev", "system:authenticated"], "extra": {"scopes": ["a", "b"]}}


async def test_token_review_returns_the_user(fake_kube, kube_api):
    fake_kube.tokens = {"tok": ALICE}
    user = await review_token(kube_api, "tok")
    assert user == UserInfo("alice", "u-1", ("dev", "system:authenticated"), {"scopes": ("a", "b")})
    assert fake_kube.token_requests[-1]["spec"]["token"] == "tok"
    assert fake_kube.token_requests[-1]["kind"] == "TokenReview"


async def test_unknown_token_is_none(fake_kube, kube_api):
    assert await review_token(kube_api, "forged") is None


async def test_audiences_are_sent_and_checked(fake_kube, kube_api):
    fake_kube.tokens = {"tok": {**ALICE, "audiences": ["gpu-autoscaler"]}, "other": {**ALICE, "audiences": ["vault"]}}
    assert await review_token(kube_api, "tok", audiences=("gpu-autoscaler",)) is not None
    assert fake_kube.token_requests[-1]["spec"]["audiences"] == ["gpu-autoscaler"]
    assert await review_token(kube_api, "other", audiences=("gpu-autoscaler",)) is None
    assert await review_token(kube_api, "other") is not None  # no audience asked for


async def test_subject_access_review_sends_the_whole_user(fake_kube, kube_api):
    fake_kube.sar_rule = lambda spec: spec["user"] == "alice" and spec["resourceAttributes"]["namespace"] == "ml"
    alice = UserInfo("alice", "u-1", ("dev",), {"scopes": ("a",)})
    args = ("get", "external.metrics.k8s.io", "gpu_demand_forecast")
    assert await review_access(kube_api, alice, *args, "ml")
    assert not await review_access(kube_api, alice, *args, "prod")
    assert not await review_access(kube_api, UserInfo("bob"), *args, "ml")
    spec = fake_kube.sar_requests[0]
    assert spec == {
        "user": "alice",
        "uid": "u-1",
        "groups": ["dev"],
        "extra": {"scopes": ["a"]},
        "resourceAttributes": {
            "verb": "get",
            "group": "external.metrics.k8s.io",
            "resource": "gpu_demand_forecast",
            "namespace": "ml",
        },
    }
    assert "uid" not in fake_kube.sar_requests[2]  # bob has none
    await review_access(kube_api, alice, *args, "ml", name="one")
    assert fake_kube.sar_requests[-1]["resourceAttributes"]["name"] == "one"


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("unreachable", KubeUnavailable),
        ("error", KubeUnavailable),
        ("500", KubeUnavailable),
        ("forbidden", KubeForbidden),
    ],
)
async def test_review_failures_raise_so_callers_fail_closed(fake_kube, kube_api, mode, error):
    fake_kube.tokens = {"tok": ALICE}
    fake_kube.sar_rule = lambda spec: True
    fake_kube.fail_mode = mode
    with pytest.raises(error):
        await review_token(kube_api, "tok")
    with pytest.raises(error):
        await review_access(kube_api, UserInfo("alice"), "get", "external.metrics.k8s.io", "m", "ml")


@pytest.mark.looptime
async def test_a_review_that_never_answers_times_out(fake_kube):
    api = await create_api_client(KubeClientSettings(kubeconfig_path=fake_kube.kubeconfig_path, request_timeout_s=2))
    try:
        fake_kube.fail_mode = "timeout"
        with pytest.raises(KubeUnavailable):
            await review_token(api, "tok")
    finally:
        await api.close()


async def test_request_header_config_is_read(fake_kube, kube_api):
    fake_kube.set_request_header_config(
        requestheader_client_ca="-----BEGIN CERTIFICATE-----\nproxy\n-----END CERTIFICATE-----\n",
        allowed_names=["front-proxy-client"],
        username_headers=["X-Remote-User"],
        group_headers=["X-Remote-Group"],
        extra_headers_prefixes=["X-Remote-Extra-"],
        client_ca="-----BEGIN CERTIFICATE-----\nclients\n-----END CERTIFICATE-----\n",
    )
    config = await read_request_header_config(kube_api)
    assert config == RequestHeaderConfig(
        client_ca_pem="-----BEGIN CERTIFICATE-----\nproxy\n-----END CERTIFICATE-----\n",
        allowed_names=("front-proxy-client",),
        username_headers=("X-Remote-User",),
        group_headers=("X-Remote-Group",),
        extra_headers_prefixes=("X-Remote-Extra-",),
        client_ca_file_pem="-----BEGIN CERTIFICATE-----\nclients\n-----END CERTIFICATE-----\n",
    )
    assert fake_kube.requests[-1].path == "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"


async def test_request_header_config_without_front_proxy(fake_kube, kube_api):
    fake_kube.set_request_header_config(requestheader_client_ca=None, client_ca="pem")
    config = await read_request_header_config(kube_api)
    assert config.client_ca_pem is None
    assert config.allowed_names == config.username_headers == config.group_headers == ()
    assert config.client_ca_file_pem == "pem"


async def test_request_header_config_missing_or_malformed(fake_kube, kube_api):
    with pytest.raises(KubeNotFound):
        await read_request_header_config(kube_api)
    fake_kube.add(
        "configmaps",
        {
            "metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system"},
            "data": {"requestheader-allowed-names": "front-proxy-client"},  # not JSON
        },
    )
    with pytest.raises(KubeError, match="JSON array"):
        await read_request_header_config(kube_api)


def test_user_info_is_hashable_and_immutable():
    user = UserInfo("alice", groups=["dev"], extra={"k": ["v"]})  # type: ignore[arg-type]
    assert user.groups == ("dev",)
    assert user.extra["k"] == ("v",)
    assert hash(user) == hash(UserInfo("alice", groups=("dev",), extra={"k": ("v",)}))
    assert {user: True}[UserInfo("alice", groups=("dev",), extra={"k": ("v",)})]
    with pytest.raises(TypeError):
        user.extra["k"] = ("w",)  # type: ignore[index]
