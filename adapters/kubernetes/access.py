"""What the Kubernetes API says about the service's own standing (``gpu-autoscaler preflight``).

- ``self_review``: may the caller (the service account, in the pod) do this? A
  SelfSubjectAccessReview (authorization.k8s.io/v1), which every authenticated user may create.
- ``read_apiservice``: the APIService object of one group/version (apiregistration.k8s.io/v1), or
  ``None`` when it does not exist.
- ``served_resources``: the resources one group/version serves (discovery), or ``None`` when the API
  does not serve that group/version at all (a CRD that is not installed).
Failures to get an answer raise ``KubeError`` (``KubeForbidden``, ``KubeUnavailable``...).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client import (
    ApiClient,
    ApiregistrationV1Api,
    AuthorizationV1Api,
    V1ResourceAttributes,
    V1SelfSubjectAccessReview,
    V1SelfSubjectAccessReviewSpec,
)

from adapters.kubernetes.client import KubeNotFound, read_json


@dataclass(frozen=True)
class Access:
    """One permission: ``verb`` on ``resource`` of API ``group`` (``""``: core), in ``namespace``
    (``None``: every namespace, or a cluster-scoped resource), on object ``name`` (``None``: any)."""

    verb: str
    group: str
    resource: str
    namespace: str | None = None
    name: str | None = None

    @property
    def target(self) -> str:
        """``configmaps/NAME in namespace NS``, ``cronjobs.batch``: what the verb applies to."""
        resource = f"{self.resource}.{self.group}" if self.group else self.resource
        target = f"{resource}/{self.name}" if self.name else resource
        return f"{target} in namespace {self.namespace}" if self.namespace else target

    def __str__(self) -> str:
        return f"{self.verb} {self.target}"


@dataclass(frozen=True)
class AccessAnswer:
    allowed: bool
    reason: str  # the authorizer's words (empty when it gave none)


async def self_review(api_client: ApiClient, access: Access) -> AccessAnswer:
    """Whether the caller may do ``access``; a deny and "no opinion" are both not allowed."""
    body = V1SelfSubjectAccessReview(
        api_version="authorization.k8s.io/v1",
        kind="SelfSubjectAccessReview",
        spec=V1SelfSubjectAccessReviewSpec(
            resource_attributes=V1ResourceAttributes(
                verb=access.verb,
                group=access.group,
                resource=access.resource,
                namespace=access.namespace,
                name=access.name,
            )
        ),
    )
    answer = await read_json(
        AuthorizationV1Api(api_client).create_self_subject_access_review(body, _preload_content=False),
        f"create selfsubjectaccessreview ({access})",
    )
    status = answer.get("status") or {}
    allowed = status.get("allowed") is True and status.get("denied") is not True
    return AccessAnswer(allowed=allowed, reason=str(status.get("reason") or status.get("evaluationError") or ""))


async def read_apiservice(api_client: ApiClient, name: str) -> Mapping[str, Any] | None:
    """The APIService ``name`` (e.g. ``v1beta1.external.metrics.k8s.io``), or ``None`` if absent."""
    try:
        document: Mapping[str, Any] = await read_json(
            ApiregistrationV1Api(api_client).read_api_service(name, _preload_content=False),
            f"read apiservice {name}",
        )
    except KubeNotFound:
        return None
    return document


async def served_resources(api_client: ApiClient, group: str, version: str) -> frozenset[str] | None:
    """The plural names ``group/version`` serves (subresources left out), or ``None`` if not served."""
    path = f"/apis/{group}/{version}" if group else f"/api/{version}"
    try:
        document = await read_json(
            api_client.call_api(
                path,
                "GET",
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _preload_content=False,
            ),
            f"discover {group or 'core'}/{version}",
        )
    except KubeNotFound:
        return None
    return frozenset(
        str(resource["name"])
        for resource in document.get("resources") or []
        if isinstance(resource, Mapping) and "/" not in str(resource.get("name", "/"))
    )
