"""Test certificates: the cluster CA, the front-proxy CA, a stranger CA, and clients of each."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from autoscaler.web.security.certificates import KeyPair, generate_ca, issue_certificate


@dataclass(frozen=True)
class Client:
    cert: Path
    key: Path


@dataclass(frozen=True)
class PKI:
    directory: Path
    client_ca: Path
    proxy_ca: Path
    serving_cert: Path
    serving_key: Path
    alice: Client  # issued by the client CA: user "alice", group "team-a"
    proxy: Client  # front-proxy-client, issued by the front-proxy CA, allowed
    proxy_not_allowed: Client  # issued by the front-proxy CA with a CN that is not allowed
    stranger: Client  # issued by a CA nobody trusts
    expired: Client  # issued by the client CA, expired yesterday
    serving_ca_pair: KeyPair


def _client(directory: Path, name: str, pair: KeyPair) -> Client:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    pair.write(cert, key)
    return Client(cert, key)


def make_pki(directory: Path) -> PKI:
    directory.mkdir(parents=True, exist_ok=True)
    cluster = generate_ca("test cluster CA")
    front_proxy = generate_ca("test front-proxy CA")
    stranger = generate_ca("stranger CA")
    cluster.write(directory / "client-ca.crt", directory / "client-ca.key")
    front_proxy.write(directory / "proxy-ca.crt", directory / "proxy-ca.key")
    serving = issue_certificate(cluster, "gpu-autoscaler", hosts=("127.0.0.1", "localhost"), server=True)
    serving.write(directory / "serving.crt", directory / "serving.key")
    long_ago = datetime.now(UTC) - timedelta(days=30)
    return PKI(
        directory=directory,
        client_ca=directory / "client-ca.crt",
        proxy_ca=directory / "proxy-ca.crt",
        serving_cert=directory / "serving.crt",
        serving_key=directory / "serving.key",
        alice=_client(directory, "alice", issue_certificate(cluster, "alice", organizations=("team-a",), client=True)),
        proxy=_client(directory, "proxy", issue_certificate(front_proxy, "front-proxy-client", client=True)),
        proxy_not_allowed=_client(
            directory, "proxy-other", issue_certificate(front_proxy, "someone-else", client=True)
        ),
        stranger=_client(directory, "stranger", issue_certificate(stranger, "mallory", client=True)),
        expired=_client(
            directory,
            "expired",
            issue_certificate(cluster, "old", client=True, not_before=long_ago, valid_for=timedelta(days=29)),
        ),
        serving_ca_pair=cluster,
    )


def without_common_name(pki: PKI, directory: Path) -> Client:
    """A client certificate from the client CA with no CN, only ``O=system:masters`` (the probe's)."""
    return issued_without_common_name(pki.serving_ca_pair, directory)


def issued_without_common_name(authority: KeyPair, directory: Path) -> Client:
    """A client certificate from ``authority`` with no CN, only ``O=system:masters``."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters")]))
        .issuer_name(authority.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(authority.key, hashes.SHA256())
    )
    client = Client(directory / "no-cn.crt", directory / "no-cn.key")
    KeyPair(certificate, key).write(client.cert, client.key)
    return client
