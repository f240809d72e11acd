"""Authentication and authorisation of an aggregated API server.

The Kubernetes facts it honours are in docs/kubernetes.md, "Authentication and authorisation".

Order, as kube-apiserver's delegated authenticators do it:
1. a client certificate issued by the request-header CA whose CN is allowed: the user comes from the
   ``X-Remote-User``/``X-Remote-Group``/``X-Remote-Extra-*`` headers (the aggregator's proxy);
2. a client certificate issued by the client CA: the user is its CN, the groups its O fields;
3. a bearer token, checked with a TokenReview.
Headers are ignored unless step 1 applies, so a caller cannot forge them. When a review cannot be
made, access is refused (fail closed), never granted.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Hashable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from cachetools import LRUCache, TTLCache
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from multidict import MultiMapping

from adapters.kubernetes.auth import UserInfo as User
from autoscaler.echoes import echo
from autoscaler.throttled_log import ThrottledLog
from autoscaler.web.security.certificates import common_name, issued_by, organizations

log = logging.getLogger(__name__)


# The review caches are bounded by bytes, not entries: a path or a metric name is as long as the
# request line allows (64 KiB), and 16,384 entries of those held about 1.1 GB (issue 38). 8 MiB holds
# some 16,000 verdicts of ordinary paths, and at most 8 MiB of a caller's long ones.
REVIEW_CACHE_BYTES = 8 * 1024 * 1024
# What an entry costs besides its strings' characters: the key tuple, the cache's links, the verdict.
REVIEW_ENTRY_OVERHEAD_BYTES = 512


def user_size(user: User) -> int:
    """Characters a user holds (name, uid, groups, extra), for the caches' byte bounds."""
    extra = sum(len(key) + sum(map(len, values)) for key, values in user.extra.items())
    return len(user.username) + len(user.uid) + sum(map(len, user.groups)) + extra


def token_key(token: str) -> bytes:
    """A bearer token as the token caches key it: its SHA-256, 32 bytes however long the token, and the
    token itself never kept."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class _Verdict(NamedTuple):
    allowed: bool
    size: int  # the entry's weight in the cache's byte bound


class ReviewCache:
    """SubjectAccessReview verdicts kept ``ttl_s``, bounded by the bytes of their keys (:data:`REVIEW_CACHE_BYTES`)."""

    def __init__(self, ttl_s: float, *, max_bytes: int = REVIEW_CACHE_BYTES) -> None:
        self._verdicts: TTLCache[Hashable, _Verdict] = TTLCache(
            maxsize=max_bytes, ttl=ttl_s, getsizeof=lambda verdict: verdict.size
        )

    def get(self, key: Hashable) -> bool | None:
        verdict = self._verdicts.get(key)
        return None if verdict is None else verdict.allowed

    def put(self, key: Hashable, allowed: bool, characters: int) -> None:
        """Keep a verdict whose key holds ``characters``; one heavier than the whole bound is not kept."""
        size = REVIEW_ENTRY_OVERHEAD_BYTES + characters
        if size <= self._verdicts.maxsize:
            self._verdicts[key] = _Verdict(allowed, size)

    @property
    def bytes(self) -> int:
        """The weight held now (expired entries are dropped when the cache is next written)."""
        return int(self._verdicts.currsize)

    def __len__(self) -> int:
        return len(self._verdicts)


class AccessDenied(Exception):
    """Refused access; ``status`` is 401 (who are you?) or 403 (not allowed)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class CertificateVerdict:
    """What one client certificate proves, decided once per certificate."""

    proxy_allowed: bool  # issued by the request-header CA with an allowed CN: headers name the user
    proxy_denied_name: str | None  # issued by the request-header CA, but this CN is not allowed
    client_user: User | None  # issued by the client CA: the user it names


class ReviewUnavailable(Exception):
    """A TokenReview or SubjectAccessReview could not be made (API unreachable, 5xx)."""


class TokenReviewer(Protocol):
    async def review_token(self, token: str) -> User | None: ...


class AccessReviewer(Protocol):
    async def review_access(self, user: User, *, verb: str, group: str, resource: str, namespace: str) -> bool: ...


class PathAccessReviewer(Protocol):
    async def review_path_access(self, user: User, *, verb: str, path: str) -> bool: ...


@dataclass(frozen=True)
class RequestHeaderConfig:
    """Who may assert users through headers, and which headers carry them."""

    authorities: tuple[x509.Certificate, ...]
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_headers_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)


