"""Test certificates: the cluster CA, the front-proxy CA, a stranger CA, and clients of each."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from autoscaler.web.certificates import KeyPair, generate_ca, issue_certificate


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
