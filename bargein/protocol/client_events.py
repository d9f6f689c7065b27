"""Client events of the Realtime subset we serve, validated strictly at the boundary.

``parse_client_event`` turns raw WebSocket text into one of the models below or raises
:class:`ProtocolError` with a message that names the offending field; it never raises anything else.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from bargein.protocol.errors import ProtocolError
from bargein.protocol.server_events import MAX_ECHOED_ID
from bargein.protocol.tool_items import FunctionCallItem, FunctionCallOutputItem

MAX_ID_LENGTH = 64
"""Characters of an item id a client may choose."""
MAX_REFERENCE_LENGTH = 128
"""Characters of an id a client refers to (an item, a response): ours are far shorter."""
MAX_DEPTH = 32
"""Nesting levels of objects and arrays in one client event (tool schemas need a dozen at most)."""
MAX_NODES = 50_000
"""Values (objects, arrays, strings, numbers) in one client event."""


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
    audio_end_ms: int = Field(ge=0)


class ConversationItemDelete(_Event):
    """Remove an item from the conversation."""

    type: Literal["conversation.item.delete"]
    item_id: str = Field(max_length=MAX_REFERENCE_LENGTH)


class ResponseParams(BaseModel):
    """Per-response overrides."""

    model_config = ConfigDict(extra="ignore")
    instructions: str | None = None
    output_modalities: list[Literal["audio", "text"]] | None = Field(None, min_length=1, max_length=1)
    conversation: Literal["auto", "none"] | None = None
    max_output_tokens: int | Literal["inf"] | None = None
    metadata: dict[str, str] | None = Field(None, max_length=16)
    input: list[ResponseInputItem] | None = Field(None, max_length=64)
    """Out-of-band context: these items instead of the conversation (``[]`` for none at all)."""
    tools: list[dict[str, Any]] | None = None
    """Checked by :func:`bargein.protocol.tool_items.validate_tools` when the response starts."""
    tool_choice: Any = None


class ResponseCreate(_Event):
    """Ask for a reply."""

    type: Literal["response.create"]
    response: ResponseParams | None = None


class ResponseCancel(_Event):
    """Stop the reply in progress."""

    type: Literal["response.cancel"]
    response_id: str | None = Field(None, max_length=MAX_REFERENCE_LENGTH)


ClientEvent = Annotated[
    SessionUpdate | InputAudioBufferAppend | InputAudioBufferCommit | InputAudioBufferClear
    | ConversationItemCreate | ConversationItemTruncate | ConversationItemDelete | ConversationItemRetrieve
    | ResponseCreate | ResponseCancel,
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[ClientEvent] = TypeAdapter(ClientEvent)
KNOWN_TYPES = frozenset({
    "session.update", "input_audio_buffer.append", "input_audio_buffer.commit", "input_audio_buffer.clear",
    "conversation.item.create", "conversation.item.truncate", "conversation.item.delete",
    "conversation.item.retrieve", "response.create", "response.cancel",
})


def parse_client_event(raw: str | bytes) -> ClientEvent:
    """Validate one client message; raise :class:`ProtocolError` describing the first problem."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ProtocolError(f"the message is not valid JSON: {error}", code="invalid_json") from None
    except RecursionError:
        raise ProtocolError(f"the message is nested more than {MAX_DEPTH} levels deep",
                            code="invalid_event") from None
    if not isinstance(data, dict):
        raise ProtocolError("a client event must be a JSON object", code="invalid_event")
    event_id = data.get("event_id") if isinstance(data.get("event_id"), str) else None
    _check_shape(data, event_id)
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


def _check_shape(data: dict[str, Any], event_id: str | None) -> None:
    """Refuse events nested deeper than :data:`MAX_DEPTH` or holding more than :data:`MAX_NODES` values.

    Checked before validation, so nothing later (merging a config, echoing it back, serialising it)
    ever walks a structure deep enough to exhaust the interpreter's recursion limit.
    """
    stack: list[tuple[Any, int]] = [(data, 1)]
    nodes = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise ProtocolError(f"the event holds more than {MAX_NODES} values", code="invalid_event",
                                event_id=event_id)
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise ProtocolError(f"the event is nested more than {MAX_DEPTH} levels deep", code="invalid_event",
                                    event_id=event_id)
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
