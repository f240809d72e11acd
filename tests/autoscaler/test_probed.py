"""What an independent probe of the running demo found (issue #20), each case against the real process:
parser errors as metav1.Status with their own codes, no Server header, namespace names validated,
one error format on the plain port, refused client certificates counted and logged, AEAD-only
TLS 1.2, and /readyz?verbose reporting the demo's signals."""

from __future__ import annotations

import json
import re
import socket
import ssl
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest

from autoscaler.web.security.certificates import issue_certificate, load_authority
from tests.autoscaler.demo_process import DemoProcess
from tests.autoscaler.test_api import status
from tests.pki import make_pki

PREFIX = "/apis/external.metrics.k8s.io/v1beta1"
# The C parser is what aiohttp uses when it is built; AIOHTTP_NO_EXTENSIONS selects the Python one.
PARSERS = {"c-parser": {}, "python-parser": {"AIOHTTP_NO_EXTENSIONS": "1"}}


@pytest.fixture(scope="module", params=list(PARSERS))
def any_parser_demo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoProcess]:
    demo = DemoProcess(tmp_path_factory.mktemp(request.param) / "state", env=PARSERS[request.param])
    demo.start()
    yield demo
    assert demo.stop() == 0


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoProcess]:
    process = DemoProcess(tmp_path_factory.mktemp("demo") / "state")
    process.start()
    yield process
    assert process.stop() == 0


def client_context(demo: DemoProcess, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(demo.state / "ca.crt"))
    if cert is not None and key is not None:
        context.load_cert_chain(cert, key)
    return context


def demo_client(demo: DemoProcess) -> ssl.SSLContext:
    return client_context(demo, demo.state / "client.crt", demo.state / "client.key")


