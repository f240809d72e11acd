"""Probes (``/healthz``, ``/livez``, ``/readyz``) and the service's own ``/metrics``."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from autoscaler.web.shared.keys import READINESS, SELF_METRICS

PROBE_PATHS = frozenset({"/healthz", "/livez", "/readyz"})


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.Response:
    readiness = request.app[READINESS]
    ready, reason = readiness.state()
    if "verbose" in request.query:
        return web.Response(text=readiness.verbose(), status=200 if ready else 503)
    if ready:
        return web.Response(text="ok")
    return web.Response(text=f"not ready: {reason}\n", status=503)


async def prometheus_metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[SELF_METRICS].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def add_probe_routes(app: web.Application) -> None:
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/livez", healthz)
    app.router.add_get("/readyz", readyz)


def add_metrics_route(app: web.Application) -> None:
    app.router.add_get("/metrics", prometheus_metrics)
