"""The demo's own PKI: a local CA, the serving and client certificates, and a kubeconfig for kubectl.

Created once in the state directory, so ``kubectl --kubeconfig <state-dir>/kubeconfig`` keeps
working across restarts.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

import yaml

from autoscaler.web.certificates import KeyPair, generate_ca, issue_certificate, load_key_pair, write_private

DEMO_USER = "demo-admin"


@dataclass(frozen=True)
class DemoFiles:
    ca_file: Path
    serving_cert: Path
    serving_key: Path
    client_cert: Path
    client_key: Path
    kubeconfig: Path


def _ensure_pair(authority: KeyPair, cert: Path, key: Path, **kwargs: object) -> None:
    if cert.exists() and key.exists():
        return
    issue_certificate(authority, **kwargs).write(cert, key)  # type: ignore[arg-type]


def demo_files(state_dir: Path) -> DemoFiles:
    return DemoFiles(
        ca_file=state_dir / "ca.crt",
        serving_cert=state_dir / "serving.crt",
        serving_key=state_dir / "serving.key",
        client_cert=state_dir / "client.crt",
        client_key=state_dir / "client.key",
        kubeconfig=state_dir / "kubeconfig",
    )


def prepare_state_dir(state_dir: Path) -> DemoFiles:
    """Create (once) the demo CA and its serving and client certificates."""
    state_dir.mkdir(parents=True, exist_ok=True)
    files = demo_files(state_dir)
    ca_key = state_dir / "ca.key"
    if files.ca_file.exists() and ca_key.exists():
        authority = load_key_pair(files.ca_file, ca_key)
    else:
        authority = generate_ca("gpu-autoscaler demo CA")
        authority.write(files.ca_file, ca_key)
    _ensure_pair(
        authority,
        files.serving_cert,
        files.serving_key,
        common_name="gpu-autoscaler",
        hosts=("127.0.0.1", "localhost", "::1"),
        server=True,
    )
    _ensure_pair(
        authority,
        files.client_cert,
        files.client_key,
        common_name=DEMO_USER,
        organizations=("system:masters",),
        client=True,
    )
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
