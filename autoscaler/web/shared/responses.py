"""The Kubernetes JSON documents the API server answers with (discovery, Status, metric lists)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from aiohttp import web

from autoscaler import __version__
from autoscaler.echoes import echo
from autoscaler.serving.provider import MetricInfo, ServedSeries

GROUP = "external.metrics.k8s.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"

# HTTP status -> metav1.StatusReason, as k8s.io/apimachinery names them. apimachinery has no reason
# for 414, 431 and 501; the nearest ones let client-go's IsBadRequest / IsMethodNotSupported say true.
STATUS_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    413: "RequestEntityTooLarge",
    414: "BadRequest",
    429: "TooManyRequests",
    431: "BadRequest",
    500: "InternalError",
    501: "MethodNotAllowed",
    503: "ServiceUnavailable",
    504: "Timeout",
}


# A Status message quotes at most 1 KiB of each input (``autoscaler.echoes``); this bounds the whole, should
# one ever quote several.
MAX_MESSAGE_BYTES = 4096


def status(code: int, message: str, *, name: str | None = None, kind: str | None = None) -> dict[str, Any]:
    """A ``metav1.Status``; ``name`` is the resource asked for, as the caller spelled it (quoted through ``echo``)."""
    document: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": echo(message, MAX_MESSAGE_BYTES),
        "reason": STATUS_REASONS.get(code, "Unknown"),
        "code": code,
    }
    if name is not None or kind is not None:
        details: dict[str, Any] = {"group": GROUP}
        if name is not None:
            details["name"] = echo(name)
        if kind is not None:
            details["kind"] = kind
        document["details"] = details
    return document


def _group_version() -> dict[str, str]:
    return {"groupVersion": GROUP_VERSION, "version": VERSION}


def api_group() -> dict[str, Any]:
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [_group_version()],
        "preferredVersion": _group_version(),
    }


def api_group_list() -> dict[str, Any]:
    group = api_group()
    del group["kind"], group["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}


def api_resource_list(metrics: Iterable[MetricInfo]) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [
            {
                "name": info.name,
                "singularName": "",
                "namespaced": True,
                "kind": "ExternalMetricValueList",
                "verbs": ["get"],
            }
            for info in metrics
        ],
    }


def external_metric_value_list(name: str, series: Sequence[ServedSeries]) -> dict[str, Any]:
    items = [{"metricName": name, **served.item} for served in series]
    return {"kind": "ExternalMetricValueList", "apiVersion": GROUP_VERSION, "metadata": {}, "items": items}


_LIST_OPENING = json.dumps(external_metric_value_list("", ()))[: -len("]}")]


def external_metric_value_list_json(name: str, series: Sequence[ServedSeries]) -> bytes:
    """``json.dumps(external_metric_value_list(name, series))``, encoded, from each series' JSON made once."""
    opening = '{"metricName": ' + json.dumps(name) + ", "
    return (_LIST_OPENING + ", ".join(opening + served.item_json() + "}" for served in series) + "]}").encode()


def json_body_response(body: bytes, status: int = 200) -> web.Response:
    """An ``application/json`` answer of a body encoded already (as ``web.json_response`` answers)."""
    return web.Response(body=body, status=status, content_type="application/json", charset="utf-8")


def version_info() -> dict[str, str]:
    major, minor, *_ = __version__.split(".")
    return {
        "major": major,
        "minor": minor,
        "gitVersion": f"v{__version__}",
        "gitCommit": "",
        "gitTreeState": "",
        "buildDate": "",
        "goVersion": "",
        "compiler": "",
        "platform": "python",
    }


def status_response(code: int, message: str, **details: str) -> web.Response:
    """A ``metav1.Status`` answer with ``code`` as the HTTP status."""
    return web.json_response(status(code, message, **details), status=code)


def warming_up_response(metric: str, message: str, retry_after_s: int) -> web.Response:
    """A 503 ``metav1.Status`` with ``Retry-After``, in the header and in ``details.retryAfterSeconds``
    (where client-go's ``SuggestsClientDelay`` reads it)."""
    document = status(503, message, name=metric, kind="ExternalMetricValueList")
    document["details"]["retryAfterSeconds"] = retry_after_s
    return web.json_response(document, status=503, headers={"Retry-After": str(retry_after_s)})


def invalid_parameter_response(parameter: str, message: str) -> web.Response:
    """A 400 ``metav1.Status`` naming the query parameter at fault as its cause, as kube-apiserver does."""
    document = status(400, message)
    cause = {"reason": "FieldValueInvalid", "message": document["message"], "field": parameter}
    document["details"] = {"causes": [cause]}
    return web.json_response(document, status=400)
