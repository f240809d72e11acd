"""The secure port's TLS: serving certificate (reloaded when it changes on disk), client CAs and cipher
suites."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from autoscaler.server_settings import AEAD_CIPHER_SUITES, TLSCipherSuite
from autoscaler.web.certificates import generate_ca, issue_certificate

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
    """A self-signed serving certificate in ``state_dir``, made once and reused after."""
    cert_file, key_file = state_dir / "serving.crt", state_dir / "serving.key"
    if not (cert_file.exists() and key_file.exists()):
        authority = generate_ca("gpu-autoscaler self-signed")
        issue_certificate(authority, "gpu-autoscaler", hosts=hosts, server=True).write(cert_file, key_file)
        log.warning(
            "no serving certificate configured: generated a self-signed one at %s "
            "(register the APIService with insecureSkipTLSVerify, or give server.tls.cert_file)",
            cert_file,
        )
    return ServingFiles(cert_file, key_file)


class ServerTLS:
    """An SSLContext whose serving certificate follows the files on disk.

    ``load_cert_chain`` on a live context affects only handshakes that start afterwards, so rotation
    needs no restart and drops no connection in flight.
    """

    def __init__(
        self,
        serving: ServingFiles,
        client_ca_pems: list[bytes],
        *,
        cipher_suites: Sequence[TLSCipherSuite] = AEAD_CIPHER_SUITES,
    ) -> None:
        self.serving = serving
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        # TLS 1.2 only: OpenSSL has no way to narrow TLS 1.3's suites from Python, and all are AEAD.
        self.context.set_ciphers(":".join(OPENSSL_CIPHERS[suite] for suite in cipher_suites))
        self.context.load_cert_chain(serving.cert_file, serving.key_file)
        if client_ca_pems:
            # Ask for a client certificate but let requests without one through to bearer-token auth.
            self.context.verify_mode = ssl.CERT_OPTIONAL
            for pem in client_ca_pems:
                self.context.load_verify_locations(cadata=pem.decode("ascii"))
        self._stamp = self._file_stamp()
        self.reloads = 0

    def _file_stamp(self) -> tuple[float, float, int, int]:
        cert, key = self.serving.cert_file.stat(), self.serving.key_file.stat()
        return (cert.st_mtime, key.st_mtime, cert.st_size, key.st_size)

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
            self.context.load_cert_chain(self.serving.cert_file, self.serving.key_file)
        except (OSError, ssl.SSLError) as error:
            # A rotation writes cert and key one after the other: try again next tick.
            log.warning("serving certificate not reloaded yet (%s); keeping the current one", error)
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
