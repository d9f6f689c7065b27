"""The OpenAI Realtime beta spellings of a response's settings, read as their GA fields.

Beta clients (and libraries written against it) put ``modalities``, ``voice``, ``output_audio_format`` and
``max_response_output_tokens`` at the top of ``response.create``'s ``response``; GA moved them to
``output_modalities``, ``audio.output.voice``, ``audio.output.format`` and ``max_output_tokens``. A beta field
is moved to its GA place before validation, so it is honoured (and checked) rather than dropped as unknown;
one given both ways with different values is refused, naming both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

BETA_FORMATS: dict[str, dict[str, Any]] = {
    "pcm16": {"type": "audio/pcm", "rate": 24_000},
    "g711_ulaw": {"type": "audio/pcmu"},
    "g711_alaw": {"type": "audio/pcma"},
}
"""Beta ``output_audio_format`` names and the GA format objects they stand for."""


def ga_response(data: Any) -> Any:
    """``response.create``'s ``response`` object with its beta fields moved to their GA places (anything that is
    not an object is returned as is, for validation to refuse); raise :class:`ValueError` naming a bad one."""
    if not isinstance(data, dict) or not _BETA_KEYS & data.keys():
        return data
    body = dict(data)
    if "modalities" in body:
        _move(body, "modalities", ("output_modalities",), _ga_modalities(body.pop("modalities")), _ga_modalities)
    if "max_response_output_tokens" in body:
        _move(body, "max_response_output_tokens", ("max_output_tokens",), body.pop("max_response_output_tokens"))
    if "output_audio_format" in body:
        _move(body, "output_audio_format", ("audio", "output", "format"),
              _ga_format(body.pop("output_audio_format")), _ga_format)
    if "voice" in body:
        _move(body, "voice", ("audio", "output", "voice"), body.pop("voice"), _voice_name)
    return body


_BETA_KEYS = frozenset({"modalities", "max_response_output_tokens", "output_audio_format", "voice"})


def _ga_modalities(value: Any) -> Any:
    """Beta allowed ``["audio", "text"]`` (audio with its transcript), which GA spells ``["audio"]``."""
    if not isinstance(value, list) or not value or any(item not in ("audio", "text") for item in value):
        raise ValueError(f'modalities: {value!r} is not a list of "audio" and "text"')
    return ["audio"] if "audio" in value else ["text"]


def _ga_format(value: Any) -> Any:
    """The GA format object a beta format name stands for (a GA object as it is, with PCM's default rate)."""
    if isinstance(value, dict):  # already a GA format object
        return {"rate": 24_000, **value} if value.get("type") == "audio/pcm" else value
    if isinstance(value, str) and value in BETA_FORMATS:
        return dict(BETA_FORMATS[value])
    raise ValueError(f"output_audio_format: {value!r} is not one of {', '.join(BETA_FORMATS)}")


def _voice_name(value: Any) -> Any:
    """Voice names are matched without regard to case."""
    return value.casefold() if isinstance(value, str) else value


def _move(body: dict[str, Any], beta: str, path: tuple[str, ...], value: Any,
          normalise: Callable[[Any], Any] = lambda value: value) -> None:
    """Put ``value`` at ``path`` in ``body``, unless the GA field there already says something else (each side
    ``normalise``d: a client sending both spellings of the same setting is not refused)."""
    holder = body
    for key in path[:-1]:
        inner = holder.get(key)
        if inner is None:
            inner = {}
        elif not isinstance(inner, dict):
            return  # the GA object itself is malformed: validation names it
        holder[key] = inner = dict(inner)
        holder = inner
    given = holder.get(path[-1])
    if given is not None and not _same(normalise, given, value):
        raise ValueError(f"{beta} (the beta spelling) and {'.'.join(path)} disagree: give one of them")
    if given is None:  # said both ways alike, the GA spelling stands as the client wrote it
        holder[path[-1]] = value


def _same(normalise: Callable[[Any], Any], given: Any, value: Any) -> bool:
    """Whether the GA field's ``given`` value and the beta ``value`` say the same, once both are normalised (a
    GA value that cannot be is compared as it is: validation refuses it later)."""
    try:
        return bool(normalise(given) == normalise(value))
    except ValueError:
        return bool(given == value)
