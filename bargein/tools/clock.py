"""The clock tools: the time and date in a place, and facts about a calendar date.

Both take ``now`` from the caller (a function returning an aware UTC datetime), so they are
deterministic under test and the server uses the real clock.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from bargein.tools.places import zone_for
from bargein.tools.quoting import quoted

Clock = Callable[[], dt.datetime]


def utc_now() -> dt.datetime:
    """The current time, aware, in UTC."""
    return dt.datetime.now(dt.UTC)


def _offset(moment: dt.datetime) -> str:
    delta = moment.utcoffset() or dt.timedelta(0)
    minutes = int(delta.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    hours, rest = divmod(abs(minutes), 60)
    return f"UTC{sign}{hours:02d}:{rest:02d}"


def time_in_place(place: str, now: Clock = utc_now) -> str:
    """A sentence with the local time, date, weekday and time zone of ``place``."""
    name, zone = zone_for(place or "UTC")
    local = now().astimezone(zone)
    return (f"In {name} it is {local:%H:%M} ({local:%I:%M %p}) on {local:%A} {local.day} {local:%B %Y}; "
            f"time zone {zone.key}, {_offset(local)}"
            f"{', daylight saving time' if local.dst() else ''}.")


def about_date(date: str, now: Clock = utc_now) -> str:
    """The weekday of an ISO date (YYYY-MM-DD) and how many days it lies from today (UTC)."""
    try:
        day = dt.date.fromisoformat(date.strip())
    except ValueError:
        raise ValueError(f"{quoted(date)} is not a date written as YYYY-MM-DD") from None
    today = now().date()
    days = (day - today).days
    if days == 0:
        relation = "that is today"
    elif days > 0:
        relation = f"that is in {days} day{'s' if days != 1 else ''}"
    else:
        relation = f"that was {-days} day{'s' if days != -1 else ''} ago"
    return f"{day:%A} {day.day} {day:%B %Y}: {relation} (today is {today:%A} {today.day} {today:%B %Y})."
