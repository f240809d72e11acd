"""The live scorecards on disk (``scorecard.json`` in the state directory), written atomically as
``persistence`` writes the served values, so their minutes and counters carry on across a restart."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FILE_NAME = "scorecard.json"
FORMAT_VERSION = 1


def save(path: Path, document: dict[str, Any]) -> None:
    """Write atomically: a crash mid-write leaves the previous file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps({"version": FORMAT_VERSION, **document}), encoding="utf-8")
    os.replace(temporary, path)


def load(path: Path) -> dict[str, Any] | None:
    """The saved document; None (and a logged error naming the file and the fault) when unusable."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        log.error("scorecard: ignoring unreadable %s (the scorecard starts empty): %s", path, error)
        return None
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
        log.error("scorecard: ignoring %s: not a version %d scorecard document", path, FORMAT_VERSION)
        return None
    return document
