"""The external metrics API (``external.metrics.k8s.io/v1beta1``) on the secure port.

Handlers read the provider (the narrow ``MetricsProvider`` interface) and nothing else: no I/O and
no model work on the request path.
"""

from __future__ import annotations

import re

from aiohttp import web

from autoscaler.echoes import echo
from autoscaler.selectors import SelectorCache, SelectorError
from autoscaler.serving.provider import MetricNotFound, MetricUnavailable, MetricWarmingUp
from autoscaler.web.security.auth import AccessDenied
from autoscaler.web.shared import responses
from autoscaler.web.shared.keys import ACCESS, METRICS_PROVIDER, SELECTORS, SELF_METRICS, USER
from autoscaler.web.shared.middleware import method_not_allowed
from autoscaler.web.shared.responses import status_response, warming_up_response

PREFIX = f"/apis/{responses.GROUP}/{responses.VERSION}"
# Namespace names are DNS-1123 labels; kube-apiserver's message for one that is not.
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# A namespace refused is quoted this far (kube-apiserver quotes it whole; 80 bytes show what it was).
SHOWN_NAME_BYTES = 80
_NAMESPACE_RULE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def namespace_fault(namespace: str) -> str | None:
    """kube-apiserver's message for a namespace name that is not valid, else ``None`` (gRPC shares it)."""
    if len(namespace) <= 63 and _NAMESPACE.fullmatch(namespace):
        return None
    rule = "must be no more than 63 characters" if len(namespace) > 63 else _NAMESPACE_RULE
    return f'invalid namespace "{echo(namespace, SHOWN_NAME_BYTES)}": {rule}'


def invalid_namespace(request: web.Request) -> web.Response | None:
    """A 400 Status when the path's namespace is not a valid namespace name, else ``None``."""
    fault = namespace_fault(request.match_info["namespace"])
    return None if fault is None else status_response(400, fault)


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
    return web.json_response(responses.api_group_list())


async def get_api_group(request: web.Request) -> web.Response:
    return web.json_response(responses.api_group())


async def get_api_resources(request: web.Request) -> web.Response:
    # Metric names come from the configuration, so this list is full before any forecast exists.
    return web.json_response(responses.api_resource_list(request.app[METRICS_PROVIDER].list_metrics()))


async def get_version(request: web.Request) -> web.Response:
    return web.json_response(responses.version_info())


async def get_external_metric(request: web.Request) -> web.Response:
    namespace = request.match_info["namespace"]
    metric = request.match_info["metric"]
    invalid = invalid_namespace(request)
    if invalid is not None:
        return invalid
    denied = await _authorize(request, namespace, metric)
    if denied is not None:
        return denied
    try:
        selector = request.app[SELECTORS].parse(request.query.get("labelSelector"))
    except SelectorError as error:
        return status_response(400, f"invalid labelSelector: {error}")
    try:
        series = request.app[METRICS_PROVIDER].get_metric(namespace, metric, selector)
    except MetricNotFound as error:
        return status_response(404, str(error), name=metric, kind="ExternalMetricValueList")
    except MetricWarmingUp as error:
        return warming_up_response(metric, str(error), error.retry_after_s)
    except MetricUnavailable as error:
        return status_response(503, str(error), name=metric, kind="ExternalMetricValueList")
    return responses.json_body_response(responses.external_metric_value_list_json(metric, series))


async def get_namespaced_list(request: web.Request) -> web.Response:
    # "Get every metric in a namespace" is not an operation of this API.
    return invalid_namespace(request) or status_response(404, "the server could not find the requested resource")


def add_external_metrics_routes(app: web.Application) -> None:
    """Discovery and metric routes. Only GET exists; every other verb is a 405 Status."""
    app[SELECTORS] = SelectorCache()
    # Discovery documents are served with and without a trailing slash, as kube-apiserver does
    # (kubernetes clients ask for "/apis/").
    for path, handler in (
        ("/apis", get_api_group_list),
        (f"/apis/{responses.GROUP}", get_api_group),
        (PREFIX, get_api_resources),
    ):
        app.router.add_get(path, handler)
        app.router.add_get(path + "/", handler)
    app.router.add_get(f"{PREFIX}/namespaces/{{namespace}}", get_namespaced_list)
    app.router.add_get(f"{PREFIX}/namespaces/{{namespace}}/{{metric}}", get_external_metric)
    app.router.add_get("/version", get_version)
    for path in ("/apis", f"/apis/{responses.GROUP}", PREFIX, f"{PREFIX}/namespaces/{{namespace}}/{{metric}}"):
        app.router.add_route("*", path, method_not_allowed)
