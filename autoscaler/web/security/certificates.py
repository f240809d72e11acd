"""X.509 certificates for the service: a local CA, serving and client certificates (``cryptography``)."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = ec.EllipticCurvePrivateKey


class CertificateFileError(OSError):
    """A certificate or key file that cannot be used; the message names the file and the fault.

    An ``OSError``, like a missing file, so the command line reports it in one line and exits 1.
    """

    def __init__(self, path: Path, fault: str, *, setting: str | None = None) -> None:
        super().__init__(f"{setting} {path}: {fault}" if setting else f"{path}: {fault}")
        self.path = path
        self.fault = fault

    def for_setting(self, setting: str) -> CertificateFileError:
        """The same fault, naming the setting that points at the file."""
        return CertificateFileError(self.path, self.fault, setting=setting)


@dataclass(frozen=True)
class KeyPair:
    certificate: x509.Certificate
    key: PrivateKey

    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def write(self, cert_path: Path, key_path: Path) -> None:
        write_private(key_path, self.key_pem())
        write_public(cert_path, self.certificate_pem())


def write_private(path: Path, data: bytes) -> None:
    """Write a secret readable by the owner only, replacing any file atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
    os.replace(temporary, path)


def write_public(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def generate_ca(common_name: str, *, valid_for: timedelta = timedelta(days=3650)) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    name = _name(common_name)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + valid_for)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(certificate, key)


def issue_certificate(
    ca: KeyPair,
    common_name: str,
    *,
    organizations: tuple[str, ...] = (),
    hosts: tuple[str, ...] = (),
    server: bool = False,
    client: bool = False,
    valid_for: timedelta = timedelta(days=365),
    not_before: datetime | None = None,
) -> KeyPair:
    """Issue a leaf certificate; ``hosts`` become DNS or IP subject alternative names."""
    key = ec.generate_private_key(ec.SECP256R1())
    start = not_before or datetime.now(UTC) - timedelta(minutes=5)
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organizations))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + valid_for)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return KeyPair(builder.sign(ca.key, hashes.SHA256()), key)


def load_certificates(pem: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem)


def _read_pem(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CertificateFileError(path, "missing") from None
    except OSError as error:
        raise CertificateFileError(path, f"unreadable ({error.strerror or error})") from None
    if not data.strip():
        raise CertificateFileError(path, "empty")
    return data


def read_certificates(path: Path) -> list[x509.Certificate]:
    """Every certificate in a PEM file, in order; at least one."""
    try:
        return load_certificates(_read_pem(path))
    except ValueError:
        raise CertificateFileError(path, "not a PEM certificate (it does not parse)") from None


def read_private_key(path: Path) -> PrivateKeyTypes:
    try:
        return serialization.load_pem_private_key(_read_pem(path), password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise CertificateFileError(path, "not an unencrypted PEM private key (it does not parse)") from None


def _public_der(key: PublicKeyTypes) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _stamp(moment: datetime) -> str:
    return f"{moment:%Y-%m-%dT%H:%M:%SZ}"


def validity_fault(certificate: x509.Certificate, now: datetime | None = None) -> str | None:
    """Why ``certificate`` is not valid at ``now`` (expired, not yet valid), or ``None``."""
    now = now or datetime.now(UTC)
    if now < certificate.not_valid_before_utc:
        return f"not valid before {_stamp(certificate.not_valid_before_utc)}"
    if now > certificate.not_valid_after_utc:
        return f"expired at {_stamp(certificate.not_valid_after_utc)}"
    return None


def check_pair(
    cert_path: Path, key_path: Path, *, issuer: KeyPair | None = None, issuer_path: Path | None = None
) -> tuple[x509.Certificate, PrivateKeyTypes]:
    """The first certificate of ``cert_path`` and its key, if they parse, match and are valid now.

    With ``issuer``, the certificate must also have been signed by it. Raises CertificateFileError
    naming the file at fault.
    """
    certificate = read_certificates(cert_path)[0]
    key = read_private_key(key_path)
    if _public_der(certificate.public_key()) != _public_der(key.public_key()):
        raise CertificateFileError(key_path, f"does not match the certificate in {cert_path}")
    fault = validity_fault(certificate)
    if fault is not None:
        raise CertificateFileError(cert_path, fault)
    if issuer is not None and not issued_by(certificate, [issuer.certificate]):
        raise CertificateFileError(cert_path, f"not issued by the current CA {issuer_path or ''}".rstrip())
    return certificate, key


def load_key_pair(cert_path: Path, key_path: Path) -> KeyPair:
    """An EC key pair that :func:`check_pair` accepts; raises CertificateFileError otherwise."""
    certificate, key = check_pair(cert_path, key_path)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertificateFileError(key_path, "not an EC private key")
    return KeyPair(certificate, key)


def load_authority(cert_path: Path, key_path: Path) -> KeyPair:
    """A CA's key pair: :func:`load_key_pair`, and the certificate must be a CA's."""
    pair = load_key_pair(cert_path, key_path)
    try:
        is_ca = pair.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if not is_ca:
        raise CertificateFileError(cert_path, "not a CA certificate (no basicConstraints CA:TRUE)")
    return pair


def common_name(certificate: x509.Certificate) -> str:
    values = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(values[0].value) if values else ""


def organizations(certificate: x509.Certificate) -> tuple[str, ...]:
    return tuple(str(a.value) for a in certificate.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME))


def issued_by(certificate: x509.Certificate, authorities: list[x509.Certificate]) -> bool:
    """Whether one of ``authorities`` signed ``certificate`` (the TLS layer already checked the chain)."""
    for authority in authorities:
        if authority.subject != certificate.issuer:
            continue
        try:
            certificate.verify_directly_issued_by(authority)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return True
    return False
