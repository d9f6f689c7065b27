"""Builders for the server events we emit, named and shaped as in the OpenAI Realtime GA protocol.

Each returns a plain dict ready for JSON; a test validates every event a conversation produces
against ``openai.types.realtime.RealtimeServerEvent``. Events of our own carry the ``bargein.`` prefix.
"""

from __future__ import annotations

import secrets
from typing import Any, Literal

from bargein.protocol.errors import ProtocolError

ServerEvent = dict[str, Any]


def new_id(prefix: str) -> str:
    """An id like the OpenAI ones: a prefix and 20 random characters."""
    return f"{prefix}_{secrets.token_hex(10)}"


def event(type_: str, **fields: Any) -> ServerEvent:
    """A server event with a fresh ``event_id``."""
    return {"type": type_, "event_id": new_id("event"), **fields}


MAX_ERROR_MESSAGE = 400
"""Characters of an error message a client is sent (details beyond go to the log)."""
MAX_ECHOED_FIELD = 128
"""Characters of a ``code`` or ``param``."""
MAX_ECHOED_ID = 512
"""Characters of an echoed ``event_id`` (the longest a client event may carry); a longer one is not echoed."""


def error_event(error: ProtocolError) -> ServerEvent:
    """The ``error`` event for a rejected client event (echoes its ``event_id``), bounded in size."""
    event_id = error.event_id if error.event_id is not None and len(error.event_id) <= MAX_ECHOED_ID else None
    message = error.message
    if len(message) > MAX_ERROR_MESSAGE:
        message = message[:MAX_ERROR_MESSAGE - 3] + "..."
    return event("error", error={
        "type": error.type, "code": error.code[:MAX_ECHOED_FIELD], "message": message,
        "param": error.param[:MAX_ECHOED_FIELD] if error.param is not None else None, "event_id": event_id,
    })


DEFAULT_CONVERSATION = "conv_default"
"""The id of the session's one conversation, where every in-band response's items go."""


def response_object(response_id: str, *, status: str, output: list[dict[str, Any]] | None = None,
                    modalities: list[str] | None = None, status_details: dict[str, Any] | None = None,
                    usage: dict[str, Any] | None = None, audio_format: dict[str, Any] | None = None,
                    voice: str | None = None, metadata: dict[str, str] | None = None,
                    conversation_id: str | None = DEFAULT_CONVERSATION,
                    max_output_tokens: int | Literal["inf"] = "inf") -> dict[str, Any]:
    """The ``response`` object of ``response.created`` / ``response.done``.

    ``conversation_id`` is None for an out-of-band response (``conversation: "none"``), as the schema says;
    ``max_output_tokens`` is the limit the response ran under (its own, else the session's).
    """
    body: dict[str, Any] = {
        "id": response_id, "object": "realtime.response", "status": status,
        "status_details": status_details, "output": output or [],
        "conversation_id": conversation_id, "output_modalities": modalities or ["audio"],
        "max_output_tokens": max_output_tokens, "metadata": metadata,
    }
    if audio_format is not None:
        body["audio"] = {"output": {"format": audio_format, "voice": voice or "alloy"}}
    if usage is not None:
        body["usage"] = usage
    return body


def usage_object(input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """Token usage of a response as the GA schema has it: text tokens (the model reads the transcript and speaks
    through a separate voice, so no audio is tokenised); ``cached_tokens``, a subset of the input tokens, are those
    whose KV cache the model reused."""
    cached = max(0, min(cached_tokens, input_tokens))
    return {
        "total_tokens": input_tokens + output_tokens, "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "input_token_details": {"text_tokens": input_tokens, "audio_tokens": 0, "image_tokens": 0,
                                "cached_tokens": cached,
                                "cached_tokens_details": {"text_tokens": cached, "audio_tokens": 0,
                                                          "image_tokens": 0}},
        "output_token_details": {"text_tokens": output_tokens, "audio_tokens": 0},
    }


def transcription_usage(seconds: float) -> dict[str, Any]:
    """Usage of an input transcription, by audio duration."""
    return {"type": "duration", "seconds": round(seconds, 3)}
