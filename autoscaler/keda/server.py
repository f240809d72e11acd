"""The gRPC port (``server.grpc_port``): KEDA's external scaler over TLS, mutual TLS when
``server.grpc_client_ca_file`` is set, with the secure port's serving certificate.

The certificate files are followed as the secure port follows them: gRPC asks for the current
configuration at every handshake, and a changed, valid pair (or CA bundle) is served from the next
handshake on; a pair that does not parse, match or is not valid now is not loaded (the old one stays).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import grpc

from autoscaler.config.server_settings import ServerSettings
from autoscaler.keda.core_log import core_log
from autoscaler.keda.externalscaler_pb2_grpc import add_ExternalScalerServicer_to_server
from autoscaler.keda.interceptor import MAX_REQUEST_BYTES, RequestMetrics
from autoscaler.keda.scaler import RECHECK_INTERVAL_S, ExternalScaler
from autoscaler.serving.provider import SnapshotProvider
from autoscaler.web.security.auth import Authorizer
from autoscaler.web.security.certificates import CertificateFileError, check_pair, read_certificates
from autoscaler.web.security.tls import ServingFiles
from autoscaler.web.shared.self_metrics import SelfMetrics

log = logging.getLogger(__name__)

CLIENT_CA_SETTING = "server.grpc_client_ca_file"


@dataclass(frozen=True)
class GrpcListening:
    port: int
    scaler: ExternalScaler


class CertificateFollower:
    """gRPC's certificate configuration fetcher: a new configuration when the files changed and are good."""

    def __init__(self, serving: ServingFiles, client_ca: Path | None) -> None:
        self._serving = serving
        self._client_ca = client_ca
        self._stamp = self._file_stamp()
        self.initial = self._configuration()  # at start a bad file raises, naming its setting
        self.reloads = 0

    def _paths(self) -> tuple[Path, ...]:
        paths = (self._serving.cert_file, self._serving.key_file)
        return (*paths, self._client_ca) if self._client_ca is not None else paths

    def _file_stamp(self) -> tuple[tuple[float, int], ...]:
        return tuple((stat.st_mtime, stat.st_size) for stat in (path.stat() for path in self._paths()))

    def _configuration(self) -> grpc.ServerCertificateConfiguration:
        check_pair(self._serving.cert_file, self._serving.key_file)
        client_ca = None
        if self._client_ca is not None:
            try:
                read_certificates(self._client_ca)
            except CertificateFileError as error:
                raise error.for_setting(CLIENT_CA_SETTING) from None
            client_ca = self._client_ca.read_bytes()
        pair = (self._serving.key_file.read_bytes(), self._serving.cert_file.read_bytes())
        return grpc.ssl_server_certificate_configuration([pair], root_certificates=client_ca)

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        """Called by gRPC before each handshake: ``None`` keeps the current configuration."""
        try:
            stamp = self._file_stamp()
            if stamp == self._stamp:
                return None
            configuration = self._configuration()
        except OSError as fault:  # CertificateFileError too: a rotation half written, try next handshake
            log.warning("gRPC port: certificate files not reloaded yet (%s); keeping the current ones", fault)
            return None
        self._stamp = stamp
        self.reloads += 1
        log.info("gRPC port: reloaded its certificate files")
        return configuration


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@contextlib.asynccontextmanager
async def serving_grpc(
    settings: ServerSettings,
    *,
    provider: SnapshotProvider,
    self_metrics: SelfMetrics,
    serving: ServingFiles,
    recheck_interval_s: float = RECHECK_INTERVAL_S,
    authorizer: Authorizer | None = None,
) -> AsyncIterator[GrpcListening]:
    """Serve the external scaler on ``settings.grpc_port`` (0: any free port) until the block ends.

    At the end the scaler's streams end first (their callers reconnect), then calls in flight get
    ``shutdown_grace`` to finish.
    """
    assert settings.grpc_port is not None  # noqa: S101 - the caller checks the port is switched on
    follower = CertificateFollower(serving, settings.grpc_client_ca_file)
    # The stubs type the fetcher's result as never None, but gRPC documents None as "keep the current".
    fetch = cast(Callable[[], grpc.ServerCertificateConfiguration], follower)
    credentials = grpc.dynamic_ssl_server_credentials(
        follower.initial, fetch, require_client_authentication=settings.grpc_client_ca_file is not None
    )
    # SO_REUSEPORT (gRPC's default) would let a second server share a port in use without an error.
    mutual = settings.grpc_client_ca_file is not None
    server = grpc.aio.server(
        interceptors=[RequestMetrics(self_metrics, require_user=mutual)],
        options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", MAX_REQUEST_BYTES)],
    )
    scaler = ExternalScaler(provider, recheck_interval_s=recheck_interval_s, authorizer=authorizer)
    add_ExternalScalerServicer_to_server(scaler, server)
    self_metrics.grpc_trigger_cache_bytes.set_function(lambda: scaler.cached_triggers[1])
    address = _address(settings.bind_address, settings.grpc_port)
    try:
        port = server.add_secure_port(address, credentials)
    except RuntimeError as error:  # gRPC's way of saying the address is in use or cannot be bound
        raise OSError(f"server.grpc_port: cannot listen on {address} ({error})") from None
    await server.start()
    stop_counting = core_log.on_handshake_failure(self_metrics.grpc_handshake_failures.inc)
    try:
        yield GrpcListening(port, scaler)
    finally:
        stop_counting()
        scaler.close()
        await server.stop(settings.shutdown_grace.total_seconds())
