"""Access control backed by the Kubernetes API: TokenReview, SubjectAccessReview and the
``kube-system/extension-apiserver-authentication`` ConfigMap (``auth.mode: kubernetes``), followed
live (``following_authentication``) so that a rotated CA takes effect without a restart."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from functools import partial

from cryptography import x509
from kubernetes_asyncio.client import ApiClient, CoreV1Api

from adapters.kubernetes import auth as kube_auth
from adapters.kubernetes.client import KubeError
from adapters.kubernetes.watch import WatchCache, WatchedResource, WatchEvent, WatchGroup, WatchSettings
from autoscaler.config.settings import AuthSettings
from autoscaler.web.security.auth import (
    Authenticator,
    DelegatedHTTPAuth,
    RequestHeaderConfig,
    ReviewUnavailable,
    SubjectAccessReviewAuthorizer,
    User,
)
from autoscaler.web.security.certificates import load_certificates

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


class KubePathAccessReviewer:
    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client

    async def review_path_access(self, user: User, *, verb: str, path: str) -> bool:
        try:
            return await kube_auth.review_path_access(self.api_client, user, verb, path)
        except KubeError as error:
            raise ReviewUnavailable(str(error)) from None


def delegated_http_auth(api_client: ApiClient, auth: AuthSettings) -> DelegatedHTTPAuth:
    """``server.http_auth: delegated`` for the plain port, with the HTTPS port's cache TTL."""
    return DelegatedHTTPAuth(
        KubeTokenReviewer(api_client),
        KubePathAccessReviewer(api_client),
        cache_ttl_s=auth.authorization_cache_ttl.total_seconds(),
    )


def _authorities(pem: str | None, what: str) -> tuple[x509.Certificate, ...]:
    if not pem:
        return ()
    try:
        return tuple(load_certificates(pem.encode("ascii")))
    except ValueError as error:
        raise KubeError(
            f"{kube_auth.REQUEST_HEADER_CONFIGMAP}: {what} is not a PEM certificate bundle: {error}"
        ) from None


def _trusted(
    config: kube_auth.RequestHeaderConfig, auth: AuthSettings
) -> tuple[RequestHeaderConfig | None, tuple[x509.Certificate, ...]]:
    """Whom the ConfigMap says to trust: the front proxy (None without its CA) and the client CAs.
    Raises ``KubeError`` when a CA bundle is not PEM."""
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
    return requestheader, _authorities(config.client_ca_file_pem, "client-ca-file")


async def kubernetes_authenticator(api_client: ApiClient, auth: AuthSettings) -> Authenticator:
    """Trust what the cluster's own ConfigMap says, as every aggregated API server does.

    Raises ``KubeError`` when the ConfigMap cannot be read: without it the aggregator's requests
    cannot be told from forged ones, so the service must not start.
    """
    config = await kube_auth.read_request_header_config(api_client)
    requestheader, client_authorities = _trusted(config, auth)
    if requestheader is None:
        log.warning("the cluster publishes no requestheader-client-ca-file: aggregated requests cannot authenticate")
    return Authenticator(
        requestheader=requestheader,
        client_authorities=client_authorities,
        token_reviewer=KubeTokenReviewer(api_client),
        token_cache_ttl_s=auth.token_cache_ttl.total_seconds(),
    )


CONFIGMAP = f"{kube_auth.REQUEST_HEADER_NAMESPACE}/{kube_auth.REQUEST_HEADER_CONFIGMAP}"


class AuthenticationFollower:
    """Applies each new version of the ConfigMap to the authenticator and the TLS client CAs.

    A ConfigMap that becomes unusable (deleted, a CA that is not PEM, a header list that is not a
    JSON array) changes nothing: the last good configuration stays, and ``note`` says what is wrong
    (``/readyz?verbose``) without taking the service out of rotation.
    """

    def __init__(
        self, authenticator: Authenticator, auth: AuthSettings, on_authorities: Callable[[list[bytes]], None]
    ) -> None:
        self.authenticator = authenticator
        self.auth = auth
        self.on_authorities = on_authorities
        self.applied: kube_auth.RequestHeaderConfig | None = None
        self.problem: str | None = None
        self.updates = 0
        self.cache: WatchCache | None = None

    def on_change(self, cache: WatchCache, event: WatchEvent | None) -> None:
        document = cache.objects.get(CONFIGMAP)
        try:
            if document is None:
                raise KubeError(f"ConfigMap {CONFIGMAP} is gone")
            config = kube_auth.parse_request_header_config(document)
            requestheader, client_authorities = _trusted(config, self.auth)
        except KubeError as error:
            self.problem = f"{error}; keeping the last good configuration"
            log.error("authentication configuration not updated: %s", self.problem)
            return
        self.problem = None
        if config == self.applied:
            return
        first = self.applied is None
        self.applied = config
        self.authenticator.reconfigure(requestheader=requestheader, client_authorities=client_authorities)
        self.on_authorities(self.authenticator.trusted_pems())
        if not first:
            self.updates += 1
            log.info("authentication configuration updated from ConfigMap %s", CONFIGMAP)

    def note(self) -> str:
        """The ``/readyz?verbose`` line: ``failing: ...`` while the last change could not be used."""
        if self.problem is not None:
            return f"failing: {self.problem}"
        if self.cache is not None and self.cache.last_error:
            return f"failing: cannot watch ConfigMap {CONFIGMAP} ({self.cache.last_error}); using the last read"
        return f"following ConfigMap {CONFIGMAP} ({self.updates} updates)"


@contextlib.asynccontextmanager
async def following_authentication(
    api_client: ApiClient,
    auth: AuthSettings,
    authenticator: Authenticator,
    on_authorities: Callable[[list[bytes]], None],
    watch_settings: WatchSettings,
) -> AsyncIterator[AuthenticationFollower]:
    """Watch the ConfigMap (by name: the reader Role grants get, list and watch on it alone) until the block ends."""
    follower = AuthenticationFollower(authenticator, auth, on_authorities)
    core = CoreV1Api(api_client)
    resource = WatchedResource(
        f"configmap {CONFIGMAP}",
        partial(
            core.list_namespaced_config_map,
            kube_auth.REQUEST_HEADER_NAMESPACE,
            field_selector=f"metadata.name={kube_auth.REQUEST_HEADER_CONFIGMAP}",
        ),
    )
    async with WatchGroup(watch_settings) as group:
        follower.cache = group.start(resource, follower.on_change)
        yield follower


# kube-apiserver's webhook authorizer caches an allow for 5 minutes and a deny for 30 seconds
# (--authorization-webhook-cache-authorized-ttl, --authorization-webhook-cache-unauthorized-ttl).
WEBHOOK_ALLOWED_TTL_S = 300.0
WEBHOOK_DENIED_TTL_S = 30.0


def grpc_authorizer(api_client: ApiClient) -> SubjectAccessReviewAuthorizer:
    """KEDA's gRPC port's SubjectAccessReviews, cached as kube-apiserver's webhook authorizer caches them."""
    return SubjectAccessReviewAuthorizer(
        KubeAccessReviewer(api_client), cache_ttl_s=WEBHOOK_ALLOWED_TTL_S, denied_cache_ttl_s=WEBHOOK_DENIED_TTL_S
    )


def kubernetes_authorizer(api_client: ApiClient, auth: AuthSettings) -> SubjectAccessReviewAuthorizer:
    return SubjectAccessReviewAuthorizer(
        KubeAccessReviewer(api_client), cache_ttl_s=auth.authorization_cache_ttl.total_seconds()
    )
