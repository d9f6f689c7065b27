"""Where places are in time: a small offline table of cities and countries to IANA time zones.

Only the places people most often ask about; anything else may still be named as an IANA zone
("Europe/Lisbon") or as "UTC". For a country spanning several zones the table holds its capital's.
"""

from __future__ import annotations

from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from bargein.tools.quoting import quoted

MAX_PLACE_CHARS = 100
"""Longer place names are refused unread: the longest name here, or an IANA zone's, is a third of that."""

_ZONES: dict[str, tuple[str, ...]] = {
    "Africa/Cairo": ("cairo", "egypt"),
    "Africa/Johannesburg": ("johannesburg", "cape town", "pretoria", "south africa"),
    "Africa/Lagos": ("lagos", "abuja", "nigeria"),
    "Africa/Nairobi": ("nairobi", "kenya", "addis ababa", "ethiopia"),
    "Africa/Casablanca": ("casablanca", "rabat", "morocco"),
    "America/New_York": ("new york", "nyc", "boston", "washington", "washington dc", "miami", "atlanta",
                         "philadelphia", "toronto", "montreal", "detroit", "eastern time"),
    "America/Chicago": ("chicago", "houston", "dallas", "austin", "new orleans", "minneapolis",
                        "central time"),
    "America/Denver": ("denver", "salt lake city", "mountain time"),
    "America/Phoenix": ("phoenix", "arizona"),
    "America/Los_Angeles": ("los angeles", "la", "san francisco", "seattle", "portland", "las vegas",
                            "san diego", "vancouver", "pacific time", "california"),
    "America/Anchorage": ("anchorage", "alaska"),
    "Pacific/Honolulu": ("honolulu", "hawaii"),
    "America/Mexico_City": ("mexico city", "mexico"),
    "America/Bogota": ("bogota", "colombia"),
    "America/Lima": ("lima", "peru"),
    "America/Sao_Paulo": ("sao paulo", "são paulo", "rio de janeiro", "rio", "brasilia", "brazil"),
    "America/Argentina/Buenos_Aires": ("buenos aires", "argentina"),
    "America/Santiago": ("santiago", "chile"),
    "America/Halifax": ("halifax", "nova scotia"),
    "America/St_Johns": ("st johns", "newfoundland"),
    "Asia/Tokyo": ("tokyo", "osaka", "kyoto", "japan"),
    "Asia/Seoul": ("seoul", "south korea", "korea"),
    "Asia/Shanghai": ("beijing", "shanghai", "shenzhen", "guangzhou", "china"),
    "Asia/Hong_Kong": ("hong kong",),
    "Asia/Taipei": ("taipei", "taiwan"),
    "Asia/Singapore": ("singapore",),
    "Asia/Kuala_Lumpur": ("kuala lumpur", "malaysia"),
    "Asia/Bangkok": ("bangkok", "thailand", "hanoi", "vietnam"),
    "Asia/Jakarta": ("jakarta", "indonesia"),
    "Asia/Manila": ("manila", "philippines"),
    "Asia/Kolkata": ("delhi", "new delhi", "mumbai", "bombay", "bangalore", "bengaluru", "kolkata",
                     "chennai", "hyderabad", "india"),
    "Asia/Karachi": ("karachi", "lahore", "islamabad", "pakistan"),
    "Asia/Dhaka": ("dhaka", "bangladesh"),
    "Asia/Kathmandu": ("kathmandu", "nepal"),
    "Asia/Dubai": ("dubai", "abu dhabi", "united arab emirates", "uae"),
    "Asia/Riyadh": ("riyadh", "saudi arabia"),
    "Asia/Tehran": ("tehran", "iran"),
    "Asia/Jerusalem": ("jerusalem", "tel aviv", "israel"),
    "Europe/Istanbul": ("istanbul", "ankara", "turkey"),
    "Europe/London": ("london", "manchester", "edinburgh", "uk", "united kingdom", "england", "scotland",
                      "britain"),
    "Europe/Dublin": ("dublin", "ireland"),
    "Europe/Lisbon": ("lisbon", "porto", "portugal"),
    "Europe/Madrid": ("madrid", "barcelona", "spain"),
    "Europe/Paris": ("paris", "lyon", "marseille", "france"),
    "Europe/Brussels": ("brussels", "belgium"),
    "Europe/Amsterdam": ("amsterdam", "rotterdam", "netherlands", "holland"),
    "Europe/Berlin": ("berlin", "munich", "hamburg", "frankfurt", "germany"),
    "Europe/Zurich": ("zurich", "geneva", "switzerland"),
    "Europe/Vienna": ("vienna", "austria"),
    "Europe/Rome": ("rome", "milan", "italy"),
    "Europe/Copenhagen": ("copenhagen", "denmark"),
    "Europe/Oslo": ("oslo", "norway"),
    "Europe/Stockholm": ("stockholm", "sweden"),
    "Europe/Helsinki": ("helsinki", "finland"),
    "Europe/Warsaw": ("warsaw", "poland"),
    "Europe/Prague": ("prague", "czech republic", "czechia"),
    "Europe/Budapest": ("budapest", "hungary"),
    "Europe/Athens": ("athens", "greece"),
    "Europe/Kyiv": ("kyiv", "kiev", "ukraine"),
    "Europe/Moscow": ("moscow", "saint petersburg", "st petersburg", "russia"),
    "Australia/Sydney": ("sydney", "canberra", "australia"),
    "Australia/Melbourne": ("melbourne",),
    "Australia/Brisbane": ("brisbane",),
    "Australia/Perth": ("perth",),
    "Australia/Adelaide": ("adelaide",),
    "Pacific/Auckland": ("auckland", "wellington", "new zealand"),
    "Atlantic/Reykjavik": ("reykjavik", "iceland"),
    "UTC": ("utc", "gmt", "coordinated universal time", "greenwich"),
}
_BY_NAME: dict[str, str] = {name: zone for zone, names in _ZONES.items() for name in names}
_MOST_WORDS = max(len(name.split(" ")) for name in _BY_NAME)
"""No name in the table has more words: longer leading parts of a place need not be looked up."""


