"""The secure port's TLS: serving certificate (checked, reloaded when it changes on disk), client CAs
and cipher suites."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cryptography import x509

from autoscaler.config.server_settings import AEAD_CIPHER_SUITES, TLSCipherSuite
from autoscaler.web.security.certificates import (
    CertificateFileError,
    check_pair,
    generate_ca,
    issue_certificate,
    validity_fault,
)

log = logging.getLogger(__name__)

# IANA names (as kube-apiserver's --tls-cipher-suites takes them) to OpenSSL's.
OPENSSL_CIPHERS: dict[TLSCipherSuite, str] = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}


@dataclass(frozen=True)
class ServingFiles:
    cert_file: Path
    key_file: Path


def ensure_self_signed(state_dir: Path, hosts: tuple[str, ...]) -> ServingFiles:
    """A self-signed serving certificate in ``state_dir``, made once and reused while it is usable."""
    files = ServingFiles(state_dir / "serving.crt", state_dir / "serving.key")
    try:
        check_pair(files.cert_file, files.key_file)
        return files
    except CertificateFileError as fault:
        # The service made these files, so it makes them again rather than refuse to start.
        if files.cert_file.exists() or files.key_file.exists():
            log.warning("self-signed serving certificate: %s; generating a new one", fault)
    authority = generate_ca("gpu-autoscaler self-signed")
    issue_certificate(authority, "gpu-autoscaler", hosts=hosts, server=True).write(files.cert_file, files.key_file)
    log.warning(
        "no serving certificate configured: generated a self-signed one at %s "
        "(register the APIService with insecureSkipTLSVerify, or give server.tls.cert_file)",
        files.cert_file,
    )
    return files


class ServerTLS:
    """An SSLContext whose serving certificate follows the files on disk.

    Every change builds a whole new context and swaps it in with one assignment: the secure port
    handshakes on another thread, and ``load_cert_chain`` into a live context releases the GIL
    between the certificate and its key, so a handshake there could find a certificate without a
    key (NO_SHARED_CIPHER). Connections in flight keep the context they started with. Files that do
    not parse, do not match, or are not valid now raise CertificateFileError at start and are not
    loaded on rotation.
    """

    def __init__(
        self,
        serving: ServingFiles,
        client_ca_pems: list[bytes],
        *,
        cipher_suites: Sequence[TLSCipherSuite] = AEAD_CIPHER_SUITES,
    ) -> None:
        self.serving = serving
        self._cipher_suites = tuple(cipher_suites)
        self.client_ca_pems = list(client_ca_pems)
        self.context, self.certificate = self._loaded_context(self.client_ca_pems)
        self._stamp = self._file_stamp()
        self.reloads = 0
        self.authority_updates = 0
        # Set when a handshake check of the running service failed (the demo checks its kubeconfig).
        self.handshake_problem: str | None = None

    def _new_context(self, client_ca_pems: list[bytes]) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # TLS 1.2 only: OpenSSL has no way to narrow TLS 1.3's suites from Python, and all are AEAD.
        context.set_ciphers(":".join(OPENSSL_CIPHERS[suite] for suite in self._cipher_suites))
        if client_ca_pems:
            # Ask for a client certificate but let requests without one through to bearer-token auth.
            context.verify_mode = ssl.CERT_OPTIONAL
            for pem in client_ca_pems:
                context.load_verify_locations(cadata=pem.decode("ascii"))
        return context

    def set_client_authorities(self, client_ca_pems: list[bytes]) -> None:
        """Trust these client CAs from the next handshake on (the cluster rotated its CA).

        A context only ever adds trusted CAs, so a new one replaces it: the old CA's certificates are
        refused in the handshake at once. Connections already open keep their TLS session; the
        authenticator refuses their requests when it no longer trusts the issuer.
        """
        if client_ca_pems == self.client_ca_pems:
            return
        try:
            context, certificate = self._loaded_context(client_ca_pems)
        except OSError as error:  # CertificateFileError too: keep serving with the old CAs; the next change retries
            log.error("client CAs not updated: the serving certificate cannot be loaded (%s)", error)
            return
        self.context, self.certificate, self.client_ca_pems = context, certificate, list(client_ca_pems)
        self.authority_updates += 1
        log.info("TLS client CAs updated (%d certificates)", len(client_ca_pems))

    def _loaded_context(self, client_ca_pems: list[bytes]) -> tuple[ssl.SSLContext, x509.Certificate]:
        """A new context serving the files on disk, with these client CAs; nothing shared is touched."""
        certificate, _ = check_pair(self.serving.cert_file, self.serving.key_file)
        context = self._new_context(client_ca_pems)
        try:
            context.load_cert_chain(self.serving.cert_file, self.serving.key_file)
        except ssl.SSLError as error:  # a chain OpenSSL refuses although cryptography reads it
            raise CertificateFileError(self.serving.cert_file, f"refused by OpenSSL ({error.reason})") from None
        return context, certificate

    def _file_stamp(self) -> tuple[float, float, int, int]:
        cert, key = self.serving.cert_file.stat(), self.serving.key_file.stat()
        return (cert.st_mtime, key.st_mtime, cert.st_size, key.st_size)

    def problem(self, now: datetime | None = None) -> str | None:
        """Why clients cannot complete a handshake now (for /readyz), or ``None``."""
        fault = validity_fault(self.certificate, now)
        if fault is not None:
            return f"serving certificate {self.serving.cert_file} {fault}"
        return self.handshake_problem

    def reload_if_changed(self) -> bool:
        """Reload the serving certificate if its files changed; keep the old one if the new is bad."""
        try:
            stamp = self._file_stamp()
        except OSError as error:
            log.error("serving certificate files unreadable, keeping the current one: %s", error)
            return False
        if stamp == self._stamp:
            return False
        try:
            self.context, self.certificate = self._loaded_context(self.client_ca_pems)
        except CertificateFileError as fault:
            # A rotation writes cert and key one after the other: try again next tick.
            log.warning("serving certificate not reloaded yet (%s); keeping the current one", fault)
            return False
        self._stamp = stamp
        self.reloads += 1
        log.info("reloaded serving certificate from %s", self.serving.cert_file)
        return True

    @contextlib.asynccontextmanager
    async def watching(self, interval_s: float) -> AsyncIterator[None]:
        async def watch() -> None:
            while True:
                await asyncio.sleep(interval_s)
                self.reload_if_changed()

        task = asyncio.create_task(watch(), name="tls-reload")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
