"""Service settings: one YAML file, validated at start-up, with environment overrides.

Environment variables ``GPU_AUTOSCALER_<SECTION>__<FIELD>`` override the file, e.g.
``GPU_AUTOSCALER_SERVER__SECURE_PORT=7443``. Values are parsed as YAML scalars, so lists and
numbers work (``GPU_AUTOSCALER_AUTH__ALLOWED_NAMES='[front-proxy-client]'``).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from autoscaler.durations import parse_duration
from autoscaler.selectors import SelectorError, parse_selector, validate_key, validate_value

ENV_PREFIX = "GPU_AUTOSCALER_"
ENV_NESTING = "__"

Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


class SettingsError(Exception):
    """Settings that cannot be used; the message names each field path, value and expectation."""


class _Strict(BaseModel):
    # Unknown keys are typos far more often than intent: refuse them, naming the key.
    model_config = ConfigDict(extra="forbid", frozen=True)


class TLSSettings(_Strict):
    cert_file: Path | None = None
    key_file: Path | None = None
    # How often the files are checked for rotation.
    reload_interval: Duration = timedelta(seconds=10)

    @model_validator(mode="after")
    def _both_or_neither(self) -> TLSSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file must be given together")
        return self


class ServerSettings(_Strict):
    bind_address: str = "0.0.0.0"  # noqa: S104 - in-cluster the service must listen on the pod IP
    secure_port: int = Field(default=6443, ge=0, le=65535)  # 0: any free port (tests)
    # None switches the plain port off; 0 picks any free port (tests).
    http_port: int | None = Field(default=8080, ge=0, le=65535)
    tls: TLSSettings = TLSSettings()
    shutdown_grace: Duration = timedelta(seconds=10)

    @model_validator(mode="after")
    def _ports_differ(self) -> ServerSettings:
        if self.http_port and self.secure_port and self.http_port == self.secure_port:
            raise ValueError("secure_port and http_port must differ")
        return self

    @property
    def is_loopback(self) -> bool:
        if self.bind_address == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.bind_address).is_loopback
        except ValueError:
            return False


class AuthSettings(_Strict):
    """How callers are authenticated and authorised (DESIGN.md section 4)."""

    # kubernetes: request-header config from the extension-apiserver-authentication ConfigMap,
    #   TokenReview for bearer tokens, SubjectAccessReview for authorisation.
    # files: CAs and allowed names from the fields below.
    # none: no authentication at all; refused unless bound to a loopback address.
    mode: Literal["kubernetes", "files", "none"] = "kubernetes"
    requestheader_client_ca_file: Path | None = None
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_headers_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)
    client_ca_file: Path | None = None
    # In "files" mode: ask the Kubernetes API (SubjectAccessReview) or allow any authenticated caller.
    authorization: Literal["kubernetes", "allow-authenticated"] = "kubernetes"
    authorization_cache_ttl: Duration = timedelta(seconds=10)
    token_cache_ttl: Duration = timedelta(seconds=10)

    @model_validator(mode="after")
    def _files_need_a_ca(self) -> AuthSettings:
        if self.mode == "files" and self.requestheader_client_ca_file is None and self.client_ca_file is None:
            raise ValueError("mode 'files' needs requestheader_client_ca_file or client_ca_file")
        return self


class KubernetesSettings(_Strict):
    # Empty: in-cluster configuration, else the kubeconfig at this path.
    kubeconfig: Path | None = None
    request_timeout: Duration = timedelta(seconds=10)


class SeriesSettings(_Strict):
    """One served series: a metric name with its labels and, optionally, a namespace it belongs to."""

    labels: dict[str, str] = {}
    namespace: str | None = None

    @model_validator(mode="after")
    def _labels_are_valid(self) -> SeriesSettings:
        for key, value in self.labels.items():
            try:
                validate_key(key)
                validate_value(value)
            except SelectorError as error:
                raise ValueError(str(error)) from None
        return self


class DemoSettings(_Strict):
    enabled: bool = False
    # Simulated minutes per real second: 1.0 replays the trace in real time.
    speed: float = Field(default=1.0, gt=0, le=10_000)


class Settings(_Strict):
    server: ServerSettings = ServerSettings()
    auth: AuthSettings = AuthSettings()
    kubernetes: KubernetesSettings = KubernetesSettings()
    demo: DemoSettings = DemoSettings()
    state_dir: Path = Path(".gpu-autoscaler")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = "text"

    @model_validator(mode="after")
    def _auth_none_only_on_loopback(self) -> Settings:
        if self.auth.mode == "none" and not self.server.is_loopback:
            raise ValueError(
                f"auth.mode 'none' is only allowed when server.bind_address is a loopback address; "
                f"it is {self.server.bind_address!r}"
            )
        return self


def _set_path(target: dict[str, Any], path: list[str], value: Any) -> None:
    for part in path[:-1]:
        existing = target.get(part)
        if not isinstance(existing, dict):
            existing = {}
            target[part] = existing
        target = existing
    target[path[-1]] = value


def apply_env_overrides(raw: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    merged: dict[str, Any] = dict(raw)
    for name, text in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        path = [part.lower() for part in name[len(ENV_PREFIX) :].split(ENV_NESTING)]
        if not all(path):
            continue
        try:
            value = yaml.safe_load(text) if text else ""
        except yaml.YAMLError:
            value = text
        _set_path(merged, path, value)
    return merged


def _describe(errors: ValidationError, source: str) -> str:
    lines = [f"invalid settings in {source}:"]
    for error in errors.errors():
        path = ".".join(str(part) for part in error["loc"]) or "(top level)"
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown field"
        value = error.get("input")
        shown = repr(value) if not isinstance(value, dict) else "{...}"
        if len(shown) > 80:
            shown = shown[:77] + "..."
        lines.append(f"  {path}: {message} (got {shown})")
    return "\n".join(lines)


def load_settings(
    path: Path | None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Read, merge (file < environment < command-line ``overrides``) and validate the settings."""
    environ = os.environ if environ is None else environ
    raw: Any = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise SettingsError(f"cannot read settings file {path}: {error.strerror or error}") from None
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            problem = getattr(error, "problem", None) or str(error)
            raise SettingsError(f"settings file {path} is not valid YAML{where}: {problem}") from None
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise SettingsError(f"settings file {path} must hold a mapping at the top, got {type(raw).__name__}")
    merged = apply_env_overrides(raw, environ)
    for dotted, value in (overrides or {}).items():
        if value is not None:
            _set_path(merged, dotted.split("."), value)
    try:
        return Settings.model_validate(merged)
    except ValidationError as errors:
        raise SettingsError(_describe(errors, source)) from None


def demo_settings(state_dir: Path | None = None) -> Settings:
    """The demo: loopback only, authentication by the demo CA's client certificates."""
    base: dict[str, Any] = {
        "server": {"bind_address": "127.0.0.1"},
        "auth": {"mode": "files", "authorization": "allow-authenticated", "client_ca_file": "ca.crt"},
        "demo": {"enabled": True},
    }
    if state_dir is not None:
        base["state_dir"] = str(state_dir)
    return Settings.model_validate(base)


__all__ = ["Settings", "SettingsError", "demo_settings", "load_settings", "parse_selector"]
