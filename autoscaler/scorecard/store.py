"""The live scorecards on disk (``scorecard.json`` in the state directory), written atomically as
``persistence`` writes the served values, so their minutes and counters carry on across a restart."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from autoscaler.state_files import UnusableFile, read_versioned, write_atomically

log = logging.getLogger(__name__)

FILE_NAME = "scorecard.json"
FORMAT_VERSION = 1


def save(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, {"version": FORMAT_VERSION, **document})


def load(path: Path) -> dict[str, Any] | None:
    """The saved document; None (and a logged error naming the file and the fault) when unusable."""
    try:
        return read_versioned(path, FORMAT_VERSION)
    except UnusableFile as problem:
        log.error("scorecard: ignoring %s (the scorecard starts empty): %s", path, problem)
        return None
