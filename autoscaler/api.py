"""The external metrics API (``external.metrics.k8s.io/v1beta1``) and the probe/scrape port.

Handlers read the provider's snapshot and nothing else: no I/O and no model work on the request path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from autoscaler import inspection, kube_objects
from autoscaler.auth import AccessDenied, Authenticator, Authorizer, User
from autoscaler.provider import MetricNotFound, MetricsProvider, MetricUnavailable
from autoscaler.selectors import SelectorError, parse_selector
from autoscaler.self_metrics import SelfMetrics

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

PREFIX = f"/apis/{kube_objects.GROUP}/{kube_objects.VERSION}"
PROBE_PATHS = frozenset({"/healthz", "/livez", "/readyz"})


@dataclass
class Readiness:
    """Warm-up state: ready once the first snapshot with values is in place."""

    ready: bool = False
    reason: str = "warming up: no forecast yet"
    checks: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AccessControl:
    """``None`` for either part means that part is switched off (``auth.mode: none``, loopback only)."""

    authenticator: Authenticator | None
    authorizer: Authorizer | None


PROVIDER = web.AppKey("provider", MetricsProvider)
ACCESS = web.AppKey("access", AccessControl)
READINESS = web.AppKey("readiness", Readiness)
SELF_METRICS = web.AppKey("self_metrics", SelfMetrics)
USER = web.RequestKey("user", User)


def status_response(code: int, message: str, **details: str) -> web.Response:
    return web.json_response(kube_objects.status(code, message, **details), status=code)


def _route_label(request: web.Request) -> str:
    # Label by route template, never by raw path: metric names and namespaces are unbounded.
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def errors_and_metrics(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.perf_counter()
    metrics = request.app[SELF_METRICS]
    try:
        response = await handler(request)
    except web.HTTPException as error:
        # aiohttp's own 404/405 become Status objects so clients always get Kubernetes JSON.
        if error.status == 405:
            response = await _method_not_allowed(request)
        elif error.status == 404:
            response = status_response(404, "the server could not find the requested resource")
        else:
            response = status_response(error.status, error.reason)
    except Exception:
        log.exception("internal error serving %s %s", request.method, request.path)
        response = status_response(500, "Internal error occurred: the request could not be served")
    metrics.requests.labels(_route_label(request), str(response.status)).inc()
    metrics.latency.labels(_route_label(request)).observe(time.perf_counter() - started)
    return response


def _peer_certificate(request: web.Request) -> bytes | None:
    ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
    if ssl_object is None:
        return None
    der: bytes | None = ssl_object.getpeercert(binary_form=True)
    return der


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


async def _authorize(request: web.Request, namespace: str, metric: str) -> web.Response | None:
    access = request.app[ACCESS]
    if access.authorizer is None or USER not in request:
        return None
    try:
        await access.authorizer.authorize(request[USER], namespace=namespace, metric=metric)
    except AccessDenied as denied:
        request.app[SELF_METRICS].auth_failures.labels(str(denied.status)).inc()
        return status_response(denied.status, str(denied), name=metric, kind="ExternalMetricValueList")
    return None


async def get_api_group_list(request: web.Request) -> web.Response:
    return web.json_response(kube_objects.api_group_list())


async def get_api_group(request: web.Request) -> web.Response:
    return web.json_response(kube_objects.api_group())


async def get_api_resources(request: web.Request) -> web.Response:
    # Metric names come from the configuration, so this list is full before any forecast exists.
    return web.json_response(kube_objects.api_resource_list(request.app[PROVIDER].list_metrics()))


async def get_version(request: web.Request) -> web.Response:
    return web.json_response(kube_objects.version_info())


async def get_external_metric(request: web.Request) -> web.Response:
    namespace = request.match_info["namespace"]
    metric = request.match_info["metric"]
    denied = await _authorize(request, namespace, metric)
    if denied is not None:
        return denied
    try:
        selector = parse_selector(request.query.get("labelSelector"))
    except SelectorError as error:
        return status_response(400, f"invalid labelSelector: {error}")
    try:
        series = request.app[PROVIDER].get_metric(namespace, metric, selector)
    except MetricNotFound as error:
        return status_response(404, str(error), name=metric, kind="ExternalMetricValueList")
    except MetricUnavailable as error:
        return status_response(503, str(error), name=metric, kind="ExternalMetricValueList")
    return web.json_response(kube_objects.external_metric_value_list(metric, series))


async def get_namespaced_list(request: web.Request) -> web.Response:
    # "Get every metric in a namespace" is not an operation of this API.
    return status_response(404, "the server could not find the requested resource")


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.Response:
    readiness = request.app[READINESS]
    if "verbose" in request.query:
        lines = [f"[{'+' if readiness.ready else '-'}]snapshot: {readiness.reason}"]
        # Check lines inform; readiness itself is "is a forecast served", so a failing signal that still
        # serves its last good values does not take the pod out of the Service.
        lines += [
            f"[{'-' if detail.startswith('failing') else '+'}]{name}: {detail}"
            for name, detail in sorted(readiness.checks.items())
        ]
        lines.append("readyz check passed" if readiness.ready else "readyz check failed")
        return web.Response(text="\n".join(lines) + "\n", status=200 if readiness.ready else 503)
    if readiness.ready:
        return web.Response(text="ok")
    return web.Response(text=f"not ready: {readiness.reason}\n", status=503)


async def prometheus_metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[SELF_METRICS].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def _add_probes(app: web.Application) -> None:
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/livez", healthz)
    app.router.add_get("/readyz", readyz)


def _shared_state(
    app: web.Application, provider: MetricsProvider, readiness: Readiness, self_metrics: SelfMetrics
) -> None:
    app[PROVIDER] = provider
    app[READINESS] = readiness
    app[SELF_METRICS] = self_metrics


def build_api_app(
    *,
    provider: MetricsProvider,
    access: AccessControl,
    readiness: Readiness,
    self_metrics: SelfMetrics,
    client_max_size: int = 64 * 1024,
) -> web.Application:
    """The secure port's routes. Only GET exists; every other verb is a 405 Status."""
    app = web.Application(middlewares=[errors_and_metrics, authenticate], client_max_size=client_max_size)
    _shared_state(app, provider, readiness, self_metrics)
    app[ACCESS] = access
    # Discovery documents are served with and without a trailing slash, as kube-apiserver does
    # (kubernetes clients ask for "/apis/").
    for path, handler in (
        ("/apis", get_api_group_list),
        (f"/apis/{kube_objects.GROUP}", get_api_group),
        (PREFIX, get_api_resources),
    ):
        app.router.add_get(path, handler)
        app.router.add_get(path + "/", handler)
    app.router.add_get(f"{PREFIX}/namespaces/{{namespace}}", get_namespaced_list)
    app.router.add_get(f"{PREFIX}/namespaces/{{namespace}}/{{metric}}", get_external_metric)
    app.router.add_get("/version", get_version)
    for path in ("/apis", f"/apis/{kube_objects.GROUP}", PREFIX, f"{PREFIX}/namespaces/{{namespace}}/{{metric}}"):
        app.router.add_route("*", path, _method_not_allowed)
    _add_probes(app)
    return app


async def _method_not_allowed(request: web.Request) -> web.Response:
    response = status_response(405, f"the server does not allow this method on {request.path}")
    response.headers["Allow"] = "GET"
    return response


def build_ops_app(*, provider: MetricsProvider, readiness: Readiness, self_metrics: SelfMetrics) -> web.Application:
    """The plain-HTTP port: probes and ``/metrics`` (later also the inspection API and UI)."""
    app = web.Application(middlewares=[errors_and_metrics])
    _shared_state(app, provider, readiness, self_metrics)
    _add_probes(app)
    app.router.add_get("/metrics", prometheus_metrics)
    inspection.add_inspection_routes(app)
    return app
