"""Documents the service keeps in its state directory (the served values, the live scorecards, the
targets' records, the lead-time samples, the DRA-claimed GPUs): JSON, written durably, read back
only when their format version is the one this code writes.

What a restore reads is input from outside (a disk, a clock that was wrong, a hand that edited it),
so the rules every store applies live here, once:

- :func:`not_in_the_future` (:func:`in_the_future`): a saved time later than now plus
  :data:`CLOCK_SKEW_S` is refused (it would be served as fresh, or would refuse every newer
  sample, until that time came);
- :class:`Dropped`: each entry a restore leaves out is named in a warning (the file, the entry, the
  reason), at most :data:`DROPPED_LINES` per :data:`DROPPED_INTERVAL_S` per file, the rest counted;
- :func:`write_atomically` and :func:`remove_stale_temporaries`: a kill or a power cut leaves the
  previous file or the new one, and no temporary file past the next start.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autoscaler.throttled_log import ThrottledLog

log = logging.getLogger(__name__)

# How far ahead of this clock a saved time may be: a peer's clock a little ahead, not a year.
CLOCK_SKEW_S = 60.0
# Lines naming dropped entries, per file restored, per interval; the rest are counted.
DROPPED_LINES = 10
DROPPED_INTERVAL_S = 10.0
# How much of an entry's name or of a reason a line echoes: the file may hold anything.
ECHO_CHARS = 512
# ".targets.json.k3j_a9x2.tmp": this module's temporary files (mkstemp's random part), and
# "targets.json.tmp", the one name versions before it used.
_TEMPORARY = re.compile(r"^(\.[^/]+\.[a-z0-9_]{8}\.tmp|[^./][^/]*\.json\.tmp)$")


class UnusableFile(Exception):
    """A state file that exists but cannot be used; the message says why."""


def in_the_future(at_s: float, now_s: float) -> bool:
    """Whether a saved time (seconds since the epoch) is later than ``now_s`` plus :data:`CLOCK_SKEW_S`."""
    return at_s > now_s + CLOCK_SKEW_S


def not_in_the_future(at_s: float, now_s: float, field: str, written: object = None) -> float:
    """``at_s`` when it is not :func:`in_the_future`; else a ``ValueError`` naming ``field`` (and the
    value as ``written``, else as a time)."""
    if not in_the_future(at_s, now_s):
        return at_s
    shown = written if written is not None else _as_time(at_s)
    raise ValueError(
        f"{field} {_echo(shown)} is {at_s - now_s:.0f} s in the future (a clock ahead when it was saved?); "
        f"at most {CLOCK_SKEW_S:.0f} s of skew is accepted"
    )


def _as_time(at_s: float) -> str:
    try:
        return f"{at_s:.0f} ({datetime.fromtimestamp(at_s, UTC):%Y-%m-%dT%H:%M:%SZ})"
    except (OverflowError, ValueError, OSError):  # beyond what a datetime holds
        return f"{at_s:g}"


def _echo(value: object) -> str:
    text = str(value)
    return text if len(text) <= ECHO_CHARS else f"{text[:ECHO_CHARS]}... ({len(text)} characters)"


class Dropped:
    """The entries one restore of ``path`` leaves out, each named in a warning of ``logger``: at most
    :data:`DROPPED_LINES` lines per :data:`DROPPED_INTERVAL_S`, then :meth:`done` counts the rest."""

    def __init__(self, path: Path, logger: logging.Logger, consequence: str = "") -> None:
        self.path = path
        self.count = 0
        self._logger = logger
        self._consequence = f"; {consequence}" if consequence else ""
        self._lines = ThrottledLog(logger, DROPPED_INTERVAL_S, burst=DROPPED_LINES)

    def drop(self, entry: str, reason: object) -> None:
        """``entry`` (which one: "tuner 3", "pool a100") is left out because of ``reason``."""
        self.count += 1
        self._lines.warning("%s: dropped %s: %s%s", self.path, _echo(entry), _echo(reason), self._consequence)

    def done(self) -> None:
        """The count of entries dropped but not named, if any were."""
        if self._lines.left_out:
            self._logger.warning(
                "%s: dropped %d entries in all, %d of them not named above (at most %d lines per %.0f s)",
                self.path, self.count, self._lines.left_out, DROPPED_LINES, DROPPED_INTERVAL_S,
            )  # fmt: skip


def write_atomically(path: Path, document: Mapping[str, Any]) -> None:
    """A crash mid-write (a kill, a power cut) leaves the previous file or the new one, never half of
    one: a temporary file of its own name in the same directory, flushed to disk, renamed over
    ``path``, and the rename flushed too. A failed write removes its temporary file."""
    data = json.dumps(document).encode("utf-8")
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    """The rename on disk, not only in the page cache (POSIX: fsync the directory)."""
    descriptor = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def remove_stale_temporaries(directory: Path) -> list[Path]:
    """Remove the temporary files :func:`write_atomically` left in ``directory`` when a process was
    killed mid-write (only files of its naming pattern); the paths removed, each logged."""
    removed: list[Path] = []
    try:
        candidates = [entry for entry in directory.iterdir() if _TEMPORARY.match(entry.name)]
    except FileNotFoundError:
        return removed
    for candidate in candidates:
        try:
            if candidate.is_file() and not candidate.is_symlink():
                candidate.unlink()
                removed.append(candidate)
                log.warning("removed %s, a temporary file a write interrupted before this start left", candidate)
        except OSError as error:
            log.warning("could not remove the stale temporary file %s: %s", candidate, error)
    return removed


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
