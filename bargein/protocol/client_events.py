"""Client events of the Realtime subset we serve, validated strictly at the boundary.

``parse_client_event`` turns raw WebSocket text into one of the models below or raises
:class:`ProtocolError` with a message that names the offending field; it never raises anything else.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from bargein.protocol.beta_fields import ga_response
from bargein.protocol.errors import ProtocolError
from bargein.protocol.server_events import MAX_ECHOED_ID
from bargein.protocol.tool_items import FunctionCallItem, FunctionCallOutputItem
from bargein.protocol.wire_formats import WireFormat

MAX_ID_LENGTH = 64
"""Characters of an item id a client may choose."""
MAX_REFERENCE_LENGTH = 128
"""Characters of an id a client refers to (an item, a response): ours are far shorter."""
MAX_DEPTH = 32
"""Nesting levels of objects and arrays in one client event (tool schemas need a dozen at most)."""
MAX_NODES = 50_000
"""Values (objects, arrays, strings, numbers) in one client event."""
MAX_INT64 = 2**63 - 1
"""The largest integer a protocol field takes (a 64-bit integer, as OpenAI's API reads them)."""
MAX_OUTPUT_TOKENS = 4_096
"""The largest integer ``max_output_tokens`` the protocol allows (1 to 4096, or ``"inf"``)."""
OutputTokens = Annotated[int, Field(ge=1, le=MAX_OUTPUT_TOKENS)] | Literal["inf"]
"""``max_output_tokens``: an integer from 1 to 4096, or ``"inf"``."""


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")
    event_id: str | None = Field(None, max_length=MAX_ECHOED_ID)


class SessionUpdate(_Event):
    """Change the session; the ``session`` object is merged into the current configuration."""

    type: Literal["session.update"]
    session: dict[str, Any]


class InputAudioBufferAppend(_Event):
    """Base64 audio in the session's input format."""

    type: Literal["input_audio_buffer.append"]
    audio: str


class InputAudioBufferCommit(_Event):
    """Turn the buffered audio into a user item (manual turn detection)."""

    type: Literal["input_audio_buffer.commit"]


class InputAudioBufferClear(_Event):
    """Drop the buffered audio."""

    type: Literal["input_audio_buffer.clear"]


class InputText(BaseModel):
    """Typed text from the user."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["input_text"]
    text: str


class InputAudio(BaseModel):
    """Audio content of a user item (base64 in the session's input format)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["input_audio"]
    audio: str | None = None
    transcript: str | None = None


class InputImage(BaseModel):
    """An image as a data URL."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["input_image"]
    image_url: str
    detail: Literal["auto", "low", "high"] = "auto"


class OutputText(BaseModel):
    """Assistant text in a client-created assistant item."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["output_text", "text"]
    text: str


ContentPart = Annotated[InputText | InputAudio | InputImage | OutputText, Field(discriminator="type")]


class MessageItem(BaseModel):
    """A message item created by the client."""

    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(None, max_length=MAX_ID_LENGTH)
    type: Literal["message"]
    object: Literal["realtime.item"] | None = None
    role: Literal["user", "assistant", "system"]
    status: Literal["completed", "incomplete", "in_progress"] | None = None
    content: list[ContentPart] = Field(min_length=1, max_length=64)

    @model_validator(mode="after")
    def _content_for_role(self) -> MessageItem:
        """Hold each role to content the conversation keeps for it (the GA item types), so nothing a client
        sends is silently left out of what the model reads: an assistant's ``input_text`` is its text (as
        Pipecat sends it), but an assistant's audio or image, or a system message's image, would be dropped."""
        if self.role == "assistant":
            if any(isinstance(part, InputAudio | InputImage) for part in self.content):
                raise ValueError("an assistant message holds output_text only (input_audio and input_image "
                                 "are user content)")
            self.content = [OutputText(type="output_text", text=part.text) if isinstance(part, InputText) else part
                            for part in self.content]
        elif self.role == "system" and any(isinstance(part, InputImage) for part in self.content):
            raise ValueError("a system message holds text only (input_image is user content)")
        return self


ConversationItem = Annotated[MessageItem | FunctionCallItem | FunctionCallOutputItem, Field(discriminator="type")]


class ItemReference(BaseModel):
    """An earlier item of the session, named by id, as context of an out-of-band response."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["item_reference"]
    id: str = Field(max_length=MAX_ID_LENGTH)


ResponseInputItem = Annotated[MessageItem | FunctionCallItem | FunctionCallOutputItem | ItemReference,
                              Field(discriminator="type")]


class ConversationItemCreate(_Event):
    """Add an item to the conversation."""

    type: Literal["conversation.item.create"]
    previous_item_id: str | None = Field(None, max_length=MAX_REFERENCE_LENGTH)
    item: ConversationItem


class ConversationItemRetrieve(_Event):
    """Ask for the server's copy of an item (answered by ``conversation.item.retrieved``)."""

    type: Literal["conversation.item.retrieve"]
    item_id: str = Field(max_length=MAX_REFERENCE_LENGTH)


class ConversationItemTruncate(_Event):
    """The client played only ``audio_end_ms`` of an assistant item."""

    type: Literal["conversation.item.truncate"]
    item_id: str = Field(max_length=MAX_REFERENCE_LENGTH)
    content_index: int = Field(ge=0)
    audio_end_ms: int = Field(ge=0, le=MAX_INT64)


class ConversationItemDelete(_Event):
    """Remove an item from the conversation."""

    type: Literal["conversation.item.delete"]
    item_id: str = Field(max_length=MAX_REFERENCE_LENGTH)


class ResponseAudioOutput(BaseModel):
    """``response.audio.output``: this reply's wire format and voice, in place of the session's.

    Strict (unknown fields refused), so nothing a client asks of one reply's audio is silently dropped.
    """

    model_config = ConfigDict(extra="forbid")
    format: WireFormat | None = None
    voice: str | None = Field(None, min_length=1)
    """A voice name, passed to the synthesiser as ``session.audio.output.voice`` is."""

    @field_validator("voice", mode="before")
    @classmethod
    def _named_voice(cls, value: Any) -> Any:
        """The schema also allows a custom voice (``{"id": "voice_..."}``): none exists here, so it is refused
        by name rather than with pydantic's bare "not a string"."""
        if isinstance(value, dict):
            raise ValueError('custom voices ({"id": ...}) are not supported; name a voice (such as "alloy")')
        return value


class ResponseAudio(BaseModel):
    """``response.audio``: only ``output`` is defined."""

    model_config = ConfigDict(extra="forbid")
    output: ResponseAudioOutput | None = None


class ResponseParams(BaseModel):
    """Per-response overrides."""

    model_config = ConfigDict(extra="ignore")
    instructions: str | None = None
    output_modalities: list[Literal["audio", "text"]] | None = Field(None, min_length=1, max_length=1)
    conversation: Literal["auto", "none"] | None = None
    max_output_tokens: OutputTokens | None = None
    metadata: dict[str, str] | None = Field(None, max_length=16)
    input: list[ResponseInputItem] | None = Field(None, max_length=64)
    """Out-of-band context: these items instead of the conversation (``[]`` for none at all)."""
    tools: list[dict[str, Any]] | None = None
    """Checked by :func:`bargein.protocol.tool_items.validate_tools` when the response starts."""
    tool_choice: Any = None
    audio: ResponseAudio | None = None
    """This reply's output format and voice (the session's where left out)."""

    @model_validator(mode="before")
    @classmethod
    def _beta_spellings(cls, data: Any) -> Any:
        """``voice``, ``output_audio_format``, ``modalities``, ``max_response_output_tokens`` (beta) are read
        as their GA fields: with ``extra="ignore"`` they would otherwise be dropped without a word."""
        return ga_response(data)


class ResponseCreate(_Event):
    """Ask for a reply."""

    type: Literal["response.create"]
    response: ResponseParams | None = None


class ResponseCancel(_Event):
    """Stop the reply in progress."""

    type: Literal["response.cancel"]
    response_id: str | None = Field(None, max_length=MAX_REFERENCE_LENGTH)


class CameraFrame(_Event):
    """bargein's own: a camera frame for the ``see`` stage (a data URL, as ``input_image``). It is sampled and read,
    never added to the conversation, so a camera streaming a frame a second does not fill the history."""

    type: Literal["bargein.camera.frame"]
    image_url: str


ClientEvent = Annotated[
    SessionUpdate | InputAudioBufferAppend | InputAudioBufferCommit | InputAudioBufferClear
    | ConversationItemCreate | ConversationItemTruncate | ConversationItemDelete | ConversationItemRetrieve
    | ResponseCreate | ResponseCancel | CameraFrame,
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[ClientEvent] = TypeAdapter(ClientEvent)
KNOWN_TYPES = frozenset({
    "session.update", "input_audio_buffer.append", "input_audio_buffer.commit", "input_audio_buffer.clear",
    "conversation.item.create", "conversation.item.truncate", "conversation.item.delete",
    "conversation.item.retrieve", "response.create", "response.cancel", "bargein.camera.frame",
})


def read_json_object(raw: str | bytes, what: str = "a client event") -> dict[str, Any]:
    """Decode a JSON object as the protocol reads client JSON, shape checked (:func:`_check_shape`); raise
    :class:`ProtocolError` (naming the object's ``event_id`` when it has one) on the first problem."""
    try:
        data = _DECODER.decode(raw if isinstance(raw, str) else raw.decode(json.detect_encoding(raw), "surrogatepass"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ProtocolError(f"the message is not valid JSON: {error}", code="invalid_json") from None
    except RecursionError:
        raise ProtocolError(f"the message is nested more than {MAX_DEPTH} levels deep",
                            code="invalid_event") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"{what} must be a JSON object", code="invalid_event")
    _check_shape(data, _event_id(data))
    return data


def _event_id(data: dict[str, Any]) -> str | None:
    """The ``event_id`` a client event names, to echo in its errors (none unless it is a string)."""
    event_id = data.get("event_id")
    return event_id if isinstance(event_id, str) else None


def parse_client_event(raw: str | bytes) -> ClientEvent:
    """Validate one client message; raise :class:`ProtocolError` describing the first problem."""
    data = read_json_object(raw)
    event_id = _event_id(data)
    event_type = data.get("type")
    if not isinstance(event_type, str):
        raise ProtocolError("the event has no string 'type'", code="invalid_event", param="type",
                            event_id=event_id)
    if event_type not in KNOWN_TYPES:
        raise ProtocolError(f"unknown or unsupported event type {event_type[:80]!r}",
                            code="invalid_event_type", param="type", event_id=event_id)
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as error:
        first = error.errors()[0]
        location = ".".join(str(part) for part in first["loc"][1:]) or "event"
        raise ProtocolError(f"invalid {event_type}: {location}: {first['msg']}",
                            code="invalid_value", param=location, event_id=event_id) from None


@dataclass(frozen=True)
class _Unreadable:
    """A number the parser read that no field can take: refused by :func:`_check_shape`, naming the event."""

    why: str


def _constant(name: str) -> _Unreadable:
    """``NaN``, ``Infinity``, ``-Infinity``: Python's parser takes them, JSON has no such values."""
    return _Unreadable(f"{name} is not a JSON value")


def _integer(text: str) -> int | _Unreadable:
    """An integer, unless it has more digits than Python converts (it would raise a bare ``ValueError``)."""
    digits = len(text.lstrip("-"))
    if digits > sys.get_int_max_str_digits() > 0:
        return _Unreadable(f"an integer of {digits} digits is too long to read")
    return int(text)


def _real(text: str) -> float | _Unreadable:
    """A number with a fraction or exponent, unless it overflows to infinity (``1e999``)."""
    value = float(text)
    return value if math.isfinite(value) else _Unreadable(f"the number {text[:40]} is out of range")


_DECODER = json.JSONDecoder(parse_constant=_constant, parse_int=_integer, parse_float=_real)
"""Built once: ``json.loads`` with hooks builds a decoder per call (about 5 us of each audio append)."""


def _check_shape(data: dict[str, Any], event_id: str | None) -> None:
    """Refuse events nested deeper than :data:`MAX_DEPTH`, holding more than :data:`MAX_NODES` values, a
    number no field can take (:class:`_Unreadable`), or a string (or key) that is not Unicode text (an
    unpaired ``\\ud800``-style surrogate escape).

    Checked before validation, so nothing later (merging a config, echoing it back, serialising it)
    ever walks a structure deep enough to exhaust the interpreter's recursion limit, and no string that
    cannot be encoded as UTF-8 reaches the history or an engine (where every later reply would fail on it).
    """
    stack: list[tuple[Any, int]] = [(data, 1)]
    nodes = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise ProtocolError(f"the event holds more than {MAX_NODES} values", code="invalid_event",
                                event_id=event_id)
        if isinstance(value, str):
            _check_text(value, event_id)
        elif isinstance(value, _Unreadable):
            raise ProtocolError(f"the message is not valid JSON: {value.why}", code="invalid_json",
                                event_id=event_id)
        elif isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise ProtocolError(f"the event is nested more than {MAX_DEPTH} levels deep", code="invalid_event",
                                    event_id=event_id)
            if isinstance(value, dict):
                for key in value:
                    _check_text(key, event_id)
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)


def _check_text(text: str, event_id: str | None) -> None:
    """Refuse a string holding an unpaired surrogate (JSON's ``\\ud800`` escape alone): it is no Unicode text."""
    if text.isascii():  # constant time: base64 audio and most text end here
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ProtocolError(f"a string holds an unpaired surrogate ({text[error.start]!a}) at position "
                            f"{error.start}: not valid Unicode text", code="invalid_value",
                            event_id=event_id) from None
