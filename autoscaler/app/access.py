"""Who may call the service, built from the settings: authentication, authorisation and the CAs the
secure port trusts (``factory`` and ``serving`` use it; so do the tests and benchmarks)."""

from __future__ import annotations

import logging
from pathlib import Path

from cryptography import x509
from kubernetes_asyncio.client import ApiClient

from autoscaler.config.settings import Settings
from autoscaler.web.security import kubernetes_auth
from autoscaler.web.security.auth import (
    AccessControl,
    AllowAuthenticated,
    Authenticator,
    Authorizer,
    RequestHeaderConfig,
)
from autoscaler.web.security.certificates import CertificateFileError, common_name, read_certificates, validity_fault

log = logging.getLogger(__name__)


def _read_authorities(path: Path | None, setting: str) -> tuple[x509.Certificate, ...]:
    """The CA certificates a setting names; a file that cannot be used raises, naming setting and fault."""
    if path is None:
        return ()
    try:
        authorities = tuple(read_certificates(path))
    except CertificateFileError as error:
        raise error.for_setting(setting) from None
    for authority in authorities:
        # A bundle may hold an old CA beside its successor during a rotation: say so, but serve.
        fault = validity_fault(authority)
        if fault is not None:
            name = common_name(authority)
            log.warning("%s %s: CA %r %s; client certificates it issued are refused", setting, path, name, fault)
    return authorities


def needs_kubernetes_api(settings: Settings) -> bool:
    auth = settings.auth
    if settings.demo.enabled:
        return False
    return (
        settings.inputs is not None
        or settings.actuators.capacity_buffers is not None
        or settings.publication.enabled
        or auth.mode == "kubernetes"
        or (auth.mode == "files" and auth.authorization == "kubernetes")
        or settings.server.grpc_authorization != "none"
        or settings.server.http_auth != "none"
    )


async def build_access(settings: Settings, kube: ApiClient | None = None) -> AccessControl:
    """Authentication and authorisation as ``settings.auth`` says; ``kube`` serves the reviews."""
    auth = settings.auth
    if auth.mode == "none":
        log.warning(
            "auth.mode is 'none': every caller is trusted (loopback address %s only)", settings.server.bind_address
        )
        return AccessControl(authenticator=None, authorizer=None)
    uses_kubernetes = needs_kubernetes_api(settings)
    if uses_kubernetes and kube is None:
        raise ValueError("this auth configuration needs the Kubernetes API, but no client was given")
    # The API asks SubjectAccessReview only where auth says so: a client that the Kubernetes API serves
    # for something else (inputs, gRPC or ops-port reviews) does not make allow-authenticated ask.
    reviews = auth.mode == "kubernetes" or auth.authorization == "kubernetes"
    authorizer: Authorizer = (
        kubernetes_auth.kubernetes_authorizer(kube, auth)
        if kube is not None and uses_kubernetes and reviews
        else AllowAuthenticated()
    )
    if auth.mode == "kubernetes" and kube is not None:
        return AccessControl(await kubernetes_auth.kubernetes_authenticator(kube, auth), authorizer)
    requestheader_authorities = _read_authorities(
        auth.requestheader_client_ca_file, "auth.requestheader_client_ca_file"
    )
    requestheader = (
        RequestHeaderConfig(
            authorities=requestheader_authorities,
            allowed_names=auth.allowed_names,
            username_headers=auth.username_headers,
            group_headers=auth.group_headers,
            extra_headers_prefixes=auth.extra_headers_prefixes,
        )
        if requestheader_authorities
        else None
    )
    authenticator = Authenticator(
        requestheader=requestheader,
        client_authorities=_read_authorities(auth.client_ca_file, "auth.client_ca_file"),
        token_reviewer=kubernetes_auth.KubeTokenReviewer(kube) if kube is not None else None,
        token_cache_ttl_s=auth.token_cache_ttl.total_seconds(),
    )
    return AccessControl(authenticator=authenticator, authorizer=authorizer)


def client_ca_pems(access: AccessControl) -> list[bytes]:
    return [] if access.authenticator is None else access.authenticator.trusted_pems()