class Authenticator:
    def __init__(
        self,
        *,
        requestheader: RequestHeaderConfig | None,
        client_authorities: tuple[x509.Certificate, ...] = (),
        token_reviewer: TokenReviewer | None = None,
        token_cache_ttl_s: float = 10.0,
    ) -> None:
        self.requestheader = requestheader
        self.client_authorities = client_authorities
        self.token_reviewer = token_reviewer
        self._token_cache: TTLCache[bytes, User | None] = TTLCache(maxsize=4096, ttl=token_cache_ttl_s)
        # What a certificate proves never changes, and parsing plus a signature check per request
        # costs more than the rest of the request; TLS has already checked validity dates.
        self._certificate_verdicts: LRUCache[bytes, CertificateVerdict] = LRUCache(maxsize=1024)
        self._proxy_name_refusals = ThrottledLog(log)

    def reconfigure(
        self, *, requestheader: RequestHeaderConfig | None, client_authorities: tuple[x509.Certificate, ...]
    ) -> None:
        """Trust new CAs (and proxy names and headers) from the next request on, forgetting every verdict."""
        self.requestheader = requestheader
        self.client_authorities = client_authorities
        self._certificate_verdicts.clear()

    def trusted_pems(self) -> list[bytes]:
        """The CAs (PEM) the TLS handshake must accept client certificates from."""
        authorities = list(self.client_authorities)
        if self.requestheader is not None:
            authorities += list(self.requestheader.authorities)
        return [authority.public_bytes(Encoding.PEM) for authority in authorities]

    async def authenticate(self, peer_certificate_der: bytes | None, headers: MultiMapping[str]) -> User:
        if peer_certificate_der:
            user = self._from_certificate(self._verdict(peer_certificate_der), headers)
            if user is not None:
                return user
        authorization = headers.get("Authorization") or ""
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return await self._from_token(token.strip())
        raise AccessDenied(401, "Unauthorized")

    def _verdict(self, der: bytes) -> CertificateVerdict:
        verdict = self._certificate_verdicts.get(der)
        if verdict is None:
            certificate = x509.load_der_x509_certificate(der)
            proxy = self.requestheader
            name = common_name(certificate)
            from_proxy_ca = proxy is not None and issued_by(certificate, list(proxy.authorities))
            name_allowed = proxy is not None and (not proxy.allowed_names or name in proxy.allowed_names)
            from_client_ca = bool(self.client_authorities) and issued_by(certificate, list(self.client_authorities))
            verdict = CertificateVerdict(
                proxy_allowed=from_proxy_ca and name_allowed,
                proxy_denied_name=name if from_proxy_ca and not name_allowed else None,
                # kube-apiserver's x509 authenticator: a certificate without a user name authenticates nobody.
                client_user=User(username=name, groups=organizations(certificate)) if from_client_ca and name else None,
            )
            self._certificate_verdicts[der] = verdict
        return verdict

    def _from_certificate(self, verdict: CertificateVerdict, headers: MultiMapping[str]) -> User | None:
        if verdict.proxy_denied_name is not None:
            self._proxy_name_refusals.warning(
                "request-header client certificate CN %r is not in the allowed names: its headers are ignored",
                verdict.proxy_denied_name,
            )
        if verdict.proxy_allowed and self.requestheader is not None:
            user = self._from_headers(self.requestheader, headers)
            if user is not None:
                return user
        return verdict.client_user

    @staticmethod
    def _from_headers(proxy: RequestHeaderConfig, headers: MultiMapping[str]) -> User | None:
        username = next((value for h in proxy.username_headers if (value := headers.get(h))), None)
        if not username:
            return None
        groups = tuple(group for h in proxy.group_headers for group in headers.getall(h, []))
        extra: dict[str, tuple[str, ...]] = {}
        for header in headers:
            for prefix in proxy.extra_headers_prefixes:
                if header.lower().startswith(prefix.lower()):
                    extra[header[len(prefix) :].lower()] = tuple(headers.getall(header, []))
        return User(username=username, groups=groups, extra=extra)

    async def _from_token(self, token: str) -> User:
        if self.token_reviewer is None:
            raise AccessDenied(401, "Unauthorized")
        key = token_key(token)
        if key in self._token_cache:
            cached = self._token_cache[key]
        else:
            try:
                cached = await self.token_reviewer.review_token(token)
            except ReviewUnavailable as error:
                log.error("TokenReview failed, refusing the request: %s", error)
                raise AccessDenied(401, "Unauthorized: the token could not be reviewed") from None
            self._token_cache[key] = cached
        if cached is None:
            raise AccessDenied(401, "Unauthorized")
        return cached


