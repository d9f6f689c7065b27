"""The built-in tools: calculator, unit conversion, clock, argument repair and the registry."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from bargein.tools.arguments import ArgumentError, check_arguments, parse_arguments
from bargein.tools.calculator import CalculationError, evaluate, format_number
from bargein.tools.clock import about_date, time_in_place
from bargein.tools.places import UnknownPlace, zone_for
from bargein.tools.registry import default_registry
from bargein.tools.units import ConversionError, convert, describe_conversion

NOON_UTC = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)  # a Monday


def fixed() -> dt.datetime:
    return NOON_UTC


@pytest.mark.parametrize(("expression", "expected"), [
    ("3.5 * 60", 210), ("2 ** 10", 1024), ("(1 + 2) * 3", 9), ("7 // 2", 3), ("7 % 4", 3),
    ("-3 + 5", 2), ("sqrt(16)", 4.0), ("15 / 100 * 80", 12.0), ("3 x 4", 12), ("2^8", 256),
    ("1,000 + 1", 1001), ("12 ÷ 4", 3.0), ("max(3, 9, 2)", 9), ("round(2.567, 2)", 2.57),
    ("factorial(5)", 120),
])
def test_calculator_computes(expression: str, expected: float) -> None:
    assert evaluate(expression) == pytest.approx(expected)


@pytest.mark.parametrize("expression", [
    "__import__('os').system('true')", "open('x')", "[1, 2]", "a + 1", "1 if 1 else 2",
    "(lambda: 1)()", "9 ** 9 ** 9", "10 ** 1000", "2 ** 100000", "1 / 0", "factorial(1000)",
    "1e400", "x" * 300, "sqrt(-1)", "().__class__", "True + 1", "'a' * 3",
])
def test_calculator_refuses(expression: str) -> None:
    with pytest.raises(CalculationError):
        evaluate(expression)


def test_format_number_reads_like_speech() -> None:
    assert format_number(210.0) == "210"
    assert format_number(1 / 3) == "0.3333333333"
    assert format_number(7) == "7"


def test_units_convert_across_systems() -> None:
    assert convert(1, "mile", "km") == pytest.approx(1.609344)
    assert convert(100, "celsius", "fahrenheit") == pytest.approx(212)
    assert convert(32, "°F", "C") == pytest.approx(0)
    assert convert(0, "celsius", "kelvin") == pytest.approx(273.15)
    assert convert(2, "cups", "ml") == pytest.approx(473.176473)
    assert convert(3.5, "hours", "minutes") == pytest.approx(210)
    assert describe_conversion(5, "kilograms", "pounds") == "5 kilograms is 11.02 pounds"
    assert describe_conversion(1, "foot", "inches") == "1 foot is 12 inches"


@pytest.mark.parametrize(("value", "source", "target"), [
    (1, "mile", "kg"), (1, "parsec", "km"), (1, "celsius", "km"), (1e20, "m", "km")])
def test_units_refuse_nonsense(value: float, source: str, target: str) -> None:
    with pytest.raises(ConversionError):
        convert(value, source, target)


def test_places_resolve_cities_countries_and_iana_names() -> None:
    assert zone_for("Tokyo")[1].key == "Asia/Tokyo"
    assert zone_for("paris, france")[1].key == "Europe/Paris"
    assert zone_for("New York City")[1].key == "America/New_York" or zone_for("nyc")[1].key == "America/New_York"
    assert zone_for("Europe/Lisbon")[1].key == "Europe/Lisbon"
    with pytest.raises(UnknownPlace):
        zone_for("Atlantis")


def test_time_in_place_uses_the_zone_and_the_clock() -> None:
    tokyo = time_in_place("Tokyo", fixed)
    assert "21:00" in tokyo and "Monday 30 November 2026" in tokyo and "UTC+09:00" in tokyo
    new_york = time_in_place("New York", fixed)
    assert "07:00" in new_york and "UTC-05:00" in new_york
    kathmandu = time_in_place("Kathmandu", fixed)
    assert "17:45" in kathmandu and "UTC+05:45" in kathmandu


def test_about_date_gives_weekday_and_distance() -> None:
    assert about_date("2026-12-25", fixed).startswith("Friday 25 December 2026: that is in 25 days")
    assert "that was 1 day ago" in about_date("2026-11-29", fixed)
    with pytest.raises(ValueError):
        about_date("next tuesday", fixed)


def test_arguments_are_mended_when_the_model_writes_almost_json() -> None:
    assert parse_arguments('{"place": "Tokyo"}') == ({"place": "Tokyo"}, False)
    assert parse_arguments("```json\n{\"place\": \"Tokyo\",}\n```") == ({"place": "Tokyo"}, True)
    assert parse_arguments("{'place': 'Tokyo'}") == ({"place": "Tokyo"}, True)
    assert parse_arguments('{"place": "Tokyo"') == ({"place": "Tokyo"}, True)
    with pytest.raises(ArgumentError):
        parse_arguments("Tokyo")
    with pytest.raises(ArgumentError):
        parse_arguments("[1, 2]")


def test_arguments_are_fitted_to_the_schema() -> None:
    schema = {"type": "object", "properties": {"value": {"type": "number"}, "unit": {"type": "string",
              "enum": ["km", "mi"]}}, "required": ["value"], "additionalProperties": False}
    checked = check_arguments('{"value": "3.5", "unit": "km", "extra": 1}', schema)
    assert checked.values == {"value": 3.5, "unit": "km"} and checked.repaired
    assert json.loads(checked.json) == {"value": 3.5, "unit": "km"}
    untouched = check_arguments('{"value": 2}', schema)
    assert not untouched.repaired and untouched.json == '{"value": 2}'
    with pytest.raises(ArgumentError, match="missing required"):
        check_arguments('{"unit": "km"}', schema)
    with pytest.raises(ArgumentError, match="one of"):
        check_arguments('{"value": 1, "unit": "parsec"}', schema)
    with pytest.raises(ArgumentError, match="number"):
        check_arguments('{"value": "lots"}', schema)


def test_registry_offers_realtime_function_tools_and_runs_them() -> None:
    registry = default_registry(fixed)
    definitions = registry.definitions()
    assert {d["name"] for d in definitions} == {"get_current_time", "about_date", "calculate", "convert_units"}
    assert all(d["type"] == "function" and d["parameters"]["type"] == "object" for d in definitions)
    assert registry.run("calculate", '{"expression": "3.5 * 60"}').output == "3.5 * 60 = 210"
    assert "Asia/Tokyo" in registry.run("get_current_time", "{'place': 'Tokyo'}").output
    failed = registry.run("calculate", '{"expression": "2 ** 99999"}')
    assert not failed.ok and "exponent" in json.loads(failed.output)["error"]
    assert not registry.run("no_such_tool", "{}").ok
    assert not registry.run("convert_units", '{"value": 1}').ok


def test_registry_definitions_validate_against_the_official_types() -> None:
    tool_types = pytest.importorskip("openai.types.realtime.realtime_function_tool")
    for definition in default_registry(fixed).definitions():
        tool_types.RealtimeFunctionTool.model_validate(definition)


def test_arguments_cut_off_midway_are_closed() -> None:
    assert parse_arguments('{"a": {"b": "x\\"}') == ({"a": {"b": 'x"}'}}, True)
    assert parse_arguments('{"a": [1, 2') == ({"a": [1, 2]}, True)
    assert parse_arguments('{"a": 1} and then some words') == ({"a": 1}, True)


@pytest.mark.parametrize("expression", ["round(5, -10**99)", "round(5, -10**12)", "round(5.5, -10**99)"])
def test_calculator_round_with_huge_negative_digits_is_not_computed_for_long(expression: str) -> None:
    # int.__round__ computes 10 ** -ndigits: -10**99 digits would never finish (and would block the loop)
    with pytest.raises(CalculationError, match="round"):
        evaluate(expression)
    assert evaluate("round(1234, -2)") == 1200 and evaluate("round(2.71828, 2)") == 2.72


def test_registry_run_never_raises_on_unreadable_arguments() -> None:
    registry = default_registry()
    for arguments in ("[" * 5_000, '{"expression": ' + "1" * 5_000 + "}"):
        outcome = registry.run("calculate", arguments)
        assert not outcome.ok and "error" in json.loads(outcome.output)
