"""The process that serves both ports: TLS, sockets, signals, draining. Nothing starts on import."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import signal
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta

from aiohttp import web
from kubernetes_asyncio.client import ApiClient

from adapters.kubernetes.client import KubeClientSettings, create_api_client
from adapters.kubernetes.leases import own_identity
from autoscaler import __version__
from autoscaler.app.access import build_access, client_ca_pems, needs_kubernetes_api
from autoscaler.app.allocator import limit_malloc_arenas
from autoscaler.app.api_loop import ApiLoopRunner, LoopThread, on_own_loop, reviews_on, start_app, stop_app
from autoscaler.app.factory import buffer_actuator, create_app
from autoscaler.checks.preflight import PreflightFailed, run_checks
from autoscaler.config.server_settings import DEMO_GRPC_PORT
from autoscaler.config.settings import Settings
from autoscaler.keda.server import GrpcListening, serving_grpc
from autoscaler.refresh.kube_inputs import watch_settings
from autoscaler.refresh.pipeline import open_pipeline
from autoscaler.simulation.replay import replay_ledgers
from autoscaler.state_files import remove_stale_temporaries
from autoscaler.web.security import kubernetes_auth
from autoscaler.web.security.auth import AccessControl
from autoscaler.web.security.certificates import CertificateFileError
from autoscaler.web.security.tls import ServerTLS, ServingFiles, ensure_self_signed
from autoscaler.web.security.tls_accept import TLSAcceptSite
from autoscaler.web.shared import demo_pki
from autoscaler.web.shared.http_server import ParserLimits, StatusAppRunner
from autoscaler.web.shared.keys import ACCESS, HTTP_AUTH, PROVIDER, READINESS, SELF_METRICS
from autoscaler.web.shared.self_metrics import SelfMetrics

log = logging.getLogger(__name__)
GRPC_THREAD = "keda-external-scaler"
# The secure port's start on its own loop (set-up and listen) takes milliseconds; this only ends a hang.
START_TIMEOUT_S = 30.0


def _serving_files(settings: Settings) -> ServingFiles:
    tls = settings.server.tls
    if tls.cert_file is not None and tls.key_file is not None:
        return ServingFiles(tls.cert_file, tls.key_file)
    return ensure_self_signed(settings.state_dir, hosts=("localhost", "127.0.0.1", settings.server.bind_address))


def server_tls(settings: Settings, access: AccessControl) -> ServerTLS:
    """The secure port's TLS; a serving file that cannot be used raises, naming its setting and fault."""
    files = _serving_files(settings)
    try:
        return ServerTLS(files, client_ca_pems(access), cipher_suites=settings.server.tls.cipher_suites)
    except CertificateFileError as error:
        tls = settings.server.tls
        setting = {tls.cert_file: "server.tls.cert_file", tls.key_file: "server.tls.key_file"}.get(error.path)
        raise (error.for_setting(setting) if setting else error) from None


def prepare_demo(settings: Settings) -> Settings:
    """Point TLS and client authentication at the demo CA in the state dir (checked, made if needed).

    The demo stops at once on SIGTERM unless ``server.shutdown_delay`` is set: nothing balances load to it.
    """
    files = demo_pki.prepare_state_dir(settings.state_dir)
    server_update: dict[str, object] = {
        "tls": settings.server.tls.model_copy(update={"cert_file": files.serving_cert, "key_file": files.serving_key})
    }
    # KEDA's external scaler next to kubectl: the demo CA's serving certificate, the kubeconfig's client one.
    if "grpc_port" not in settings.server.model_fields_set:
        server_update["grpc_port"] = DEMO_GRPC_PORT
    if settings.server.grpc_client_ca_file is None:
        server_update["grpc_client_ca_file"] = files.ca_file
    if "shutdown_delay" not in settings.server.model_fields_set:
        server_update["shutdown_delay"] = timedelta(0)
    return settings.model_copy(
        update={
            "server": settings.server.model_copy(update=server_update),
            "auth": settings.auth.model_copy(
                update={"mode": "files", "client_ca_file": files.ca_file, "authorization": "allow-authenticated"}
            ),
        }
    )


def _nothing_to_end() -> None:
    return None


