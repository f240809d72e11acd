"""Serving certificates: rotation on disk without a restart, and the self-signed fallback."""

from __future__ import annotations

import asyncio
import logging
import ssl

from cryptography import x509

from autoscaler.web.security.certificates import issue_certificate
from autoscaler.web.security.tls import ServerTLS, ensure_self_signed
from tests.eventually import eventually


async def served_certificate(port: int, ca_file) -> x509.Certificate:
    context = ssl.create_default_context(cafile=str(ca_file))
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    await writer.wait_closed()
    return x509.load_der_x509_certificate(der)


async def test_rotated_certificate_is_served_without_restart(api_server, tmp_path):
    pki = api_server.pki
    before = await served_certificate(api_server.listening.secure_port, pki.client_ca)
    rotated = issue_certificate(pki.serving_ca_pair, "gpu-autoscaler-rotated", hosts=("127.0.0.1",), server=True)
    rotated.write(pki.serving_cert, pki.serving_key)

    async def rotated_certificate_served() -> bool:
        served = await served_certificate(api_server.listening.secure_port, pki.client_ca)
        assert served.serial_number != before.serial_number, "still serving the certificate from before"
        assert served.serial_number == rotated.certificate.serial_number, f"serving serial {served.serial_number}"
        return True

    # reload_interval is 100 ms in the fixture; a handshake per check
    await eventually(rotated_certificate_served, message="the rotated certificate to be served", interval=0.05)
    assert api_server.tls.reloads == 1


def test_a_half_written_rotation_keeps_the_current_certificate(pki, tmp_path, caplog):
    import shutil

    from autoscaler.web.security.tls import ServingFiles

    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(pki.serving_cert, cert)
    shutil.copy(pki.serving_key, key)
    tls = ServerTLS(ServingFiles(cert, key), [])
    cert.write_text("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n")
    with caplog.at_level(logging.WARNING):
        assert tls.reload_if_changed() is False
    assert "keeping the current one" in caplog.text
    assert tls.reloads == 0


def handshake_serial(server_context: ssl.SSLContext, ca_file) -> int:
    """The serial of the certificate ``server_context`` presents, by a handshake in memory."""
    client_context = ssl.create_default_context(cafile=str(ca_file))
    client_context.check_hostname = False
    pipes = [ssl.MemoryBIO() for _ in range(4)]
    server = server_context.wrap_bio(pipes[0], pipes[1], server_side=True)
    client = client_context.wrap_bio(pipes[2], pipes[3])
    for _ in range(10):
        done = 0
        for side, outgoing, incoming in ((client, pipes[3], pipes[0]), (server, pipes[1], pipes[2])):
            try:
                side.do_handshake()
                done += 1
            except ssl.SSLWantReadError:
                pass
            incoming.write(outgoing.read())
        if done == 2:
            break
    der = client.getpeercert(binary_form=True)
    assert der is not None, "no handshake"
    return x509.load_der_x509_certificate(der).serial_number


def test_a_reload_swaps_in_a_new_context_and_never_changes_the_one_in_use(pki, tmp_path):
    """The secure port handshakes on another thread: a reload into the live context would race it."""
    import shutil

    from autoscaler.web.security.tls import ServingFiles

    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(pki.serving_cert, cert)
    shutil.copy(pki.serving_key, key)
    tls = ServerTLS(ServingFiles(cert, key), [])
    in_use = tls.context
    before = handshake_serial(in_use, pki.client_ca)
    rotated = issue_certificate(pki.serving_ca_pair, "rotated", hosts=("127.0.0.1",), server=True)
    rotated.write(cert, key)
    assert tls.reload_if_changed() is True
    assert tls.context is not in_use
    assert handshake_serial(tls.context, pki.client_ca) == rotated.certificate.serial_number
    assert handshake_serial(in_use, pki.client_ca) == before, "the context in use was changed under its handshakes"


