"""What every request passes through: Kubernetes-style errors, request metrics, authentication."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import hdrs, web

from autoscaler.echoes import echo
from autoscaler.web.security.auth import AccessDenied
from autoscaler.web.shared.http_server import StatusRequestHandler, peer_certificate_of
from autoscaler.web.shared.keys import ACCESS, HTTP_AUTH, SELF_METRICS, USER
from autoscaler.web.shared.probes import PROBE_PATHS
from autoscaler.web.shared.responses import status_response

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def route_label(request: web.Request) -> str:
    # Label by route template, never by raw path: metric names and namespaces are unbounded.
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


async def method_not_allowed(request: web.Request) -> web.Response:
    """405 for a method HTTP defines, 501 for one it does not (whichever of aiohttp's parsers let it in)."""
    if request.method in hdrs.METH_ALL:
        response = status_response(405, f"the server does not allow this method on {echo(request.path)}")
    else:
        response = status_response(501, "the request method is not implemented by this server")
    response.headers[hdrs.ALLOW] = hdrs.METH_GET
    return response


@web.middleware
async def errors_and_metrics(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.perf_counter()
    metrics = request.app[SELF_METRICS]
    try:
        response = await handler(request)
    except web.HTTPException as error:
        # aiohttp's own 404/405 become Status objects so clients always get Kubernetes JSON.
        if error.status == 405:
            response = await method_not_allowed(request)
        elif error.status == 404:
            response = status_response(404, "the server could not find the requested resource")
        else:
            response = status_response(error.status, error.reason)
    except Exception:
        log.exception("internal error serving %s %s", request.method, request.path)
        response = status_response(500, "Internal error occurred: the request could not be served")
    metrics.count_request(route_label(request), response.status, time.perf_counter() - started)
    return response


def _peer_certificate(request: web.Request) -> bytes | None:
    protocol = request.protocol
    if isinstance(protocol, StatusRequestHandler):  # the secure port's connections: read once each
        return protocol.peer_certificate()
    return peer_certificate_of(request.transport)


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    access = request.app[ACCESS]
    if request.path in PROBE_PATHS or access.authenticator is None:
        return await handler(request)
    try:
        request[USER] = await access.authenticator.authenticate(_peer_certificate(request), request.headers)
    except AccessDenied as denied:
        request.app[SELF_METRICS].auth_failures.labels(str(denied.status)).inc()
        return status_response(denied.status, str(denied))
    return await handler(request)


@web.middleware
async def authenticate_plain_port(request: web.Request, handler: Handler) -> web.StreamResponse:
    """``server.http_auth: delegated`` on the plain port; the probes stay open (the kubelet asks them)."""
    http_auth = request.app.get(HTTP_AUTH)
    if http_auth is None or request.path in PROBE_PATHS:
        return await handler(request)
    try:
        authorization = request.headers.get(hdrs.AUTHORIZATION, "")
        request[USER] = await http_auth.check(authorization, method=request.method, path=request.path)
    except AccessDenied as denied:
        request.app[SELF_METRICS].auth_failures.labels(str(denied.status)).inc()
        return status_response(denied.status, str(denied))
    return await handler(request)