def exchange(demo: DemoProcess, request: bytes, *, secure: bool = False) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes (bounded: one request, 10 s), read the answer until the server closes."""
    port = demo.secure_port if secure else int(demo.http_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        sock = demo_client(demo).wrap_socket(raw, server_hostname="127.0.0.1") if secure else raw
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in header_lines)}
    return int(status_line.split()[1]), headers, body


def get(path: str, *headers: str, method: str = "GET") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


PARSER_REFUSALS = [
    ("path of 100 KB", get("/" + "a" * 100_000), 414, "BadRequest", "the request URI is longer than 65536 bytes"),
    (
        "selector of 1 MB",
        get("/api/v1/forecasts?labelSelector=" + "a" * 1_000_000),
        414,
        "BadRequest",
        "the request URI is longer than 65536 bytes",
    ),
    (
        "header of 100 KB",
        get("/healthz", "X-Big: " + "b" * 100_000),
        431,
        "BadRequest",
        "a request header field is longer than 16384 bytes",
    ),
    (
        "300 headers",
        get("/healthz", *(f"X-H{i}: v" for i in range(300))),
        431,
        "BadRequest",
        "the request has more than 256 header fields",
    ),
    (
        "invented method",
        get("/healthz", method="FOO"),
        501,
        "MethodNotAllowed",
        "the request method is not implemented by this server",
    ),
]


@pytest.mark.parametrize(
    ("request_bytes", "code", "reason", "message"),
    [case[1:] for case in PARSER_REFUSALS],
    ids=[case[0] for case in PARSER_REFUSALS],
)
def test_what_the_parser_refuses_is_a_status(any_parser_demo, request_bytes, code, reason, message):
    answer_code, headers, body = exchange(any_parser_demo, request_bytes)
    assert answer_code == code
    assert headers["content-type"].startswith("application/json")
    assert json.loads(body) == status(code, reason, message)
    assert "server" not in headers
    # Logged as one line naming the error, never the bytes.
    assert "aaaaaaaa" not in any_parser_demo.log and "bbbbbbbb" not in any_parser_demo.log
    assert "Traceback" not in any_parser_demo.log


def test_a_refused_connection_is_closed_in_stages(any_parser_demo):
    """The refusal arrives whole, then a half-close; what the client still sends is drained, not reset.

    Sends 100 KB of a request line (the limit is 64 KiB), reads the 414 to the server's EOF while the
    connection is still open, then sends 1 MB more: a server that closed at once with bytes unread
    would have reset the connection, and this send would fail.
    """
    port = int(any_parser_demo.http_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /" + b"a" * 100_000)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        assert answer.split(b"\r\n", 1)[0].endswith(b" 414 Request-URI Too Long")
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["code"] == 414
        sock.sendall(b"a" * 1_000_000)  # drained by the server
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(65536) == b""
    assert "Traceback" not in any_parser_demo.log


def test_a_refused_tls_connection_drains_what_the_client_still_sends(any_parser_demo):
    """Over TLS the refusal arrives whole, and what the client still sends is drained rather than reset.
    TLS has no half-close; asyncio's TLS close sends close_notify and reads until the client's (at most
    its ssl_shutdown_timeout, 30 s), which drains as the plain port's linger does. A transport aborted
    after the 414 would reset this 1 MB send."""
    demo = any_parser_demo
    with socket.create_connection(("127.0.0.1", demo.secure_port), timeout=10) as raw:
        sock = demo_client(demo).wrap_socket(raw, server_hostname="127.0.0.1")
        sock.sendall(b"GET /" + b"a" * 100_000)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split(b"\r\n", 1)[0].endswith(b" 414 Request-URI Too Long")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        while len(body) < length:
            body += sock.recv(65536)
        assert json.loads(body)["code"] == 414
        for _ in range(4):
            sock.sendall(b"a" * 250_000)  # drained by the server
    assert "Traceback" not in demo.log


def malformed_lines(demo: DemoProcess) -> list[str]:
    return [line for line in demo.log.splitlines() if "malformed request" in line]


async def test_parser_refusals_are_logged_at_a_bounded_rate(any_parser_demo):
    assert exchange(any_parser_demo, get("/" + "a" * 100_000))[0] == 414
    await any_parser_demo.wait_for_log("malformed request from 127.0.0.1 refused with")
    before = len(malformed_lines(any_parser_demo))
    for _ in range(5):
        assert exchange(any_parser_demo, get("/" + "a" * 100_000))[0] == 414
    # At most one line per 10 s (the five above take well under a second), each naming the error only.
    assert len(malformed_lines(any_parser_demo)) - before <= 1
    for line in malformed_lines(any_parser_demo):
        assert re.search(r"WARNING .*malformed request from 127\.0\.0\.1 refused with (4\d\d|501) \(\w+\)", line), line


def test_the_selector_limit_is_reachable_and_answers_400(demo):
    selector = ",".join(f"k{i}=v" for i in range(2500))  # about 20 KB: over the selector's 16 KiB
    code, headers, body = exchange(
        demo, get(f"{PREFIX}/namespaces/default/gpu_headroom?labelSelector={selector}"), secure=True
    )
    assert code == 400
    assert json.loads(body) == status(
        400,
        "BadRequest",
        f"invalid labelSelector: label selector is {len(selector)} characters long; the limit is 16384",
    )
    assert "server" not in headers


def test_answers_carry_no_server_header(demo):
    code, headers, body = exchange(demo, get("/healthz"))
    assert (code, body, headers.get("server")) == (200, b"ok", None)
    code, headers, _ = exchange(demo, get(PREFIX), secure=True)
    assert (code, headers.get("server")) == (200, None)


@pytest.mark.parametrize("namespace", ["a%2Fb", "NOT_VALID_NS!", "-a", "a" * 64])
def test_namespaces_kubernetes_would_reject_are_400(demo, namespace):
    code, _, body = exchange(demo, get(f"{PREFIX}/namespaces/{namespace}/gpu_headroom"), secure=True)
    assert code == 400
    document = json.loads(body)
    shown = namespace.replace("%2F", "/")
    rule = (
        "must be no more than 63 characters"
        if len(shown) > 63
        else "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
        "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
        "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
    )
    assert document == status(400, "BadRequest", f'invalid namespace "{shown}": {rule}')
    # A valid name reaches the metric: served (200), or 503 (warming up) while its first forecast is pending.
    code, _, body = exchange(demo, get(f"{PREFIX}/namespaces/default-1/gpu_headroom"), secure=True)
    assert code in (200, 503) and "invalid namespace" not in body.decode(), (code, body)


@pytest.mark.parametrize(
    ("path", "code", "message", "field"),
    [
        (
            "/api/v1/forecasts/gpu_headroom?history=1",
            400,
            "invalid history '1': expected a duration with a unit, e.g. 6h or 90m",
            "history",
        ),
        (
            "/api/v1/forecasts/gpu_headroom?history=inf",
            400,
            "invalid history 'inf': expected a duration with a unit, e.g. 6h or 90m",
            "history",
        ),
        (
            f"/api/v1/forecasts?labelSelector={quote('pool in (a')}",
            400,
            "invalid labelSelector: ",
            "labelSelector",
        ),
        (
            "/api/v1/forecasts/no_such_metric",
            404,
            "metric 'no_such_metric' is not served by this configuration; "
            "served: gpu_demand_forecast, gpu_headroom, request_rate_forecast",
            None,
        ),
    ],
)
def test_inspection_errors_are_statuses(demo, path, code, message, field):
    answer_code, _, body = exchange(demo, get(path))
    document = json.loads(body)
    assert answer_code == code and document["message"].startswith(message)
    expected = status(code, "BadRequest" if code == 400 else "NotFound", document["message"])
    if field is not None:
        expected["details"] = {
            "causes": [{"reason": "FieldValueInvalid", "message": document["message"], "field": field}]
        }
    assert document == expected
    # The same format as any unknown route on this port.
    assert json.loads(exchange(demo, get("/no/such/route"))[2])["kind"] == "Status"


def tls_failures(demo: DemoProcess) -> float:
    code, _, body = exchange(demo, get("/metrics"))
    assert code == 200
    found = re.search(r'^gpu_autoscaler_auth_failures_total\{code="tls"\} (\S+)$', body.decode(), re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def handshake(demo: DemoProcess, context: ssl.SSLContext) -> str:
    """The outcome of one request over a fresh handshake: the status line, or the error's name."""
    try:
        with (
            socket.create_connection(("127.0.0.1", demo.secure_port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as sock,
        ):
            sock.sendall(get(PREFIX))
            return sock.recv(65536).split(b"\r\n", 1)[0].decode() or "closed"
    except (ssl.SSLError, OSError) as error:
        return type(error).__name__


async def test_a_refused_client_certificate_is_counted_and_logged(demo, tmp_path):
    stranger = make_pki(tmp_path / "pki").stranger
    authority = load_authority(demo.state / "ca.crt", demo.state / "ca.key")
    long_ago = datetime.now(UTC) - timedelta(days=30)
    expired = issue_certificate(authority, "old", client=True, not_before=long_ago, valid_for=timedelta(days=1))
    expired.write(tmp_path / "expired.crt", tmp_path / "expired.key")
    before = tls_failures(demo)
    refused = [
        client_context(demo, stranger.cert, stranger.key),
        client_context(demo, tmp_path / "expired.crt", tmp_path / "expired.key"),
        client_context(demo, stranger.cert, stranger.key),
    ]
    for context in refused:
        assert not handshake(demo, context).startswith("HTTP/1.1 200")
    assert handshake(demo, demo_client(demo)) == "HTTP/1.1 200 OK"
    assert tls_failures(demo) == before + 3
    line = await demo.wait_for_log(
        r"WARNING .*client certificate from 127\.0\.0\.1:\d+ refused in the TLS handshake: (.*)"
    )
    assert line.group(1) == "unable to get local issuer certificate"
    # Rate-limited: the three refusals within seconds give one line.
    assert len(re.findall("refused in the TLS handshake", demo.log)) == 1


def tls12_context(demo: DemoProcess, cipher: str) -> ssl.SSLContext:
    context = client_context(demo)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(cipher)
    return context


def test_tls12_offers_aead_suites_only(demo):
    candidates = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    candidates.set_ciphers("ALL:@SECLEVEL=0")
    tls12 = sorted({c["name"] for c in candidates.get_ciphers() if c["protocol"] == "TLSv1.2"})
    assert {"ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES256-SHA384"} <= set(tls12)
    accepted = set()
    for cipher in tls12:  # a bounded number of handshakes on loopback
        try:
            with (
                socket.create_connection(("127.0.0.1", demo.secure_port), timeout=10) as raw,
                tls12_context(demo, cipher).wrap_socket(raw, server_hostname="127.0.0.1") as sock,
            ):
                accepted.add(sock.cipher()[0])
        except ssl.SSLError:
            continue
    # The demo's certificate is ECDSA: of the configured suites, the ECDSA ones.
    assert accepted == {
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
    }


async def test_readyz_verbose_reports_the_demo_signals(demo):
    text = await demo.wait_ready()
    assert re.search(r"^\[\+\]signal gpus_requested: last success \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", text, re.M), text
    assert re.search(r"^\[\+\]signal request_rate: last success \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", text, re.M), text
    assert "demo" not in text and "no success yet" not in text
    async with aiohttp.ClientSession() as session, session.get(f"{demo.http_url}/readyz") as response:
        assert (response.status, await response.text()) == (200, "ok")
