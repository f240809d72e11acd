"""The app factory and the process that serves both ports. Nothing starts on import."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from cryptography import x509
from kubernetes_asyncio.client import ApiClient

from adapters.kube_client import KubeClientSettings, create_api_client
from autoscaler import demo, kube_access, persistence
from autoscaler.api import AccessControl, Readiness, build_api_app, build_ops_app
from autoscaler.auth import AllowAuthenticated, Authenticator, Authorizer, RequestHeaderConfig
from autoscaler.certificates import load_certificates
from autoscaler.pipeline import Pipeline, open_pipeline
from autoscaler.provider import Snapshot, SnapshotProvider, empty_snapshot
from autoscaler.refresher import Refresher, RefreshStats
from autoscaler.self_metrics import SelfMetrics
from autoscaler.settings import Settings
from autoscaler.tls import ServerTLS, ServingFiles, ensure_self_signed
from autoscaler.workers import default_workers, forecast_pool, forecast_pools

log = logging.getLogger(__name__)

REFRESHER = web.AppKey("refresher", Refresher)


def _read_authorities(path: Path | None) -> tuple[x509.Certificate, ...]:
    return tuple(load_certificates(path.read_bytes())) if path is not None else ()


def needs_kubernetes_api(settings: Settings) -> bool:
    auth = settings.auth
    if settings.demo.enabled:
        return False
    return (
        settings.inputs is not None
        or auth.mode == "kubernetes"
        or (auth.mode == "files" and auth.authorization == "kubernetes")
    )


def after_refresh(
    snapshot: Snapshot, readiness: Readiness, refresher: Refresher, pipeline: Pipeline, settings: Settings
) -> None:
    update_readiness(readiness, refresher, pipeline)
    # Off the event loop: with thousands of series the file is a few MB.
    path = settings.state_dir / persistence.FILE_NAME
    asyncio.get_running_loop().run_in_executor(None, _save_quietly, path, snapshot)


def _save_quietly(path: Path, snapshot: Snapshot) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        persistence.save(path, snapshot)
    except OSError as error:  # a read-only or full disk must not stop serving
        log.warning("could not save served values to %s: %s", path, error)


def update_readiness(readiness: Readiness, refresher: Refresher, pipeline: Pipeline) -> None:
    """/readyz?verbose detail: each signal's last success or its error, and the watches' states."""
    checks: dict[str, str] = {}
    stats = refresher.stats
    for source in pipeline.sources:
        error = stats.last_error.get(source.name)
        success = stats.last_success.get(source.name)
        last = f"last success {success:%Y-%m-%dT%H:%M:%SZ}" if success else "no success yet"
        checks[f"signal {source.name}"] = f"failing: {error} ({last})" if error else last
    if pipeline.health is not None:
        checks.update(pipeline.health())
    readiness.checks = checks


async def build_access(settings: Settings, kube: ApiClient | None = None) -> AccessControl:
    """Authentication and authorisation as ``settings.auth`` says; ``kube`` serves the reviews."""
    auth = settings.auth
    if auth.mode == "none":
        log.warning(
            "auth.mode is 'none': every caller is trusted (loopback address %s only)", settings.server.bind_address
        )
        return AccessControl(authenticator=None, authorizer=None)
    if needs_kubernetes_api(settings) and kube is None:
        raise ValueError("this auth configuration needs the Kubernetes API, but no client was given")
    authorizer: Authorizer = (
        kube_access.kubernetes_authorizer(kube, auth)
        if kube is not None and needs_kubernetes_api(settings)
        else AllowAuthenticated()
    )
    if auth.mode == "kubernetes" and kube is not None:
        return AccessControl(await kube_access.kubernetes_authenticator(kube, auth), authorizer)
    requestheader_authorities = _read_authorities(auth.requestheader_client_ca_file)
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
        client_authorities=_read_authorities(auth.client_ca_file),
        token_reviewer=kube_access.KubeTokenReviewer(kube) if kube is not None else None,
        token_cache_ttl_s=auth.token_cache_ttl.total_seconds(),
    )
    return AccessControl(authenticator=authenticator, authorizer=authorizer)


def client_ca_pems(access: AccessControl) -> list[bytes]:
    from cryptography.hazmat.primitives.serialization import Encoding

    authenticator = access.authenticator
    if authenticator is None:
        return []
    authorities = list(authenticator.client_authorities)
    if authenticator.requestheader is not None:
        authorities += list(authenticator.requestheader.authorities)
    return [authority.public_bytes(Encoding.PEM) for authority in authorities]


def create_app(
    settings: Settings,
    *,
    pipeline: Pipeline,
    access: AccessControl,
    provider: SnapshotProvider | None = None,
    readiness: Readiness | None = None,
    self_metrics: SelfMetrics | None = None,
) -> tuple[web.Application, web.Application]:
    """The secure API app and the plain ops app, sharing one provider; the API app owns the refresher."""
    provider = provider or SnapshotProvider(empty_snapshot(pipeline.metrics))
    readiness = readiness or Readiness()
    self_metrics = self_metrics or SelfMetrics()
    self_metrics.watch_snapshots(lambda: provider.snapshot)
    api_app = build_api_app(provider=provider, access=access, readiness=readiness, self_metrics=self_metrics)
    ops_app = build_ops_app(provider=provider, readiness=readiness, self_metrics=self_metrics)

    def refresh_stats() -> RefreshStats | None:
        refresher = api_app.get(REFRESHER)
        return refresher.stats if refresher is not None else None

    self_metrics.watch_refreshes(refresh_stats)

    async def refresher_ctx(app: web.Application) -> AsyncIterator[None]:
        refresher = Refresher(
            provider=provider,
            sources=pipeline.sources,
            plans=pipeline.plans,
            metrics=pipeline.metrics,
            settings=pipeline.refresh,
            pools=forecast_pools(settings.forecast.workers or default_workers()),
            new_pool=lambda: forecast_pool(1),
            windows=pipeline.windows,
            lead_time=pipeline.lead_time,
            caps=pipeline.caps,
            on_success=lambda snapshot: after_refresh(snapshot, readiness, refresher, pipeline, settings),
        )
        app[REFRESHER] = refresher
        saved_values = settings.state_dir / persistence.FILE_NAME
        restored = persistence.load(saved_values, pipeline.metrics)
        if restored is not None:
            refresher.restore(restored)
            readiness.ready = True
            readiness.reason = (
                f"serving values saved at {restored.created_at:%Y-%m-%dT%H:%M:%SZ}; first forecast pending"
            )
            log.info("restored served values saved at %s from %s", restored.created_at, saved_values)

        def mark_ready() -> None:
            if not readiness.ready:
                log.info("first forecast served; ready")
            readiness.ready, readiness.reason = True, "forecasts served"

        task = asyncio.create_task(refresher.run(ready=mark_ready), name="refresher")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for pool in refresher.pools:
            pool.shutdown(wait=False, cancel_futures=True)

    if pipeline.sources:
        api_app.cleanup_ctx.append(refresher_ctx)
    else:
        readiness.ready, readiness.reason = True, "no signals configured: nothing to forecast"
    return api_app, ops_app


def _serving_files(settings: Settings) -> ServingFiles:
    tls = settings.server.tls
    if tls.cert_file is not None and tls.key_file is not None:
        return ServingFiles(tls.cert_file, tls.key_file)
    return ensure_self_signed(settings.state_dir, hosts=("localhost", "127.0.0.1", settings.server.bind_address))


def prepare_demo(settings: Settings) -> Settings:
    """Point TLS and client authentication at the demo CA in the state dir (created on first run)."""
    files = demo.prepare_state_dir(settings.state_dir)
    return settings.model_copy(
        update={
            "server": settings.server.model_copy(
                update={
                    "tls": settings.server.tls.model_copy(
                        update={"cert_file": files.serving_cert, "key_file": files.serving_key}
                    )
                }
            ),
            "auth": settings.auth.model_copy(
                update={"mode": "files", "client_ca_file": files.ca_file, "authorization": "allow-authenticated"}
            ),
        }
    )


@dataclass(frozen=True)
class Listening:
    secure_port: int
    http_port: int | None


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.setblocking(False)
    return sock


@contextlib.asynccontextmanager
async def running(
    settings: Settings, *, api_app: web.Application, ops_app: web.Application, tls: ServerTLS
) -> AsyncIterator[Listening]:
    """Serve both apps on the configured address (port 0 picks a free one) until the block ends."""
    grace = settings.server.shutdown_grace.total_seconds()
    # Closes connections that send no complete request for this long (idle or slowloris).
    idle = settings.server.idle_timeout.total_seconds()
    runners = [
        web.AppRunner(app, handle_signals=False, shutdown_timeout=grace, access_log=None, keepalive_timeout=idle)
        for app in (api_app, ops_app)
    ]
    host = settings.server.bind_address
    secure_socket = _bind(host, settings.server.secure_port)
    http_socket = _bind(host, settings.server.http_port) if settings.server.http_port is not None else None
    try:
        await runners[0].setup()
        await web.SockSite(runners[0], secure_socket, ssl_context=tls.context).start()
        if http_socket is not None:
            await runners[1].setup()
            await web.SockSite(runners[1], http_socket).start()
        async with tls.watching(settings.server.tls.reload_interval.total_seconds()):
            yield Listening(
                secure_port=secure_socket.getsockname()[1],
                http_port=http_socket.getsockname()[1] if http_socket is not None else None,
            )
    finally:
        log.info("shutting down: draining in-flight requests for up to %.0f s", grace)
        for runner in runners:
            await runner.cleanup()
        for sock in (secure_socket, http_socket):
            if sock is not None:
                sock.close()


async def serve(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    """Run both ports until SIGTERM/SIGINT (or ``stop``), then drain in-flight requests."""
    if settings.demo.enabled:
        settings = prepare_demo(settings)
    async with contextlib.AsyncExitStack() as stack:
        kube = await stack.enter_async_context(kubernetes_client(settings)) if needs_kubernetes_api(settings) else None
        pipeline = await stack.enter_async_context(open_pipeline(settings, kube))
        access = await build_access(settings, kube)
        tls = ServerTLS(_serving_files(settings), client_ca_pems(access))
        api_app, ops_app = create_app(settings, pipeline=pipeline, access=access)
        await _serve_until_stopped(settings, api_app, ops_app, tls, stop)


@contextlib.asynccontextmanager
async def kubernetes_client(settings: Settings) -> AsyncIterator[ApiClient]:
    kube_settings = settings.kubernetes
    client = await create_api_client(
        KubeClientSettings(
            kubeconfig_path=kube_settings.kubeconfig,
            request_timeout_s=kube_settings.request_timeout.total_seconds(),
        )
    )
    try:
        yield client
    finally:
        await client.close()


async def _serve_until_stopped(
    settings: Settings, api_app: web.Application, ops_app: web.Application, tls: ServerTLS, stop: asyncio.Event | None
) -> None:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    async with running(settings, api_app=api_app, ops_app=ops_app, tls=tls) as listening:
        settle_heap()
        if settings.demo.enabled:
            files = demo.demo_files(settings.state_dir)
            demo.write_kubeconfig(files, f"https://{_url_host(settings.server.bind_address)}:{listening.secure_port}")
        _announce(settings, listening)
        await stop.wait()


def settle_heap() -> None:
    """Put what start-up allocated out of the garbage collector's reach.

    The modules, settings and apps loaded by now live as long as the process, yet every full
    collection walks them all: with pandas, scikit-learn and aiohttp imported that took 25-100 ms
    per collection on a 2-core machine, stalling every request in flight. ``gc.freeze`` moves them
    to a permanent generation; objects made later are collected as usual.
    """
    gc.collect()
    gc.freeze()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _announce(settings: Settings, listening: Listening) -> None:
    shown = _url_host(settings.server.bind_address)
    log.info("external metrics API on https://%s:%d", shown, listening.secure_port)
    if listening.http_port:
        log.info("probes and /metrics on http://%s:%d", shown, listening.http_port)
    if settings.demo.enabled:
        kubeconfig = settings.state_dir / "kubeconfig"
        log.info(
            "demo running. In another shell try:\n  kubectl --kubeconfig %s get --raw "
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/gpu_demand_forecast",
            kubeconfig,
        )
