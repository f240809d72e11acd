"""The ``server`` section of the settings: ports, TLS, HTTP parser limits, shutdown timing."""

from __future__ import annotations

import ipaddress
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from autoscaler.quantity import Count
from forecast.durations import parse_duration


def _duration_setting(value: object) -> timedelta:
    """A duration field: text or a number of seconds from YAML or the environment is parsed (zero
    allowed); a ``timedelta`` given in Python passes as it is."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, str | int | float):
        return parse_duration(value)
    raise ValueError(f"expected a duration such as '5m' or '1h30m', got {value!r}")


Duration = Annotated[timedelta, BeforeValidator(_duration_setting)]


# Unknown keys are typos far more often than intent: refuse them, naming the key.
STRICT = ConfigDict(extra="forbid", frozen=True)


class _Strict(BaseModel):
    model_config = STRICT


# kube-apiserver's --tls-cipher-suites names (IANA). Only ECDHE key exchange with an AEAD cipher:
# the CBC suites OpenSSL offers by default are left out. They apply to TLS 1.2; every TLS 1.3
# suite is AEAD already.
TLSCipherSuite = Literal[
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
]
AEAD_CIPHER_SUITES: tuple[TLSCipherSuite, ...] = get_args(TLSCipherSuite)


class TLSSettings(_Strict):
    cert_file: Path | None = None
    key_file: Path | None = None
    # How often the files are checked for rotation.
    reload_interval: Duration = timedelta(seconds=10)
    cipher_suites: tuple[TLSCipherSuite, ...] = Field(default=AEAD_CIPHER_SUITES, min_length=1)

    @model_validator(mode="after")
    def _both_or_neither(self) -> TLSSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file must be given together")
        return self


# The demo's gRPC port when none is configured: next to its 6443 (HTTPS) and 8080 (HTTP).
DEMO_GRPC_PORT = 9443


class ServerSettings(_Strict):
    bind_address: str = "0.0.0.0"  # noqa: S104 - in-cluster the service must listen on the pod IP
    secure_port: Count = Field(default=6443, ge=0, le=65535)  # 0: any free port (tests)
    # None switches the plain port off; 0 picks any free port (tests).
    http_port: Count | None = Field(default=8080, ge=0, le=65535)
    # KEDA's external scaler (gRPC over TLS, same serving certificate as secure_port). None switches it
    # off (the default outside the demo, which serves it on DEMO_GRPC_PORT); 0 picks any free port (tests).
    grpc_port: Count | None = Field(default=None, ge=0, le=65535)
    # CA bundle that KEDA's client certificate (trigger key tlsClientCert) must chain to: when set the
    # gRPC port requires mutual TLS; when unset it asks for no client certificate. The demo sets its CA.
    grpc_client_ca_file: Path | None = None
    # subjectaccessreview: each gRPC call's client certificate (CN the user, O the groups) must be allowed
    # to get the external metric in the trigger's namespace, as the HTTPS API asks; none: any admitted
    # client reads every metric.
    grpc_authorization: Literal["none", "subjectaccessreview"] = "none"
    # delegated: the plain port's /metrics, inspection API and page need a bearer token allowed (TokenReview,
    # then a SubjectAccessReview of the path) as controller-runtime's secure metrics serving asks; the
    # probes stay open. none: anyone who reaches the port reads every served value.
    http_auth: Literal["none", "delegated"] = "none"
    tls: TLSSettings = TLSSettings()
    # After SIGTERM, /readyz fails at once but both ports keep serving this long, so that endpoints,
    # load balancers and the aggregator stop sending before the listeners close (kube-apiserver's
    # --shutdown-delay-duration); then in-flight requests drain for up to shutdown_grace.
    shutdown_delay: Duration = timedelta(seconds=5)
    shutdown_grace: Duration = timedelta(seconds=10)
    # A connection that sends no complete request (or TLS handshake) for this long is closed: idle
    # keep-alive connections and slow-header (slowloris) clients alike.
    idle_timeout: Duration = timedelta(seconds=30)
    # HTTP parser limits. Longer request lines are answered 414, longer header lines or more headers
    # 431. The request line holds the label selector: 64 KiB leaves room for the selector parser's own
    # 16 KiB limit even percent-encoded. The aggregator sends one X-Remote-Group header per group.
    max_request_line_bytes: Count = Field(default=65_536, ge=1_024, le=1_048_576)
    max_header_field_bytes: Count = Field(default=16_384, ge=1_024, le=1_048_576)
    max_headers: Count = Field(default=256, ge=16, le=10_000)

    @model_validator(mode="after")
    def _grpc_identity(self) -> ServerSettings:
        if self.grpc_authorization == "subjectaccessreview" and self.grpc_client_ca_file is None:
            raise ValueError(
                "grpc_authorization subjectaccessreview needs grpc_client_ca_file: the caller is its client certificate"
            )
        return self

    @model_validator(mode="after")
    def _ports_differ(self) -> ServerSettings:
        ports = {"secure_port": self.secure_port, "http_port": self.http_port, "grpc_port": self.grpc_port}
        chosen = [(name, port) for name, port in ports.items() if port]  # None is off, 0 any free port
        for index, (name, port) in enumerate(chosen):
            for other, other_port in chosen[index + 1 :]:
                if port == other_port:
                    raise ValueError(f"{name} and {other} must differ")
        return self

    @property
    def is_loopback(self) -> bool:
        if self.bind_address == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.bind_address).is_loopback
        except ValueError:
            return False


class LeaseTimings(BaseModel):
    """client-go's leader-election timings, shared by every Lease the service holds: a holder stops
    acting ``renew_deadline`` after its last renewal, before others may take the Lease
    (``lease_duration``); it renews every ``retry_period``."""

    model_config = STRICT

    lease_duration: Duration = timedelta(seconds=15)
    renew_deadline: Duration = timedelta(seconds=10)
    retry_period: Duration = timedelta(seconds=2)

    @model_validator(mode="after")
    def _timings_ordered(self) -> LeaseTimings:
        if not self.lease_duration > self.renew_deadline > self.retry_period > timedelta(0):
            raise ValueError(
                "lease durations must satisfy lease_duration > renew_deadline > retry_period > 0 "
                f"(got {self.lease_duration}, {self.renew_deadline}, {self.retry_period})"
            )
        return self
