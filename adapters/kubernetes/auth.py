"""Delegated authentication and authorisation, as aggregated API servers do it (docs/kubernetes.md,
"Authentication and authorisation").

TokenReview (authentication.k8s.io/v1) checks bearer tokens, SubjectAccessReview
(authorization.k8s.io/v1) checks permissions, and the ConfigMap
kube-system/extension-apiserver-authentication says whom to trust for front-proxy headers.
Every failure to get an answer raises a ``KubeError`` so that the caller can fail closed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kubernetes_asyncio.client import (
    ApiClient,
    AuthenticationV1Api,
    AuthorizationV1Api,
    CoreV1Api,
    V1NonResourceAttributes,
    V1ResourceAttributes,
    V1SubjectAccessReview,
    V1SubjectAccessReviewSpec,
    V1TokenReview,
    V1TokenReviewSpec,
)

from adapters.kubernetes.client import KubeError, read_json

REQUEST_HEADER_NAMESPACE = "kube-system"
REQUEST_HEADER_CONFIGMAP = "extension-apiserver-authentication"


@dataclass(frozen=True)
class UserInfo:
    """An authenticated caller; hashable, so it can key a cache of review answers."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Accept lists from JSON; store immutable values so that the hash below stays valid.
        object.__setattr__(self, "groups", tuple(self.groups))
        frozen = {key: tuple(values) for key, values in self.extra.items()}
        object.__setattr__(self, "extra", MappingProxyType(frozen))

    def __hash__(self) -> int:
        return hash((self.username, self.uid, self.groups, tuple(sorted(self.extra.items()))))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, UserInfo):
            return NotImplemented
        return (self.username, self.uid, self.groups, dict(self.extra)) == (
            other.username,
            other.uid,
            other.groups,
            dict(other.extra),
        )


@dataclass(frozen=True)
class RequestHeaderConfig:
    """Contents of kube-system/extension-apiserver-authentication (empty tuples where unset)."""

    client_ca_pem: str | None  # requestheader-client-ca-file: verifies the front proxy's certificate
    allowed_names: tuple[str, ...]  # CNs the front proxy may have; empty allows any
    username_headers: tuple[str, ...]
    group_headers: tuple[str, ...]
    extra_headers_prefixes: tuple[str, ...]
    client_ca_file_pem: str | None  # client-ca-file: verifies ordinary client certificates


def _user_from(document: Mapping[str, Any]) -> UserInfo:
    extra = document.get("extra") or {}
    return UserInfo(
        username=str(document.get("username", "")),
        uid=str(document.get("uid", "")),
        groups=tuple(str(g) for g in document.get("groups") or ()),
        extra={str(k): tuple(str(v) for v in values or ()) for k, values in extra.items()},
    )


async def review_token(api_client: ApiClient, token: str, *, audiences: tuple[str, ...] = ()) -> UserInfo | None:
    """The user a bearer token belongs to, or None when the API says it is not valid.

    With ``audiences`` the token must be valid for at least one of them. Raises ``KubeError``
    (``KubeUnavailable`` when the API cannot be reached) when there is no answer.
    """
    body = V1TokenReview(
        api_version="authentication.k8s.io/v1",
        kind="TokenReview",
        spec=V1TokenReviewSpec(token=token, audiences=list(audiences) or None),
    )
    answer = await read_json(
        AuthenticationV1Api(api_client).create_token_review(body, _preload_content=False),
        "create tokenreview",
    )
    status = answer.get("status") or {}
    if status.get("authenticated") is not True:
        return None
    if audiences and not set(audiences) & set(status.get("audiences") or ()):
        return None
    user = status.get("user") or {}
    if not user.get("username"):
        raise KubeError("create tokenreview: authenticated without a username")
    return _user_from(user)


def _access_review(user: UserInfo, **attributes: Any) -> V1SubjectAccessReview:
    """A SubjectAccessReview of ``user`` (name, groups, uid, extra) for the attributes given."""
    return V1SubjectAccessReview(
        api_version="authorization.k8s.io/v1",
        kind="SubjectAccessReview",
        spec=V1SubjectAccessReviewSpec(
            user=user.username,
            groups=list(user.groups),
            uid=user.uid or None,
            extra={key: list(values) for key, values in user.extra.items()} or None,
            **attributes,
        ),
    )


async def review_access(
    api_client: ApiClient,
    user: UserInfo,
    verb: str,
    group: str,
    resource: str,
    namespace: str,
    name: str | None = None,
) -> bool:
    """Whether ``user`` may ``verb`` the resource (SubjectAccessReview). Raises ``KubeError`` when
    there is no answer; an explicit deny and "no opinion" are both False."""
    body = _access_review(
        user,
        resource_attributes=V1ResourceAttributes(
            verb=verb, group=group, resource=resource, namespace=namespace, name=name or None
        ),
    )
    answer = await read_json(
        AuthorizationV1Api(api_client).create_subject_access_review(body, _preload_content=False),
        "create subjectaccessreview",
    )
    status = answer.get("status") or {}
    return status.get("allowed") is True and status.get("denied") is not True


async def review_path_access(api_client: ApiClient, user: UserInfo, verb: str, path: str) -> bool:
    """Whether ``user`` may ``verb`` the URL ``path`` (a SubjectAccessReview of non-resource attributes,
    as kube-rbac-proxy and controller-runtime's secure metrics serving ask). Raises ``KubeError`` when
    there is no answer."""
    body = _access_review(user, non_resource_attributes=V1NonResourceAttributes(path=path, verb=verb))
    answer = await read_json(
        AuthorizationV1Api(api_client).create_subject_access_review(body, _preload_content=False),
        "create subjectaccessreview",
    )
    status = answer.get("status") or {}
    return status.get("allowed") is True and status.get("denied") is not True


def _json_list(data: Mapping[str, str], key: str) -> tuple[str, ...]:
    raw = data.get(key)
    if not raw:
        return ()
    try:
        values = json.loads(raw)
    except ValueError as exc:
        raise KubeError(f"{REQUEST_HEADER_CONFIGMAP}: {key} is not a JSON array") from exc
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise KubeError(f"{REQUEST_HEADER_CONFIGMAP}: {key} is not a JSON array of strings")
    return tuple(values)


async def read_request_header_config(api_client: ApiClient) -> RequestHeaderConfig:
    """Read kube-system/extension-apiserver-authentication (needs the extension-apiserver-
    authentication-reader Role). Raises ``KubeNotFound`` when the ConfigMap does not exist."""
    document = await read_json(
        CoreV1Api(api_client).read_namespaced_config_map(
            REQUEST_HEADER_CONFIGMAP, REQUEST_HEADER_NAMESPACE, _preload_content=False
        ),
        f"read configmap {REQUEST_HEADER_NAMESPACE}/{REQUEST_HEADER_CONFIGMAP}",
    )
    return parse_request_header_config(document)


def parse_request_header_config(document: Mapping[str, Any]) -> RequestHeaderConfig:
    """The ConfigMap's contents; raises ``KubeError`` naming a key that does not hold what it should."""
    data: Mapping[str, str] = document.get("data") or {}
    return RequestHeaderConfig(
        client_ca_pem=data.get("requestheader-client-ca-file") or None,
        allowed_names=_json_list(data, "requestheader-allowed-names"),
        username_headers=_json_list(data, "requestheader-username-headers"),
        group_headers=_json_list(data, "requestheader-group-headers"),
        extra_headers_prefixes=_json_list(data, "requestheader-extra-headers-prefix"),
        client_ca_file_pem=data.get("client-ca-file") or None,
    )
