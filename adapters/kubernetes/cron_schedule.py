"""When Kubernetes starts a CronJob: fire times of a cron schedule in a time zone.

Fire times follow the Kubernetes CronJob controller (robfig/cron), which differs from Debian cron at
daylight-saving changes: a wall-clock time that does not exist that day (02:30 when clocks spring
forward) is skipped, and one that exists twice (02:30 when clocks fall back) fires twice. cronsim
(Debian semantics when given a time zone) is therefore run on naive wall-clock times, and each time
is mapped to the instants it denotes in the CronJob's zone: none, one or two.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from adapters.types import AdapterError

# The descriptors robfig/cron's ParseStandard accepts (and so does the Kubernetes API), in 5 fields.
CRON_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

# A fixed wall-clock time can map to an instant this far from the naive reading (DST shifts are at
# most 2 h, in Antarctica/Troll); iteration starts and stops this much beyond the wanted interval.
_DST_MARGIN = timedelta(hours=3)


class CronScheduleError(AdapterError):
    """A schedule, time zone or CronJob that cannot be evaluated (the CronJob is skipped)."""


def _split_schedule(schedule: str) -> tuple[str, str | None]:
    """(5-field expression, time zone from a CRON_TZ=/TZ= prefix or None)."""
    text = schedule.strip()
    zone = None
    if text.startswith(("CRON_TZ=", "TZ=")):
        prefix, _, text = text.partition(" ")
        zone = prefix.split("=", 1)[1]
        text = text.strip()
    if text.startswith("@"):
        if text not in CRON_MACROS:
            # @every <duration> fires relative to the controller's last run, which is not predictable here.
            raise CronScheduleError(f"unsupported schedule descriptor {text!r}")
        text = CRON_MACROS[text]
    fields = text.split()
    if len(fields) != 5:
        raise CronScheduleError(f"a CronJob schedule has 5 fields, not {len(fields)}: {schedule!r}")
    # robfig/cron accepts "?" for "no specific value" in the day fields; cronsim wants "*".
    return " ".join("*" if f == "?" else f for f in fields), zone


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise CronScheduleError(f"unknown time zone {name!r}") from exc


def _instants(wall: datetime, zone: ZoneInfo) -> list[datetime]:
    """The UTC instants a naive wall-clock time denotes in ``zone``: 0 (skipped), 1, or 2 (repeated)."""
    found = []
    for fold in (0, 1):
        instant = wall.replace(tzinfo=zone, fold=fold).astimezone(UTC)
        if instant.astimezone(zone).replace(tzinfo=None) == wall and instant not in found:
            found.append(instant)
    return sorted(found)


def fire_times(schedule: str, timezone: str, start: datetime, end: datetime, *, limit: int = 10_000) -> list[datetime]:
    """UTC instants in ``[start, end)`` at which Kubernetes would start a CronJob with this schedule.

    ``timezone`` is an IANA name; a CRON_TZ=/TZ= prefix in the schedule (accepted by old clusters)
    wins. Raises ``CronScheduleError`` for a schedule or zone that cannot be evaluated.
    """
    if start.tzinfo is None or end.tzinfo is None:
        raise ValueError("start and end must be timezone-aware")
    expression, prefix_zone = _split_schedule(schedule)
    zone = _zone(prefix_zone or timezone)
    wall_start = start.astimezone(zone).replace(tzinfo=None) - _DST_MARGIN
    wall_end = end.astimezone(zone).replace(tzinfo=None) + _DST_MARGIN
    try:
        walls: Iterator[datetime] = CronSim(expression, wall_start)
        found: list[datetime] = []
        for wall in walls:
            if wall >= wall_end or len(found) >= limit:
                break
            found.extend(t for t in _instants(wall, zone) if start <= t < end)
    except CronSimError as exc:
        raise CronScheduleError(f"invalid schedule {schedule!r}: {exc}") from exc
    return sorted(found)[:limit]
