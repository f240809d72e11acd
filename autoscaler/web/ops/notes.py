"""The forecast's notes in plain words for the page: repeats grouped, times as people read them.

The engine writes its notes for logs and the JSON API ("window 2026-11-20T02:00:00+00:00 (64 GPUs)
not identifiable in history; kept"). The page says the same to an operator: what happened, to which
scheduled runs, and what it means for the forecast. Notes of other shapes keep their words; their
times are made readable and repeats that differ only in their times become one line with a count.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape

SHOWN_NOTES = 3

# ISO 8601 times as notes carry them ("2026-11-20T02:00:00+00:00").
_TIME = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?(?:[+-]\d{2}:\d{2}|Z)?"
_NOTE_TIME = re.compile(_TIME)
_UNSEEN = re.compile(rf"window (?P<start>{_TIME}) \((?P<gpus>[^)]+) GPUs\) not identifiable in history; kept")
_REMOVED = re.compile(rf"removed (?P<gpus>\S+) GPUs of a known job from (?P<start>{_TIME}) to (?P<end>{_TIME})")


def readable_time(text: str) -> str:
    """``2026-11-20T02:00:00+00:00`` as ``2026-11-20 02:00 UTC`` (unchanged if it is not a time)."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return text
    if moment.tzinfo is None:
        return f"{moment:%Y-%m-%d %H:%M}"
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


@dataclass(frozen=True)
class _Kind:
    """A note shape the page words itself: how to say one of them, and how to say several."""

    pattern: re.Pattern[str]
    one: Callable[[re.Match[str]], str]
    several: Callable[[list[re.Match[str]]], str]


def _runs(matches: list[re.Match[str]]) -> str:
    first, last = readable_time(matches[0]["start"]), readable_time(matches[-1]["start"])
    return f"{len(matches)} scheduled runs of {matches[0]['gpus']} GPUs, the first at {first} and the last at {last},"


_KINDS = (
    _Kind(
        _UNSEEN,
        lambda m: (
            f"The scheduled run of {m['gpus']} GPUs at {readable_time(m['start'])} does not show in the "
            "observed history (demand rose by less than half of that), so nothing was taken out of the history "
            "for it before fitting."
        ),
        lambda ms: (
            f"{_runs(ms)} do not show in the observed history (demand rose by less than half of that "
            "during each), so nothing was taken out of the history for them before fitting."
        ),
    ),
    _Kind(
        _REMOVED,
        lambda m: (
            f"The scheduled run of {m['gpus']} GPUs from {readable_time(m['start'])} to "
            f"{readable_time(m['end'])} was taken out of the history before fitting, so the model does not learn "
            "it; the schedule adds its future runs on top of the forecast."
        ),
        lambda ms: (
            f"{_runs(ms)} were taken out of the history before fitting, so the model does not learn "
            "them; the schedule adds their future runs on top of the forecast."
        ),
    ),
)


OTHER = -1  # the group key of a note of no known shape


def plain_notes(notes: Sequence[str]) -> list[str]:
    """The notes as the page shows them, in the order each group first appears."""
    groups: dict[tuple[int, str], list[str]] = {}
    for note in notes:
        key = (OTHER, _NOTE_TIME.sub("…", note))
        for position, kind in enumerate(_KINDS):
            if found := kind.pattern.fullmatch(note):
                key = (position, found["gpus"])
                break
        groups.setdefault(key, []).append(note)
    return [_say(position, members) for (position, _), members in groups.items()]


def _say(position: int, members: list[str]) -> str:
    if position == OTHER:
        return _other(members)
    kind = _KINDS[position]
    matches = [found for note in members if (found := kind.pattern.fullmatch(note)) is not None]
    return kind.one(matches[0]) if len(matches) == 1 else kind.several(matches)


def _other(members: list[str]) -> str:
    """A note of no known shape: its own words, times readable; repeats as one line with a count."""
    first = _NOTE_TIME.sub(lambda found: readable_time(found.group(0)), members[0])
    if len(members) == 1:
        return first
    shape = _NOTE_TIME.sub("…", members[0])
    times = [time for note in members for time in _NOTE_TIME.findall(note)]
    span = f", from {readable_time(times[0])} to {readable_time(times[-1])}" if times else ""
    return f"{shape} ({len(members)} times{span})"


def notes_html(notes: Sequence[str]) -> str:
    """The notes as a list; past a few, the rest fold away (``<details>`` needs no script)."""
    if not notes:
        return ""
    items = [f"<li>{escape(note)}</li>" for note in plain_notes(notes)]
    shown = f'<ul class="notes">{"".join(items[:SHOWN_NOTES])}</ul>'
    if len(items) <= SHOWN_NOTES:
        return shown
    rest = len(items) - SHOWN_NOTES
    return f"{shown}<details><summary>{rest} more notes</summary><ul>{''.join(items[SHOWN_NOTES:])}</ul></details>"
