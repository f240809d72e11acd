"""Documents the service keeps in its state directory (the served values, the live scorecards): JSON,
written atomically, read back only when their format version is the one this code writes."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class UnusableFile(Exception):
    """A state file that exists but cannot be used; the message says why."""


def write_atomically(path: Path, document: Mapping[str, Any]) -> None:
    """A crash mid-write leaves the previous file, never half of one."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(document), encoding="utf-8")
    os.replace(temporary, path)


def read_versioned(path: Path, version: int) -> dict[str, Any] | None:
    """The document at ``path``; None when there is no file, ``UnusableFile`` when it cannot be read,
    is not JSON, or is not a version ``version`` document."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise UnusableFile(f"unreadable: {error}") from None
    if not isinstance(document, dict) or document.get("version") != version:
        raise UnusableFile(f"not a version {version} document")
    return document


def read_versioned_list(path: Path, version: int, key: str) -> list[Any]:
    """The list under ``key`` of the version ``version`` document at ``path``; empty when there is no
    file, ``UnusableFile`` as :func:`read_versioned`, or when ``key`` does not hold a list."""
    document = read_versioned(path, version)
    if document is None:
        return []
    entries = document.get(key)
    if not isinstance(entries, list):
        raise UnusableFile(f"{key!r} is not a list")
    return entries
