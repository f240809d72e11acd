"""Certificates checked on start, against the real process: a damaged demo state directory is
repaired (with a warning naming the file and the fault) and kubectl works with the kubeconfig the
demo writes, then and after a restart; a damaged certificate the user configured stops the service
with one line naming the setting, the file and the fault."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
import yaml

from autoscaler.web.security.certificates import generate_ca, issue_certificate, load_authority
from autoscaler.web.shared import demo_pki
from tests.autoscaler.demo_process import DemoProcess
from tests.autoscaler.test_real_clients import kubectl_raw
from tests.pki import make_pki

DISCOVERY = "/apis/external.metrics.k8s.io/v1beta1"
GARBAGE_PEM = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"
Damage = Callable[[demo_pki.DemoFiles], None]


def delete_the_ca(files: demo_pki.DemoFiles) -> None:
    files.ca_file.unlink()
    files.ca_key.unlink()


def empty_the_client_certificate(files: demo_pki.DemoFiles) -> None:
    files.client_cert.write_text("")


def corrupt_the_ca_certificate(files: demo_pki.DemoFiles) -> None:
    files.ca_file.write_text(GARBAGE_PEM)


def corrupt_the_serving_key(files: demo_pki.DemoFiles) -> None:
    files.serving_key.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")


def swap_in_another_client_key(files: demo_pki.DemoFiles) -> None:
    shutil.copy(files.serving_key, files.client_key)


def expire_the_serving_certificate(files: demo_pki.DemoFiles) -> None:
    authority = load_authority(files.ca_file, files.ca_key)
    long_ago = datetime.now(UTC) - timedelta(days=30)
    expired = issue_certificate(
        authority, "gpu-autoscaler", hosts=("127.0.0.1",), server=True, not_before=long_ago, valid_for=timedelta(1)
    )
    expired.write(files.serving_cert, files.serving_key)


# Each damage, and the warnings (file: fault) the next start must log; a new CA reissues both leaves.
DAMAGES: list[tuple[Damage, list[str]]] = [
    (
        delete_the_ca,
        [
            r"ca\.crt: missing; made a new CA",
            r"serving\.crt: not issued by the current CA \S*ca\.crt; issued a new",
            r"client\.crt: not issued by the current CA \S*ca\.crt; issued a new",
        ],
    ),
    (empty_the_client_certificate, [r"client\.crt: empty; issued a new"]),
    (
        corrupt_the_ca_certificate,
        [
            r"ca\.crt: not a PEM certificate \(it does not parse\); made a new CA",
            r"serving\.crt: not issued by the current CA",
            r"client\.crt: not issued by the current CA",
        ],
    ),
    (corrupt_the_serving_key, [r"serving\.key: not an unencrypted PEM private key \(it does not parse\); issued"]),
    (swap_in_another_client_key, [r"client\.key: does not match the certificate in \S*client\.crt; issued a new"]),
    (expire_the_serving_certificate, [r"serving\.crt: expired at 20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ; issued a new"]),
]


async def kubectl_reaches_the_api(demo: DemoProcess) -> None:
    """What the README tells a new user to run works with the kubeconfig as written."""
    kubeconfig = yaml.safe_load((demo.state / "kubeconfig").read_text())
    (user,) = kubeconfig["users"]
    assert user["user"]["client-certificate-data"] and user["user"]["client-key-data"]
    code, stdout, stderr = await kubectl_raw(demo.state / "kubeconfig", DISCOVERY)
    assert code == 0, stderr
    assert json.loads(stdout)["kind"] == "APIResourceList"
    async with aiohttp.ClientSession() as session, session.get(f"{demo.http_url}/readyz?verbose") as response:
        assert "[+]tls ok" in await response.text()


def pki_warnings(log: str) -> list[str]:
    return [line for line in log.splitlines() if "WARNING" in line and "demo PKI" in line]


@pytest.mark.parametrize(("damage", "expected"), DAMAGES, ids=[damage.__name__ for damage, _ in DAMAGES])
async def test_a_damaged_demo_state_directory_is_repaired(tmp_path, damage: Damage, expected: list[str]):
    files = demo_pki.prepare_state_dir(tmp_path / "state")
    damage(files)
    demo = DemoProcess(files.ca_file.parent)
    demo.start()
    try:
        warnings = pki_warnings(demo.start_log)
        assert len(warnings) == len(expected), demo.start_log
        for pattern, line in zip(expected, warnings, strict=True):
            assert re.search(pattern, line), (pattern, line)
        assert "Traceback" not in demo.start_log
        await kubectl_reaches_the_api(demo)
        repaired_ca = files.ca_file.read_bytes()
    finally:
        assert demo.stop() == 0
    # The repaired directory is whole: the next start changes nothing and says nothing.
    restart = DemoProcess(files.ca_file.parent)
    restart.start()
    try:
        assert pki_warnings(restart.start_log) == []
        assert files.ca_file.read_bytes() == repaired_ca
        await kubectl_reaches_the_api(restart)
    finally:
        assert restart.stop() == 0


def settings_file(tmp_path: Path, cert: Path, key: Path, **auth: str) -> Path:
    document = {
        "server": {"bind_address": "127.0.0.1", "tls": {"cert_file": str(cert), "key_file": str(key)}},
        "auth": {"mode": "none", **auth},
        "state_dir": str(tmp_path / "state"),
    }
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def run_until_exit(config: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "autoscaler", "serve", "--config", str(config), "--secure-port", "0"]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("empty_cert", "server.tls.cert_file {cert}: empty"),
        ("garbage_cert", "server.tls.cert_file {cert}: not a PEM certificate (it does not parse)"),
        ("garbage_key", "server.tls.key_file {key}: not an unencrypted PEM private key (it does not parse)"),
        ("other_key", "server.tls.key_file {key}: does not match the certificate in {cert}"),
        ("missing_key", "server.tls.key_file {key}: missing"),
        ("expired_cert", "server.tls.cert_file {cert}: expired at "),
        ("garbage_client_ca", "auth.client_ca_file {ca}: not a PEM certificate (it does not parse)"),
    ],
)
def test_a_damaged_configured_certificate_stops_the_service_naming_it(tmp_path, damage: str, expected: str):
    pki = make_pki(tmp_path / "pki")
    cert, key, ca = tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "client-ca.crt"
    shutil.copy(pki.serving_cert, cert)
    shutil.copy(pki.serving_key, key)
    shutil.copy(pki.client_ca, ca)
    auth: dict[str, str] = {}
    if damage == "empty_cert":
        cert.write_text("")
    elif damage == "garbage_cert":
        cert.write_text(GARBAGE_PEM)
    elif damage == "garbage_key":
        key.write_text("not a key")
    elif damage == "other_key":
        shutil.copy(pki.alice.key, key)
    elif damage == "missing_key":
        key.unlink()
    elif damage == "expired_cert":
        old = issue_certificate(
            generate_ca("old"), "x", server=True, not_before=datetime(2020, 1, 1, tzinfo=UTC), valid_for=timedelta(1)
        )
        old.write(cert, key)
    else:
        ca.write_text(GARBAGE_PEM)
        auth = {"mode": "files", "client_ca_file": str(ca), "authorization": "allow-authenticated"}
    finished = run_until_exit(settings_file(tmp_path, cert, key, **auth))
    assert finished.returncode == 1, finished.stderr
    assert "Traceback" not in finished.stderr
    message = expected.format(cert=cert, key=key, ca=ca)
    assert f"error: cannot serve: {message}" in finished.stderr.splitlines()[-1], finished.stderr


async def test_readyz_fails_once_the_serving_certificate_expires(tmp_path):
    """Valid at start (the start-up check passes), expired 20 s later: not ready, naming the file."""
    authority = generate_ca("test CA")
    start = datetime.now(UTC) - timedelta(minutes=5)
    pair = issue_certificate(
        authority,
        "gpu-autoscaler",
        hosts=("127.0.0.1",),
        server=True,
        not_before=start,
        valid_for=timedelta(minutes=5, seconds=20),
    )
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    pair.write(cert, key)
    service = DemoProcess(tmp_path / "state", config=settings_file(tmp_path, cert, key))
    service.start()
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{service.http_url}/readyz") as response:
                assert (response.status, await response.text()) == (200, "ok")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                async with session.get(f"{service.http_url}/readyz") as response:
                    text = await response.text()
                    if response.status == 503:
                        break
                await asyncio.sleep(0.2)
        assert re.fullmatch(rf"not ready: tls: serving certificate {re.escape(str(cert))} expired at \S+Z\n", text), (
            text
        )
    finally:
        assert service.stop() == 0


async def test_the_demo_handshake_check_names_what_kubectl_would_meet(api_server, tmp_path):
    """The demo's last guard: a kubeconfig whose CA did not issue the serving certificate is caught."""
    files = demo_pki.prepare_state_dir(tmp_path / "state")  # a CA of its own, not the server's
    problem = await demo_pki.kubeconfig_problem(files, api_server.base_url)
    assert problem is not None and problem.startswith("ClientConnectorCertificateError"), problem
    server_pki = api_server.pki
    shutil.copy(server_pki.client_ca, files.ca_file)
    shutil.copy(server_pki.alice.cert, files.client_cert)
    shutil.copy(server_pki.alice.key, files.client_key)
    assert await demo_pki.kubeconfig_problem(files, api_server.base_url) is None
