"""Built-in tools given huge or odd arguments (a model stuck in a loop, a hostile client's conversation items):
the work stays bounded, the error output quotes only the start of what was written, and nothing raises.

Two of these guard against work that grows faster than the input; they use inputs the old code took far
longer on (noted at each) and take milliseconds now, so a regression shows as a hung test, not a flaky one.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from bargein.tools import places
from bargein.tools.arguments import ArgumentError, parse_arguments
from bargein.tools.places import UnknownPlace, zone_for
from bargein.tools.quoting import MAX_QUOTED_CHARS, quoted
from bargein.tools.registry import default_registry

LONG = "Zanzibar " * 900  # 8100 characters: under the registry's argument limit once written as JSON


class _CountingTable(dict[str, str]):
    """The place table, counting its look-ups."""

    lookups = 0

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.lookups += 1
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.lookups += 1
        return super().__contains__(key)


def test_a_place_of_many_words_costs_a_few_lookups_not_one_per_word(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _CountingTable(places._BY_NAME)
    monkeypatch.setattr(places, "_BY_NAME", table)
    many_words = "x " * 49 + "x"  # 50 words, within the length limit
    with pytest.raises(UnknownPlace):
        zone_for(many_words)
    assert table.lookups <= places._MOST_WORDS + 1  # the whole key, then its leading 3, 2, 1 words
    assert zone_for("Paris, France, Europe, Earth")[1].key == "Europe/Paris"  # leading words still found
    assert zone_for("Coordinated Universal Time please")[1].key == "UTC"  # the longest name, as a prefix


def test_an_overlong_place_is_refused_unread_and_quoted_short() -> None:
    # the old lookup tried every leading run of words: about half an hour for these 500,000 words
    with pytest.raises(UnknownPlace) as refused:
        zone_for("a " * 500_000)
    assert len(str(refused.value)) < 250
    name, zone = zone_for("  " + "Tokyo" + " " * 60)  # padding within the limit still reads
    assert (name, zone.key) == ("Tokyo", "Asia/Tokyo")


@pytest.mark.parametrize(("tool", "arguments"), [
    ("get_current_time", {"place": LONG[:99]}),
    ("get_current_time", {"place": LONG}),
    ("about_date", {"date": LONG}),
    ("calculate", {"expression": LONG[:190]}),
    ("convert_units", {"value": 1, "from_unit": LONG, "to_unit": "km"}),
    ("convert_units", {"value": 1, "from_unit": "km", "to_unit": LONG}),
    ("convert_units", {"value": 1, "from_unit": LONG, "to_unit": "celsius"}),
    ("convert_units", {"value": LONG, "from_unit": "km", "to_unit": "m"}),
    (LONG[:4000].replace(" ", "_"), {}),
])
def test_an_error_output_quotes_only_the_start_of_a_long_argument(tool: str, arguments: dict[str, Any]) -> None:
    outcome = default_registry().run(tool, json.dumps(arguments))
    assert not outcome.ok
    error = json.loads(outcome.output)["error"]
    assert len(error) < 3 * MAX_QUOTED_CHARS + 120, error  # the quoted part, twice at most, and the sentence
    assert "Zanzibar" in error or "characters" in error  # still says what was wrong


def test_quoting_cuts_long_values_and_leaves_short_ones() -> None:
    assert quoted("Paris") == "'Paris'"
    assert quoted("x" * 1000) == repr("x" * MAX_QUOTED_CHARS) + "…"
    assert quoted(list(range(1000))).endswith("…") and len(quoted(list(range(1000)))) == MAX_QUOTED_CHARS + 1


def test_a_fence_followed_by_thousands_of_newlines_is_read_at_once() -> None:
    # the old fence pattern backtracked in cubic time: about a minute for these 4,000 characters
    with pytest.raises(ArgumentError) as refused:
        parse_arguments("```" + "\n" * 4000 + "x")
    assert len(str(refused.value)) < 200
    assert parse_arguments('```json\n{"place": "Tokyo",}\n```') == ({"place": "Tokyo"}, True)
    assert parse_arguments('```\n{"place": "Tokyo"}\n```') == ({"place": "Tokyo"}, True)
    assert parse_arguments('``` json {"a": "```"} ```') == ({"a": "```"}, True)


def test_a_value_too_large_for_a_float_is_refused_with_a_reason() -> None:
    arguments = '{"value": 1' + "0" * 400 + ', "from_unit": "km", "to_unit": "m"}'
    outcome = default_registry().run("convert_units", arguments)  # float() of it overflowed, out of run()
    assert not outcome.ok and "too large" in outcome.output
    assert default_registry().run("convert_units", '{"value": 3, "from_unit": "km", "to_unit": "m"}').output \
        == "3 kilometres is 3000 metres"
