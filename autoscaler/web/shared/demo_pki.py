"""The demo's own PKI: a local CA, the serving and client certificates, and a kubeconfig for kubectl.

Created once in the state directory, so ``kubectl --kubeconfig <state-dir>/kubeconfig`` keeps
working across restarts.
"""

from __future__ import annotations

import base64
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import yaml

from autoscaler.web.security.certificates import (
    CertificateFileError,
    KeyPair,
    check_pair,
    generate_ca,
    issue_certificate,
    load_authority,
    write_private,
)
from autoscaler.web.shared import responses

log = logging.getLogger(__name__)

DEMO_USER = "demo-admin"
SERVING_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class DemoFiles:
    ca_file: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    client_cert: Path
    client_key: Path
    kubeconfig: Path

    @property
    def pki(self) -> tuple[Path, ...]:
        return (self.ca_file, self.ca_key, self.serving_cert, self.serving_key, self.client_cert, self.client_key)


def demo_files(state_dir: Path) -> DemoFiles:
    return DemoFiles(
        ca_file=state_dir / "ca.crt",
        ca_key=state_dir / "ca.key",
        serving_cert=state_dir / "serving.crt",
        serving_key=state_dir / "serving.key",
        client_cert=state_dir / "client.crt",
        client_key=state_dir / "client.key",
        kubeconfig=state_dir / "kubeconfig",
    )


def _serving_pair(authority: KeyPair) -> KeyPair:
    return issue_certificate(authority, "gpu-autoscaler", hosts=SERVING_HOSTS, server=True)


def _client_pair(authority: KeyPair) -> KeyPair:
    return issue_certificate(authority, DEMO_USER, organizations=("system:masters",), client=True)


def _current_authority(files: DemoFiles, *, warn: bool) -> KeyPair:
    try:
        return load_authority(files.ca_file, files.ca_key)
    except CertificateFileError as fault:
        if warn:
            log.warning(
                "demo PKI: %s; made a new CA, so the serving and client certificates and the kubeconfig "
                "are issued again",
                fault,
            )
    authority = generate_ca("gpu-autoscaler demo CA")
    authority.write(files.ca_file, files.ca_key)
    return authority


def _ensure_pair(
    authority: KeyPair, files: DemoFiles, cert: Path, key: Path, issue: Callable[[KeyPair], KeyPair], *, warn: bool
) -> None:
    """Keep a pair that parses, matches, is valid now and was issued by ``authority``; else reissue it."""
    try:
        check_pair(cert, key, issuer=authority, issuer_path=files.ca_file)
        return
    except CertificateFileError as fault:
        if warn:
            log.warning("demo PKI: %s; issued a new certificate and key", fault)
    issue(authority).write(cert, key)


def prepare_state_dir(state_dir: Path) -> DemoFiles:
    """The demo CA and its serving and client certificates: made once, checked at every start.

    The service owns these files, so whatever is missing, unparsable, mismatched, expired or issued
    by another CA is made again (with a warning naming the file and the fault) rather than served
    half-broken: a new CA means new serving and client certificates, and the kubeconfig is written
    again at every start.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    files = demo_files(state_dir)
    # A first start finds none of the files and has nothing to warn about.
    warn = any(path.exists() for path in files.pki)
    authority = _current_authority(files, warn=warn)
    _ensure_pair(authority, files, files.serving_cert, files.serving_key, _serving_pair, warn=warn)
    _ensure_pair(authority, files, files.client_cert, files.client_key, _client_pair, warn=warn)
    return files


def write_kubeconfig(files: DemoFiles, server: str) -> None:
    def encoded(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode("ascii")

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "gpu-autoscaler-demo",
                "cluster": {"server": server, "certificate-authority-data": encoded(files.ca_file)},
            }
        ],
        "users": [
            {
                "name": DEMO_USER,
                "user": {
                    "client-certificate-data": encoded(files.client_cert),
                    "client-key-data": encoded(files.client_key),
                },
            }
        ],
        "contexts": [{"name": "gpu-autoscaler-demo", "context": {"cluster": "gpu-autoscaler-demo", "user": DEMO_USER}}],
        "current-context": "gpu-autoscaler-demo",
    }
    # The kubeconfig embeds the client key: owner-only, like the key files.
    write_private(files.kubeconfig, yaml.safe_dump(config, sort_keys=False).encode())


async def kubeconfig_problem(files: DemoFiles, server: str) -> str | None:
    """Why kubectl with the demo kubeconfig could not read discovery from ``server``; ``None`` if it can.

    The same CA, client certificate and host name the kubeconfig gives kubectl, so a demo that says
    ready can be reached by the command it prints.
    """
    try:
        context = ssl.create_default_context(cafile=str(files.ca_file))
        context.load_cert_chain(files.client_cert, files.client_key)
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
            session.get(f"{server}/apis/{responses.GROUP_VERSION}", ssl=context) as response,
        ):
            if response.status != 200:
                return f"discovery answered HTTP {response.status} to the demo client certificate"
    except (aiohttp.ClientError, OSError, TimeoutError) as error:  # ssl.SSLError is an OSError
        return f"{type(error).__name__}: {error}"
    return None