def test_self_signed_when_no_certificate_is_configured(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        files = ensure_self_signed(tmp_path, hosts=("localhost", "127.0.0.1"))
    assert "generated a self-signed one" in caplog.text
    certificate = x509.load_pem_x509_certificate(files.cert_file.read_bytes())
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert (files.key_file.stat().st_mode & 0o777) == 0o600
    again = ensure_self_signed(tmp_path, hosts=("localhost",))
    assert again.cert_file.read_bytes() == files.cert_file.read_bytes()  # made once, reused after


async def test_rotation_under_load_fails_no_request(api_server):
    """Requests on fresh connections keep succeeding while the files are rotated twice."""
    pki = api_server.pki
    context = api_server.ssl_context(pki.alice)
    request = (
        b"GET /apis/external.metrics.k8s.io/v1beta1/namespaces/default/gpu_headroom HTTP/1.1\r\n"
        b"Host: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    outcomes: list[str] = []
    serials: set[int] = set()
    stop = asyncio.Event()

    async def client() -> None:
        while not stop.is_set() and len(outcomes) < 5000:
            try:
                # A handshake per request, so every request sees whichever certificate is current.
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", api_server.listening.secure_port, ssl=context
                )
                der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
                serials.add(x509.load_der_x509_certificate(der).serial_number)
                writer.write(request)
                answer = await reader.read()
                writer.close()
                outcomes.append(answer.split(b"\r\n", 1)[0].decode())
            except (OSError, ssl.SSLError) as error:
                outcomes.append(type(error).__name__)

    async def more_requests(count: int, when: str) -> None:
        target = len(outcomes) + count
        await eventually(lambda: len(outcomes) >= target, message=f"{count} more requests {when}")

    clients = [asyncio.create_task(client()) for _ in range(4)]
    rotated = []
    for name in ("rotated-1", "rotated-2"):
        await more_requests(20, f"before {name}")  # the rotation lands under load
        pair = issue_certificate(pki.serving_ca_pair, name, hosts=("127.0.0.1",), server=True)
        pair.write(pki.serving_cert, pki.serving_key)
        serial = pair.certificate.serial_number
        rotated.append(serial)
        await eventually(lambda serial=serial: serial in serials, message=f"certificate {name} to be served")
    await more_requests(20, "after the last rotation")
    stop.set()
    await asyncio.gather(*clients)
    failures = [outcome for outcome in outcomes if outcome != "HTTP/1.1 200 OK"]
    assert not failures, failures[:5]
    assert len(outcomes) > 50
    assert api_server.tls.reloads == 2
    assert set(rotated) <= serials  # both new certificates were actually served


def test_every_configurable_cipher_suite_is_an_ecdhe_aead_one_openssl_knows():
    from autoscaler.config.server_settings import AEAD_CIPHER_SUITES
    from autoscaler.web.security.tls import OPENSSL_CIPHERS

    assert set(OPENSSL_CIPHERS) == set(AEAD_CIPHER_SUITES)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for iana, openssl in OPENSSL_CIPHERS.items():
        context.set_ciphers(openssl)  # raises for a name OpenSSL does not know
        (cipher,) = [c for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"]
        assert cipher["aead"] and cipher["kea"] == "kx-ecdhe", iana


def test_a_rotation_to_an_expired_certificate_keeps_the_current_one(pki, tmp_path, caplog):
    import shutil
    from datetime import UTC, datetime, timedelta

    from autoscaler.web.security.tls import ServingFiles

    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(pki.serving_cert, cert)
    shutil.copy(pki.serving_key, key)
    tls = ServerTLS(ServingFiles(cert, key), [])
    long_ago = datetime.now(UTC) - timedelta(days=30)
    issue_certificate(pki.serving_ca_pair, "old", server=True, not_before=long_ago, valid_for=timedelta(1)).write(
        cert, key
    )
    with caplog.at_level(logging.WARNING):
        assert tls.reload_if_changed() is False
    assert f"{cert}: expired at " in caplog.text and "keeping the current one" in caplog.text
    assert tls.problem() is None
