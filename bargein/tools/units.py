"""Unit conversion for everyday quantities: length, mass, volume, speed, area, time, temperature, data.

Every unit is a factor to its dimension's base unit (temperature, being affine, is converted through
kelvin). Names are matched leniently: plural, abbreviation, US or British spelling.
"""

from __future__ import annotations

from dataclasses import dataclass

from bargein.tools.calculator import format_number
from bargein.tools.quoting import quoted


class ConversionError(ValueError):
    """Unknown unit, or units of different kinds."""


@dataclass(frozen=True)
class Unit:
    """A unit: its dimension, its factor to the dimension's base unit and how it is said."""

    dimension: str
    factor: float
    singular: str
    plural: str


def _unit(dimension: str, factor: float, singular: str, plural: str, *aliases: str) -> dict[str, Unit]:
    unit = Unit(dimension, factor, singular, plural)
    return {name: unit for name in (singular, plural, *aliases)}


_UNITS: dict[str, Unit] = {
    # length, base metre
    **_unit("length", 1e-3, "millimetre", "millimetres", "mm", "millimeter", "millimeters"),
    **_unit("length", 1e-2, "centimetre", "centimetres", "cm", "centimeter", "centimeters"),
    **_unit("length", 1.0, "metre", "metres", "m", "meter", "meters"),
    **_unit("length", 1e3, "kilometre", "kilometres", "km", "kilometer", "kilometers"),
    **_unit("length", 0.0254, "inch", "inches", "in"),
    **_unit("length", 0.3048, "foot", "feet", "ft"),
    **_unit("length", 0.9144, "yard", "yards", "yd"),
    **_unit("length", 1609.344, "mile", "miles", "mi"),
    **_unit("length", 1852.0, "nautical mile", "nautical miles", "nmi"),
    # mass, base kilogram
    **_unit("mass", 1e-3, "gram", "grams", "g"),
    **_unit("mass", 1.0, "kilogram", "kilograms", "kg", "kilo", "kilos"),
    **_unit("mass", 1e3, "tonne", "tonnes", "t", "metric ton", "metric tons"),
    **_unit("mass", 0.028349523125, "ounce", "ounces", "oz"),
    **_unit("mass", 0.45359237, "pound", "pounds", "lb", "lbs"),
    **_unit("mass", 6.35029318, "stone", "stones", "st"),
    # volume, base litre
    **_unit("volume", 1e-3, "millilitre", "millilitres", "ml", "milliliter", "milliliters"),
    **_unit("volume", 1.0, "litre", "litres", "l", "liter", "liters"),
    **_unit("volume", 0.00492892159375, "teaspoon", "teaspoons", "tsp"),
    **_unit("volume", 0.01478676478125, "tablespoon", "tablespoons", "tbsp"),
    **_unit("volume", 0.0295735295625, "fluid ounce", "fluid ounces", "fl oz"),
    **_unit("volume", 0.2365882365, "cup", "cups"),
    **_unit("volume", 0.473176473, "pint", "pints", "pt"),
    **_unit("volume", 3.785411784, "gallon", "gallons", "gal"),
    # speed, base metre per second
    **_unit("speed", 1.0, "metre per second", "metres per second", "m/s", "meters per second"),
    **_unit("speed", 1 / 3.6, "kilometre per hour", "kilometres per hour", "km/h", "kph",
            "kilometers per hour"),
    **_unit("speed", 0.44704, "mile per hour", "miles per hour", "mph"),
    **_unit("speed", 1852 / 3600, "knot", "knots", "kn"),
    # area, base square metre
    **_unit("area", 1.0, "square metre", "square metres", "m2", "square meter", "square meters"),
    **_unit("area", 0.09290304, "square foot", "square feet", "ft2", "sq ft"),
    **_unit("area", 1e6, "square kilometre", "square kilometres", "km2", "square kilometers"),
    **_unit("area", 2_589_988.110336, "square mile", "square miles", "sq mi"),
    **_unit("area", 4046.8564224, "acre", "acres"),
    **_unit("area", 1e4, "hectare", "hectares", "ha"),
    # time, base second
    **_unit("time", 1.0, "second", "seconds", "s", "sec", "secs"),
    **_unit("time", 60.0, "minute", "minutes", "min", "mins"),
    **_unit("time", 3600.0, "hour", "hours", "h", "hr", "hrs"),
    **_unit("time", 86_400.0, "day", "days", "d"),
    **_unit("time", 604_800.0, "week", "weeks", "wk"),
    # data, base byte
    **_unit("data", 1.0, "byte", "bytes", "b"),
    **_unit("data", 1e3, "kilobyte", "kilobytes", "kb"),
    **_unit("data", 1e6, "megabyte", "megabytes", "mb"),
    **_unit("data", 1e9, "gigabyte", "gigabytes", "gb"),
    **_unit("data", 1e12, "terabyte", "terabytes", "tb"),
}
_TEMPERATURES: dict[str, str] = {
    "celsius": "celsius", "c": "celsius", "°c": "celsius", "degrees celsius": "celsius", "centigrade": "celsius",
    "fahrenheit": "fahrenheit", "f": "fahrenheit", "°f": "fahrenheit", "degrees fahrenheit": "fahrenheit",
    "kelvin": "kelvin", "k": "kelvin", "kelvins": "kelvin",
}
_TO_KELVIN = {"celsius": lambda v: v + 273.15, "fahrenheit": lambda v: (v - 32) * 5 / 9 + 273.15,
              "kelvin": lambda v: v}
