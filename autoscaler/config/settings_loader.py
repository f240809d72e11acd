"""Reading the settings: one YAML file, environment overrides, and errors that name each field.

Environment variables ``GPU_AUTOSCALER_<SECTION>__<FIELD>`` override the file, e.g.
``GPU_AUTOSCALER_SERVER__SECURE_PORT=7443``. Values are parsed as YAML scalars, so lists and
numbers work (``GPU_AUTOSCALER_AUTH__ALLOWED_NAMES='[front-proxy-client]'``).

Numbers are YAML 1.2's (decimal ints, decimal floats, ``.inf``, ``.nan``), not YAML 1.1's, which
PyYAML reads by default: ``1_000``, ``1:30`` (base 60: 90), ``010`` (octal: 8) and ``0x1f`` stay text,
which a number field refuses naming the field (``quantity.Number``, ``quantity.Count``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from autoscaler.config.settings import Settings
from autoscaler.echoes import echo

ENV_PREFIX = "GPU_AUTOSCALER_"
# A value an error quotes is cut here: the field and the expectation say what is wrong.
SHOWN_VALUE_BYTES = 80
ENV_NESTING = "__"


_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"


class _SettingsLoader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's core-schema numbers instead of YAML 1.1's."""


_SettingsLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag not in (_INT, _FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_SettingsLoader.add_implicit_resolver(_INT, re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
_SettingsLoader.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def _decimal_int(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    """The resolver lets only decimal digits through: base 10 ("010" is 10, as in YAML 1.2)."""
    assert isinstance(node, yaml.ScalarNode)  # noqa: S101 - the int tag resolves scalars only
    return int(loader.construct_scalar(node))


_SettingsLoader.add_constructor(_INT, _decimal_int)


def read_yaml(text: str) -> Any:
    """``text`` as YAML, numbers as YAML 1.2 reads them (module docstring)."""
    return yaml.load(text, Loader=_SettingsLoader)  # noqa: S506 - a SafeLoader with other number resolvers


class SettingsError(Exception):
    """Settings that cannot be used; the message names each field path, value and expectation."""


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
            value = read_yaml(text) if text else ""
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
        shown = echo(repr(value), SHOWN_VALUE_BYTES) if not isinstance(value, dict) else "{...}"
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
            raw = read_yaml(text)
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
