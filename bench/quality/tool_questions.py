"""Questions the embedded model gets wrong on its own (time zones, the clock, dates, arithmetic, units),
each with a check of the reply computed independently of bargein's tools.

Held out: none of these was used to write the tools' descriptions or the prompts (those were tried on
other questions). The expected values are computed when the question is asked, from Python's own
``zoneinfo`` / ``datetime`` / arithmetic, not by calling the tools.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from zoneinfo import ZoneInfo


@dataclass(frozen=True)
class ToolQuestion:
    """A question and the strings of which a correct spoken reply contains at least one."""

    text: str
    accepted: Callable[[dt.datetime], list[str]]


def _clock(zone: str) -> Callable[[dt.datetime], list[str]]:
    def accepted(now: dt.datetime) -> list[str]:
        forms: list[str] = []
        for minutes in range(-2, 3):
            local = (now + dt.timedelta(minutes=minutes)).astimezone(ZoneInfo(zone))
            forms += [f"{local:%H:%M}", f"{local.hour % 12 or 12}:{local:%M}"]
        return forms
    return accepted


def _weekday(zone: str) -> Callable[[dt.datetime], list[str]]:
    return lambda now: [f"{now.astimezone(ZoneInfo(zone)):%A}"]


def _offset(zone: str, *names: str) -> Callable[[dt.datetime], list[str]]:
    def accepted(now: dt.datetime) -> list[str]:
        delta = now.astimezone(ZoneInfo(zone)).utcoffset() or dt.timedelta(0)
        hours = int(delta.total_seconds() // 3600)
        return [f"UTC{hours:+d}", f"UTC{hours:+03d}", f"GMT{hours:+d}", zone, *names]
    return accepted


def _days_until(month: int, day: int) -> Callable[[dt.datetime], list[str]]:
    def accepted(now: dt.datetime) -> list[str]:
        today = now.date()
        target = dt.date(today.year, month, day)
        if target < today:
            target = dt.date(today.year + 1, month, day)
        return [str((target - today).days)]
    return accepted


def _fixed(*values: str) -> Callable[[dt.datetime], list[str]]:
    return lambda now: list(values)


TOOL_QUESTIONS: tuple[ToolQuestion, ...] = (
    ToolQuestion("What time zone is Sydney in?", _offset("Australia/Sydney", "AEDT", "Australian Eastern")),
    ToolQuestion("Which time zone is Chicago in?", _offset("America/Chicago", "Central", "CST")),
    ToolQuestion("What time is it in London right now?", _clock("Europe/London")),
    ToolQuestion("What's the time in Los Angeles?", _clock("America/Los_Angeles")),
    ToolQuestion("What day of the week is it in New York today?", _weekday("America/New_York")),
    ToolQuestion("How many days is it until New Year's Day?", _days_until(1, 1)),
    ToolQuestion("What day of the week is the fourth of July, 2027?", _fixed("Sunday")),
    ToolQuestion("What is 48 times 12?", _fixed("576")),
    ToolQuestion("What's 15 percent of 240?", _fixed("36")),
    ToolQuestion("What is 1234 plus 5678?", _fixed("6912")),
    ToolQuestion("What's the square root of 144?", _fixed("12")),
    ToolQuestion("How many seconds are there in a day?", _fixed("86400")),
    ToolQuestion("How many kilograms is 150 pounds?", _fixed("68", "68.04", "68.0")),
    ToolQuestion("What's 30 degrees Celsius in Fahrenheit?", _fixed("86")),
    ToolQuestion("How many feet are in 100 metres?", _fixed("328", "328.1", "328.08")),
)


TUNING_QUESTIONS: tuple[ToolQuestion, ...] = (
    ToolQuestion("What time is it in Tokyo?", _clock("Asia/Tokyo")),
    ToolQuestion("What time zone is Tokyo in?", _offset("Asia/Tokyo", "JST", "Japan Standard")),
    ToolQuestion("What time zone is Denver in?", _offset("America/Denver", "Mountain", "MST")),
    ToolQuestion("What's the date today in Berlin?", lambda now: [f"{now.astimezone(ZoneInfo('Europe/Berlin')).day}"]),
    ToolQuestion("How many minutes are in three and a half hours?", _fixed("210")),
    ToolQuestion("What is 17 times 23?", _fixed("391")),
    ToolQuestion("What is 250 divided by 8?", _fixed("31.25")),
    ToolQuestion("Convert 5 miles to kilometres.", _fixed("8.047", "8.05")),
    ToolQuestion("How many centimetres are in 5 feet?", _fixed("152.4")),
    ToolQuestion("What's 20 miles per hour in kilometres per hour?", _fixed("32.19", "32.2", "32.187")),
    ToolQuestion("What day of the week was the first of January 2000?", _fixed("Saturday")),
)
"""Questions the prompts and tool descriptions were tried on while they were written (not for scoring)."""


def is_correct(reply: str, accepted: list[str]) -> bool:
    """True when one accepted answer appears in ``reply`` as a whole number or word (commas in numbers ignored)."""
    text = re.sub(r"(?<=\d),(?=\d{3})", "", reply)
    return any(re.search(rf"(?<![\w.]){re.escape(answer)}(?![\w]|\.\d)", text, re.IGNORECASE)
               for answer in accepted)