@lru_cache(maxsize=1)
def _iana_names() -> frozenset[str]:
    return frozenset(available_timezones())


class UnknownPlace(LookupError):
    """The place is neither in the table nor an IANA time zone name."""


def _key(place: str) -> str:
    cleaned = place.strip().lower().replace(".", "").replace(",", " ")
    return " ".join(cleaned.split())


def zone_for(place: str) -> tuple[str, ZoneInfo]:
    """The display name and time zone of ``place`` (a city, a country, or an IANA name)."""
    if len(place) > MAX_PLACE_CHARS:
        raise UnknownPlace(f"the place {quoted(place)} is longer than {MAX_PLACE_CHARS} characters; name a city, "
                           "a country or an IANA time zone")
    key = _key(place)
    zone_name = _BY_NAME.get(key)
    if zone_name is None:  # "Paris, France" or "Tokyo Japan": try the first word(s) alone, longest first
        words = key.split(" ", _MOST_WORDS)  # only as many leading words as a name in the table can have
        zone_name = next((_BY_NAME[" ".join(words[:n])] for n in range(min(len(words) - 1, _MOST_WORDS), 0, -1)
                          if " ".join(words[:n]) in _BY_NAME), None)
    if zone_name is None:
        candidate = place.strip().replace(" ", "_")
        if candidate in _iana_names():
            zone_name = candidate
    if zone_name is None:
        raise UnknownPlace(f"I don't know the time zone of {quoted(place)}; name a large city or an IANA "
                           "time zone such as Europe/Lisbon")
    try:
        return place.strip().title() if key in _BY_NAME else zone_name, ZoneInfo(zone_name)
    except ZoneInfoNotFoundError as error:  # a system without tz data and without the tzdata package
        raise UnknownPlace(f"time zone data for {zone_name} is not installed") from error