@dataclass(frozen=True)
class Listening:
    secure_port: int
    http_port: int | None
    grpc_port: int | None = None
    # Ends KEDA's open gRPC streams with OK (their callers reconnect, to a replica that stays).
    end_streams: Callable[[], None] = _nothing_to_end


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
    """Serve both apps, and KEDA's gRPC scaler if ``server.grpc_port`` is set, on the configured
    address (port 0 picks a free one) until the block ends.

    /readyz fails while the serving certificate is not valid or a handshake check failed.
    """
    server = settings.server
    grace = server.shutdown_grace.total_seconds()
    # Closes connections that send no complete request (or handshake) for this long: idle or slowloris.
    idle = server.idle_timeout.total_seconds()
    limits = ParserLimits(server.max_request_line_bytes, server.max_header_field_bytes, server.max_headers)
    runner_kwargs = {"shutdown_timeout": grace, "access_log": None, "keepalive_timeout": idle}
    # The external metrics API runs on a loop of its own (see api_loop); the ops port on this one.
    api_loop = LoopThread("external-metrics-api")
    api_runner = ApiLoopRunner(api_app, limits=limits, **runner_kwargs)
    ops_runner = StatusAppRunner(ops_app, limits=limits, **runner_kwargs)
    api_app[ACCESS] = reviews_on(api_app[ACCESS], asyncio.get_running_loop())
    api_app[READINESS].gates["tls"] = tls.problem
    host = server.bind_address
    secure_socket = _bind(host, server.secure_port)
    http_socket = _bind(host, server.http_port) if server.http_port is not None else None
    stack = contextlib.AsyncExitStack()
    app_started = False
    try:
        grpc = await _start_grpc(stack, settings, api_app, tls)
        api_loop.start()
        app_started = True
        await start_app(api_app)  # the refresher and the writer: on this loop
        # Blocking this loop for the few ms the start takes: nothing here (the refresher's first
        # cycle) runs between the app's start and the port's, as when both ran on this loop.
        api_loop.wait_for(
            _start_secure_site(api_runner, secure_socket, tls, idle, api_app[SELF_METRICS]),
            timeout_s=START_TIMEOUT_S,
        )
        if http_socket is not None:
            await ops_runner.setup()
            await web.SockSite(ops_runner, http_socket).start()
        async with tls.watching(settings.server.tls.reload_interval.total_seconds()):
            yield Listening(
                secure_port=secure_socket.getsockname()[1],
                http_port=http_socket.getsockname()[1] if http_socket is not None else None,
                grpc_port=grpc.port if grpc is not None else None,
                end_streams=grpc.scaler.close if grpc is not None else _nothing_to_end,
            )
    finally:
        log.info("shutting down: draining in-flight requests for up to %.0f s", grace)
        api_cleanup = api_loop.run(api_runner.cleanup()) if api_loop.running else api_runner.cleanup()
        await asyncio.gather(stack.aclose(), api_cleanup, ops_runner.cleanup())
        if app_started:
            await stop_app(api_app)
        await api_loop.stop()
        for sock in (secure_socket, http_socket):
            if sock is not None:
                sock.close()


async def _start_secure_site(
    runner: web.BaseRunner, sock: socket.socket, tls: ServerTLS, idle_s: float, metrics: SelfMetrics
) -> None:
    """Set the runner up and start its TLS site, on the loop that will serve them; refused handshakes
    and connections aborted with answers unread count in ``metrics``."""
    await runner.setup()
    site = TLSAcceptSite(
        runner,
        sock,
        context=lambda: tls.context,
        handshake_timeout_s=idle_s,
        on_refused=metrics.auth_failures.labels("tls").inc,
        on_stalled=metrics.connections_aborted.inc,
    )
    await site.start()


async def _start_grpc(
    stack: contextlib.AsyncExitStack, settings: Settings, api_app: web.Application, tls: ServerTLS
) -> GrpcListening | None:
    """Start KEDA's external scaler on ``stack``, on a thread and loop of its own, if its port is switched
    on; ``None`` if it is not. On the main loop 200 ops clients held its answers for seconds
    (docs/benchmarks/api-load.md); like the API it reads only the provider's snapshot, and its
    SubjectAccessReviews (``reviews_on``) run on the main loop. At the end its streams end and its
    calls drain on its loop, then the thread stops."""
    if settings.server.grpc_port is None:
        return None
    scaler = serving_grpc(
        settings.server,
        provider=api_app[PROVIDER],
        self_metrics=api_app[SELF_METRICS],
        serving=tls.serving,
        authorizer=api_app[ACCESS].grpc_authorizer,
    )
    return await stack.enter_async_context(on_own_loop(GRPC_THREAD, scaler))


