"""Access control backed by the Kubernetes API: TokenReview, SubjectAccessReview and the
``kube-system/extension-apiserver-authentication`` ConfigMap (``auth.mode: kubernetes``)."""

from __future__ import annotations

import logging

from kubernetes_asyncio.client import ApiClient

from adapters import kube_auth
from adapters.kube_client import KubeError
from autoscaler.settings import AuthSettings
from autoscaler.web.auth import (
    Authenticator,
    RequestHeaderConfig,
    ReviewUnavailable,
    SubjectAccessReviewAuthorizer,
    User,
)
from autoscaler.web.certificates import load_certificates

log = logging.getLogger(__name__)


class KubeTokenReviewer:
    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client

    async def review_token(self, token: str) -> User | None:
        try:
            return await kube_auth.review_token(self.api_client, token)
        except KubeError as error:
            raise ReviewUnavailable(str(error)) from None


class KubeAccessReviewer:
    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client

    async def review_access(self, user: User, *, verb: str, group: str, resource: str, namespace: str) -> bool:
        try:
            return await kube_auth.review_access(self.api_client, user, verb, group, resource, namespace)
        except KubeError as error:
            raise ReviewUnavailable(str(error)) from None


def _authorities(pem: str | None, what: str) -> tuple:  # type: ignore[type-arg]
    if not pem:
        return ()
    try:
        return tuple(load_certificates(pem.encode("ascii")))
    except ValueError as error:
        raise KubeError(
            f"{kube_auth.REQUEST_HEADER_CONFIGMAP}: {what} is not a PEM certificate bundle: {error}"
        ) from None


async def kubernetes_authenticator(api_client: ApiClient, auth: AuthSettings) -> Authenticator:
    """Trust what the cluster's own ConfigMap says, as every aggregated API server does.

    Raises ``KubeError`` when the ConfigMap cannot be read: without it the aggregator's requests
    cannot be told from forged ones, so the service must not start.
    """
    config = await kube_auth.read_request_header_config(api_client)
    proxy_authorities = _authorities(config.client_ca_pem, "requestheader-client-ca-file")
    requestheader = None
    if proxy_authorities:
        requestheader = RequestHeaderConfig(
            authorities=proxy_authorities,
            allowed_names=config.allowed_names,
            username_headers=config.username_headers or auth.username_headers,
            group_headers=config.group_headers or auth.group_headers,
            extra_headers_prefixes=config.extra_headers_prefixes or auth.extra_headers_prefixes,
        )
    else:
        log.warning("the cluster publishes no requestheader-client-ca-file: aggregated requests cannot authenticate")
    return Authenticator(
        requestheader=requestheader,
        client_authorities=_authorities(config.client_ca_file_pem, "client-ca-file"),
        token_reviewer=KubeTokenReviewer(api_client),
        token_cache_ttl_s=auth.token_cache_ttl.total_seconds(),
    )


def kubernetes_authorizer(api_client: ApiClient, auth: AuthSettings) -> SubjectAccessReviewAuthorizer:
    return SubjectAccessReviewAuthorizer(
        KubeAccessReviewer(api_client), cache_ttl_s=auth.authorization_cache_ttl.total_seconds()
    )