_FROM_KELVIN = {"celsius": lambda k: k - 273.15, "fahrenheit": lambda k: (k - 273.15) * 9 / 5 + 32,
                "kelvin": lambda k: k}
MAX_VALUE = 1e15


def _key(name: str) -> str:
    return " ".join(name.strip().lower().replace(".", "").split())


def convert(value: float, from_unit: str, to_unit: str) -> float:
    """``value`` in ``from_unit`` expressed in ``to_unit``; :class:`ConversionError` when that makes no sense."""
    if abs(value) > MAX_VALUE:
        raise ConversionError("the value is too large")
    source, target = _key(from_unit), _key(to_unit)
    if source in _TEMPERATURES or target in _TEMPERATURES:
        if source not in _TEMPERATURES or target not in _TEMPERATURES:
            raise ConversionError(f"cannot convert {quoted(from_unit)} to {quoted(to_unit)}")
        kelvin = _TO_KELVIN[_TEMPERATURES[source]](value)
        return float(_FROM_KELVIN[_TEMPERATURES[target]](kelvin))
    known_from, known_to = _UNITS.get(source), _UNITS.get(target)
    if known_from is None or known_to is None:
        unknown = from_unit if known_from is None else to_unit
        raise ConversionError(f"unknown unit {quoted(unknown)}")
    if known_from.dimension != known_to.dimension:
        raise ConversionError(f"cannot convert {known_from.dimension} ({source}) to "
                              f"{known_to.dimension} ({target})")
    return value * known_from.factor / known_to.factor


def describe_conversion(value: float, from_unit: str, to_unit: str) -> str:
    """A sentence with the conversion, rounded to what a person would say (4 significant digits)."""
    result = convert(value, from_unit, to_unit)
    source, target = _key(from_unit), _key(to_unit)
    said_from = _said(source, value)
    said_to = _said(target, result)
    shown = format_number(float(f"{result:.4g}"))
    return f"{format_number(value)} {said_from} is {shown} {said_to}"


def _said(key: str, amount: float) -> str:
    if key in _TEMPERATURES:
        name = _TEMPERATURES[key]
        return "kelvin" if name == "kelvin" else f"degrees {name.capitalize()}"
    unit = _UNITS[key]
    return unit.singular if abs(amount) == 1 else unit.plural