async def serve(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    """Run both ports until SIGTERM/SIGINT (or ``stop``), then drain in-flight requests."""
    limit_malloc_arenas()  # before the threads that would each make one
    if settings.demo.enabled:
        settings = prepare_demo(settings)
    remove_stale_temporaries(settings.state_dir)  # a write a kill interrupted; before anything writes again
    async with contextlib.AsyncExitStack() as stack:
        identity = own_identity()  # one name per process: its Leases and its API client's User-Agent
        kube = (
            await stack.enter_async_context(kubernetes_client(settings, identity))
            if needs_kubernetes_api(settings)
            else None
        )
        if kube is not None and settings.preflight.on_start:
            await _preflight(kube, settings)
        pipeline = await stack.enter_async_context(open_pipeline(settings, kube, replay_ledgers))
        access = await build_access(settings, kube)
        if settings.server.http_auth == "delegated" and kube is None:  # the demo: no cluster to ask
            log.warning("server.http_auth delegated is off in the demo: no cluster to ask")
        if settings.server.grpc_authorization == "subjectaccessreview":
            if kube is None:
                log.warning("server.grpc_authorization subjectaccessreview is off in the demo: no cluster to ask")
            else:
                access = dataclasses.replace(access, grpc_authorizer=kubernetes_auth.grpc_authorizer(kube))
        tls = server_tls(settings, access)
        actuator = buffer_actuator(settings, kube, identity)
        api_app, ops_app = create_app(
            settings, pipeline=pipeline, access=access, actuator=actuator, kube=kube, identity=identity
        )
        guard_plain_port(settings, ops_app, kube)
        if kube is not None and settings.auth.mode == "kubernetes" and access.authenticator is not None:
            follower = await stack.enter_async_context(
                kubernetes_auth.following_authentication(
                    kube,
                    settings.auth,
                    access.authenticator,
                    tls.set_client_authorities,
                    watch_settings(settings.kubernetes),
                )
            )
            api_app[READINESS].notes["authentication"] = follower.note
        await _serve_until_stopped(settings, api_app, ops_app, tls, stop)


def guard_plain_port(settings: Settings, ops_app: web.Application, kube: ApiClient | None) -> None:
    """``server.http_auth: delegated``: the plain port asks Kubernetes about each bearer token (not in the demo)."""
    if settings.server.http_auth == "delegated" and kube is not None:
        ops_app[HTTP_AUTH] = kubernetes_auth.delegated_http_auth(kube, settings.auth)


async def _preflight(kube: ApiClient, settings: Settings) -> None:
    """The checks of ``gpu-autoscaler preflight``, logged; raises ``PreflightFailed`` when a check that
    blocks the start found a problem (the others are logged as warnings: the service starts degraded)."""
    checks = await run_checks(kube, settings)
    for check in checks:
        if check.ok:
            log.info("preflight %s", check.line())
        else:
            (log.error if check.blocks_start else log.warning)("preflight %s", check.line())
    if any(check.blocks_start and not check.ok for check in checks):
        raise PreflightFailed(checks, blocking_only=True)


def user_agent(identity: str) -> str:
    """``gpu-autoscaler/<version> (<Lease identity>)``, as kubectl sends ``kubectl/v1.31.0 (linux/amd64)``:
    the API server's audit log, and a test's fake API, tell the replicas (and their restarts) apart."""
    return f"gpu-autoscaler/{__version__} ({identity})"


@contextlib.asynccontextmanager
async def kubernetes_client(settings: Settings, identity: str | None = None) -> AsyncIterator[ApiClient]:
    """The service's API client; ``identity`` (None: a new one) is the replica its User-Agent names."""
    kube_settings = settings.kubernetes
    client = await create_api_client(
        KubeClientSettings(
            kubeconfig_path=kube_settings.kubeconfig,
            request_timeout_s=kube_settings.request_timeout.total_seconds(),
            user_agent=user_agent(identity or own_identity()),
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
    hurry = asyncio.Event()  # a second signal ends the shutdown delay early

    def on_signal() -> None:
        if stop.is_set():
            hurry.set()
        stop.set()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, on_signal)
    api_app[READINESS].gates["shutdown"] = lambda: "the server is shutting down" if stop.is_set() else None
    async with running(settings, api_app=api_app, ops_app=ops_app, tls=tls) as listening:
        settle_heap()
        if settings.demo.enabled:
            await _check_demo_kubeconfig(settings, listening, tls)
        _announce(settings, listening)
        await stop.wait()
        # Streams end now, not after the delay: their callers reconnect while this replica still answers
        # unary calls, and KEDA moves to a replica that stays sooner.
        listening.end_streams()
        delay = settings.server.shutdown_delay.total_seconds()
        if delay > 0 and not hurry.is_set():
            log.info("shutting down: /readyz fails now; serving %.1f s more (server.shutdown_delay)", delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(hurry.wait(), delay)


async def _check_demo_kubeconfig(settings: Settings, listening: Listening, tls: ServerTLS) -> None:
    """Write the kubeconfig, then use it once as kubectl will; if that fails, the demo never says ready."""
    files = demo_pki.demo_files(settings.state_dir)
    url = f"https://{_url_host(settings.server.bind_address)}:{listening.secure_port}"
    demo_pki.write_kubeconfig(files, url)
    problem = await demo_pki.kubeconfig_problem(files, url)
    if problem is not None:
        problem = f"the demo kubeconfig {files.kubeconfig} cannot reach {url}: {problem}"
        tls.handshake_problem = problem
        log.error("%s; /readyz fails until the state directory is repaired and the demo restarts", problem)


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
    if listening.grpc_port:
        mutual = " (mutual TLS)" if settings.server.grpc_client_ca_file is not None else ""
        log.info("KEDA external scaler (gRPC over TLS%s) on %s:%d", mutual, shown, listening.grpc_port)
    if listening.http_port:
        delegated = settings.server.http_auth == "delegated" and not settings.demo.enabled
        guard = "bearer tokens reviewed by Kubernetes" if delegated else "no authentication: server.http_auth none"
        log.info("probes and /metrics on http://%s:%d (%s; probes open)", shown, listening.http_port, guard)
    if settings.demo.enabled:
        kubeconfig = settings.state_dir / "kubeconfig"
        log.info(
            "demo running. In another shell try:\n  kubectl --kubeconfig %s get --raw "
            "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/gpu_demand_forecast",
            kubeconfig,
        )
