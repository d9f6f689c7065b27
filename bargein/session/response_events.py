"""The event sequence of one response, from ``response.created`` to ``response.done``.

A :class:`ReplyState` owns the response's assistant item and emits, in protocol order: created,
output item and content part opened, audio/transcript (or text) deltas, then the closing events
and ``response.done`` with the final status. Closing is idempotent, so a cancel racing the natural
end cannot produce two ``response.done``.

Output items are opened as the model produces them, as OpenAI's Realtime API does: the message item with the
reply's first words, a ``function_call`` item with its call. A response that only calls tools has only its
``function_call`` items (no empty message in the events, the ``response.done`` or the history); a response that
produces nothing at all still has its empty message, so it is never without output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from bargein.audio.codecs import AudioFormat, encode_base64
from bargein.protocol import client_events as ce
from bargein.protocol.server_events import DEFAULT_CONVERSATION, event, new_id, response_object, usage_object
from bargein.protocol.session_config import SessionConfig
from bargein.protocol.tool_items import argument_deltas, arguments_delta, arguments_done
from bargein.protocol.wire_formats import format_wire, to_audio_format
from bargein.session.history import Conversation, Item, Part
from bargein.session.outbound import Outgoing
from bargein.values import ToolCall, WordTiming

Emit = Callable[[Outgoing], None]
Status = Literal["completed", "cancelled", "failed", "incomplete"]


@dataclass
class ReplyState:
    """One response's item and counters, and the events that describe it."""

    response_id: str
    item: Item
    audio: bool
    output_format: AudioFormat
    voice: str
    in_conversation: bool = True
    metadata: dict[str, str] | None = None
    closed: bool = False
    text_parts: list[str] = field(default_factory=list)
    input_tokens: int = 0
    cached_tokens: int = 0
    """Of the input tokens, those whose KV cache the model reused."""
    output_tokens: int = 0
    calls: list[Item] = field(default_factory=list)
    """The ``function_call`` items of this response."""
    outputs: list[Item] = field(default_factory=list)
    """The output items opened so far, in order (an item's ``output_index`` is its place here)."""
    message_index: int | None = None
    """The message item's ``output_index`` once its first words opened it (None before)."""
    conversation: Conversation | None = None
    """Where the response's items go once they are opened (set by :meth:`open`)."""
    worded: bool = False
    """The model wrote words before a tool call: their message opens ahead of the call, in the order written, though
    a spoken reply's words reach the client with their audio, after the call."""
    max_output_tokens: int | Literal["inf"] = "inf"
    """The token limit this response runs under (its own, else the session's), as reported."""

    @property
    def conversation_id(self) -> str | None:
        """The conversation the response's items go to; None out of band (``conversation: "none"``)."""
        return DEFAULT_CONVERSATION if self.in_conversation else None

    @property
    def modalities(self) -> list[str]:
        """``["audio"]`` or ``["text"]``."""
        return ["audio"] if self.audio else ["text"]

    @property
    def part_type(self) -> str:
        """The content part's type in ``response.content_part.*`` events."""
        return "audio" if self.audio else "text"

    @property
    def announced_item_id(self) -> str | None:
        """The message item's id once ``response.output_item.added`` announced it to the client, else None: an
        event about the reply must not name an item the client has not been told of."""
        return self.item.id if self.message_index is not None else None

    def _ids(self) -> dict[str, Any]:
        return {"response_id": self.response_id, "item_id": self.item.id, "output_index": self.message_index,
                "content_index": 0}

    def _response(self, status: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
        return response_object(
            self.response_id, status=status, modalities=self.modalities,
            output=[item.wire() for item in self.outputs] if status != "in_progress" else [],
            status_details=details, metadata=self.metadata,
            usage=usage_object(self.input_tokens, self.output_tokens, self.cached_tokens)
            if status != "in_progress" else None,
            audio_format=format_wire(self.output_format) if self.audio else None, voice=self.voice,
            conversation_id=self.conversation_id, max_output_tokens=self.max_output_tokens,
        )

    def open(self, emit: Emit, conversation: Conversation) -> None:
        """``response.created``; its items open as the model produces them."""
        self.conversation = conversation
        emit(Outgoing(event("response.created", response=self._response("in_progress"))))

    def _open_message(self, emit: Emit) -> None:
        """The opening of the message item (added to the conversation) and its content part, once."""
        if self.message_index is not None:
            return
        self.message_index = len(self.outputs)
        self.outputs.append(self.item)
        previous = None
        if self.in_conversation and self.conversation is not None:
            previous = self.conversation.add(self.item)
        emit(Outgoing(event("response.output_item.added", response_id=self.response_id,
                            output_index=self.message_index, item=self.item.wire())))
        if self.in_conversation:
            emit(Outgoing(event("conversation.item.added", previous_item_id=previous, item=self.item.wire())))
        part = {"type": self.part_type, "transcript": ""} if self.audio else {"type": "text", "text": ""}
        emit(Outgoing(event("response.content_part.added", **self._ids(), part=part)))

    def text_delta(self, emit: Emit, text: str) -> None:
        """A transcript (audio) or text delta."""
        self._open_message(emit)
        self.text_parts.append(text)
        self.item.parts[0].text = "".join(self.text_parts)
        kind = "response.output_audio_transcript.delta" if self.audio else "response.output_text.delta"
        emit(Outgoing(event(kind, **self._ids(), delta=text), response_id=self.response_id,
                      text_output=not self.audio))

    def audio_delta(self, emit: Emit, payload: bytes, duration_ms: float, words: Sequence[WordTiming]) -> None:
        """An audio delta; the item's length and word timings grow with what is actually sent."""
        self._open_message(emit)
        offset = self.item.audio_ms
        self.item.words.extend(WordTiming(w.word, w.start_ms + offset, w.end_ms + offset) for w in words)
        self.item.audio_ms += duration_ms
        emit(Outgoing(event("response.output_audio.delta", **self._ids(), delta=encode_base64(payload)),
                      response_id=self.response_id, audio_ms=duration_ms))

    def function_call(self, emit: Emit, conversation: Conversation, call: ToolCall) -> Item:
        """A ``function_call`` output item: added, its arguments streamed and done, then the item done."""
        if self.worded:
            self._open_message(emit)
        item = Item(new_id("item"), "assistant", [], status="in_progress", type="function_call", call=call)
        index = len(self.outputs)
        self.calls.append(item)
        self.outputs.append(item)
        previous = conversation.add(item) if self.in_conversation else None
        emit(Outgoing(event("response.output_item.added", response_id=self.response_id, output_index=index,
                            item=item.wire())))
        if self.in_conversation:
            emit(Outgoing(event("conversation.item.added", previous_item_id=previous, item=item.wire())))
        for delta in argument_deltas(call.arguments):
            emit(Outgoing(arguments_delta(self.response_id, item.id, index, call.call_id, delta)))
        emit(Outgoing(arguments_done(self.response_id, item.id, index, call.call_id, call.name, call.arguments)))
        item.status = "completed"
        emit(Outgoing(event("response.output_item.done", response_id=self.response_id, output_index=index,
                            item=item.wire())))
        if self.in_conversation:
            emit(Outgoing(event("conversation.item.done", item=item.wire())))
        return item

    def close(self, emit: Emit, status: Status, *, reason: str | None = None,
              error: dict[str, Any] | None = None) -> None:
        """The closing events and ``response.done``; a second call does nothing."""
        if self.closed:
            return
        self.closed = True
        self.item.status = "completed" if status == "completed" else "incomplete"
        if self.message_index is not None or not self.calls:  # a response of tool calls alone has no message
            self._close_message(emit)
        details: dict[str, Any] = {"type": status}
        if reason:
            details["reason"] = reason
        if error:
            details["error"] = error
        emit(Outgoing(event("response.done", response=self._response(status, details))))

    def _close_message(self, emit: Emit) -> None:
        """The message item's closing events (opened first if it never had words: the response's only item)."""
        self._open_message(emit)
        ids = self._ids()
        heard = self.item.heard_text()
        if self.audio:
            emit(Outgoing(event("response.output_audio.done", **ids)))
            emit(Outgoing(event("response.output_audio_transcript.done", **ids, transcript=heard)))
            part = {"type": "audio", "transcript": heard}
        else:
            emit(Outgoing(event("response.output_text.done", **ids, text=heard)))
            part = {"type": "text", "text": heard}
        emit(Outgoing(event("response.content_part.done", **ids, part=part)))
        emit(Outgoing(event("response.output_item.done", response_id=self.response_id,
                            output_index=self.message_index, item=self.item.wire())))
        if self.in_conversation:
            emit(Outgoing(event("conversation.item.done", item=self.item.wire())))


def reply_state(response_id: str, config: SessionConfig, params: ce.ResponseParams | None) -> ReplyState:
    """A new reply's state: the session's settings, with those ``params`` (a ``response.create``) set for this
    reply alone (modalities, output format and voice, conversation, token limit, metadata) in their place."""
    modalities = params.output_modalities if params and params.output_modalities else config.output_modalities
    audio = "audio" in modalities
    own = params.audio.output if params and params.audio else None
    output_format = to_audio_format(own.format) if own and own.format else config.output_format
    voice = own.voice if own and own.voice else config.audio.output.voice
    max_tokens = params.max_output_tokens if params and params.max_output_tokens else config.max_output_tokens
    return ReplyState(response_id, assistant_item(new_id("item"), audio=audio), audio, output_format, voice,
                      in_conversation=not (params and params.conversation == "none"),
                      metadata=params.metadata if params else None, max_output_tokens=max_tokens)


def assistant_item(item_id: str, *, audio: bool) -> Item:
    """An empty in-progress assistant item for a new reply."""
    return Item(item_id, "assistant", [Part("output_audio" if audio else "output_text")], status="in_progress")