class Authorizer(Protocol):
    async def authorize(self, user: User, *, namespace: str, metric: str) -> None:
        """Return if ``user`` may get ``metric`` in ``namespace``; raise AccessDenied(403) if not."""
        ...


class AllowAuthenticated:
    """Every authenticated caller may read every metric (the demo, and ``authorization: allow-authenticated``)."""

    async def authorize(self, user: User, *, namespace: str, metric: str) -> None:
        return None


@dataclass(frozen=True)
class AccessControl:
    """``None`` for either part means that part is switched off (``auth.mode: none``, loopback only)."""

    authenticator: Authenticator | None
    authorizer: Authorizer | None
    # KEDA's gRPC port (server.grpc_authorization); None: any client its TLS admits reads every metric.
    grpc_authorizer: Authorizer | None = None


class SubjectAccessReviewAuthorizer:
    """Ask Kubernetes (SubjectAccessReview) whether the user may ``get`` the metric, with a short cache."""

    GROUP = "external.metrics.k8s.io"

    def __init__(
        self, reviewer: AccessReviewer, *, cache_ttl_s: float = 10.0, denied_cache_ttl_s: float | None = None
    ) -> None:
        self.reviewer = reviewer
        self.allowed = ReviewCache(cache_ttl_s)
        self.denied = ReviewCache(cache_ttl_s if denied_cache_ttl_s is None else denied_cache_ttl_s)

    async def authorize(self, user: User, *, namespace: str, metric: str) -> None:
        key = (user, namespace, metric)
        allowed = self.allowed.get(key)
        if allowed is None:
            allowed = self.denied.get(key)
        if allowed is None:
            try:
                allowed = await self.reviewer.review_access(
                    user, verb="get", group=self.GROUP, resource=metric, namespace=namespace
                )
            except ReviewUnavailable as error:
                log.error("SubjectAccessReview failed, refusing the request: %s", error)
                raise AccessDenied(403, "Forbidden: access could not be reviewed") from None
            (self.allowed if allowed else self.denied).put(key, allowed, user_size(user) + len(namespace) + len(metric))
        if not allowed:
            raise AccessDenied(
                403,
                f'{self.GROUP} "{echo(metric)}" is forbidden: User "{echo(user.username)}" cannot get resource '
                f'"{echo(metric)}" in API group "{self.GROUP}" in the namespace "{echo(namespace)}"',
            )


class DelegatedHTTPAuth:
    """The plain port's ``server.http_auth: delegated``, as controller-runtime's secure metrics serving
    and kube-rbac-proxy do it: a bearer token checked with a TokenReview names the user, a
    SubjectAccessReview of the URL path and verb (non-resource attributes) decides. Fails closed."""

    def __init__(self, tokens: TokenReviewer, paths: PathAccessReviewer, *, cache_ttl_s: float = 10.0) -> None:
        self._tokens = tokens
        self._paths = paths
        self._users: TTLCache[bytes, User | None] = TTLCache(maxsize=4096, ttl=cache_ttl_s)
        self.verdicts = ReviewCache(cache_ttl_s)

    async def check(self, authorization: str, *, method: str, path: str) -> User:
        """The user, if the ``Authorization`` header's token may ``method`` ``path``; else AccessDenied."""
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AccessDenied(401, "Unauthorized")
        key = token_key(token)
        if key not in self._users:
            try:
                self._users[key] = await self._tokens.review_token(token)
            except ReviewUnavailable as error:
                log.error("TokenReview failed, refusing the plain port's request: %s", error)
                raise AccessDenied(401, "Unauthorized: the token could not be reviewed") from None
        user = self._users[key]
        if user is None:
            raise AccessDenied(401, "Unauthorized")
        verb = "get" if method in ("GET", "HEAD") else method.lower()
        allowed = self.verdicts.get((user, verb, path))
        if allowed is None:
            try:
                allowed = await self._paths.review_path_access(user, verb=verb, path=path)
            except ReviewUnavailable as error:
                log.error("SubjectAccessReview failed, refusing the plain port's request: %s", error)
                raise AccessDenied(403, "Forbidden: access could not be reviewed") from None
            self.verdicts.put((user, verb, path), allowed, user_size(user) + len(verb) + len(path))
        if not allowed:
            raise AccessDenied(403, f'Forbidden: User "{echo(user.username)}" cannot {verb} path "{echo(path)}"')
        return user


__all__ = ["AccessDenied", "Authenticator", "Authorizer", "ReviewUnavailable", "User"]
