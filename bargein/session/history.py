"""The conversation: ordered items, truncated to what the user heard, rendered for the LLM.

An assistant item keeps its full transcript and word timings beside ``heard_ms``; its visible
transcript (and what the LLM sees) is only the words heard. A truncate may be re-applied with a
better figure (the client's playback cursor after the server's own estimate) because the full text
is never thrown away.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from bargein.languages import has_han, join_units
from bargein.protocol import client_events as ce
from bargein.protocol.errors import ProtocolError
from bargein.protocol.server_events import new_id
from bargein.protocol.tool_items import (
    FunctionCallItem,
    FunctionCallOutputItem,
    function_call_item,
    function_call_output_item,
)
from bargein.values import ChatImage, ChatMessage, ToolCall, WordTiming

Role = Literal["user", "assistant", "system"]
MAX_ITEMS = 2_000
"""Oldest items are forgotten past this, so a long session's history stays bounded."""
MAX_HISTORY_BYTES = 32 * 1024 * 1024
"""Oldest items are also forgotten once the history's text and images hold this many bytes of memory (whatever
the session's ``truncation``, which decides what the model sees, not what the server keeps). Memory, not
characters: one character outside Latin-1 makes CPython store its whole string at 2 or 4 bytes a character."""
ITEM_OVERHEAD_BYTES = 64
"""What an item costs beyond its strings (its objects, the history's entries), so empty items are not free."""
UNANSWERED = "(no result: the call was not answered)"
"""What the model is told of a function call the client never answered."""


@dataclass
class Part:
    """One content part of an item."""

    type: Literal["input_text", "input_audio", "input_image", "output_text", "output_audio"]
    text: str = ""
    image_url: str | None = None
    detail: str | None = None

    def wire(self, *, heard_text: str | None = None) -> dict[str, Any]:
        """The part as the protocol shows it."""
        text = self.text if heard_text is None else heard_text
        if self.type in ("input_text", "output_text"):
            return {"type": self.type, "text": text}
        if self.type == "input_image":
            return {"type": "input_image", "image_url": self.image_url, "detail": self.detail or "auto"}
        return {"type": self.type, "transcript": text}


@dataclass
class Item:
    """A conversation item: a message, a function call, or a function call's output."""

    id: str
    role: Role
    parts: list[Part]
    status: Literal["completed", "incomplete", "in_progress"] = "completed"
    type: Literal["message", "function_call", "function_call_output"] = "message"
    call: ToolCall | None = None
    """The call of a ``function_call`` item; for ``function_call_output`` only its ``call_id`` counts."""
    output: str = ""
    """The output of a ``function_call_output`` item."""
    audio_ms: float = 0.0
    """Length of the item's audio (assistant: audio sent so far)."""
    words: list[WordTiming] = field(default_factory=list)
    """Assistant word timings, in ms from the start of the item's audio."""
    heard_ms: float | None = None
    """Where playback stopped; ``None`` means all of it was heard."""
    unheard: bool = False
    """User audio whose recognition failed: the words are lost, not absent."""

    @property
    def size(self) -> int:
        """Bytes of memory its text and image data occupy (its weight in the history's caps), a function call's
        name and arguments and a function call output's text included: each string's real size
        (``sys.getsizeof``, constant time), so a 7 MiB text with one emoji weighs 28 MiB, as it does in memory."""
        strings = [p.text for p in self.parts] + [p.image_url for p in self.parts if p.image_url]
        if self.call is not None:
            strings += [self.call.name, self.call.arguments]
        return sum(sys.getsizeof(text) for text in strings) + sys.getsizeof(self.output) + ITEM_OVERHEAD_BYTES

    @property
    def is_assistant_audio(self) -> bool:
        """True for a spoken reply, the only kind that can be truncated."""
        return self.role == "assistant" and any(p.type == "output_audio" for p in self.parts)

    def heard_text(self) -> str:
        """The transcript cut to the words heard."""
        full = " ".join(p.text for p in self.parts if p.type in ("output_audio", "output_text")).strip()
        if self.heard_ms is None:
            return full
        return heard_prefix(full, self.words, self.heard_ms, self.audio_ms)

    def wire(self) -> dict[str, Any]:
        """The item as the protocol shows it (assistant transcripts cut to what was heard)."""
        if self.call is not None and self.type == "function_call":
            return function_call_item(self.id, self.call.call_id, self.call.name, self.call.arguments,
                                      status=self.status)
        if self.call is not None and self.type == "function_call_output":
            return function_call_output_item(self.id, self.call.call_id, self.output)
        heard = self.heard_text() if self.heard_ms is not None else None
        content = [p.wire(heard_text=heard if p.type == "output_audio" else None) for p in self.parts]
        return {"id": self.id, "object": "realtime.item", "type": "message", "role": self.role,
                "status": self.status, "content": content}


def heard_prefix(full: str, words: list[WordTiming], heard_ms: float, total_ms: float) -> str:
    """The words of ``full`` heard in the first ``heard_ms``.

    With word timings a word counts once half of it has played; without them the text is cut in
    proportion to characters, at a word boundary. Chinese has no spaces: its words are characters,
    joined back without spaces, and a proportional cut may fall between any two of them.
    """
    if heard_ms <= 0 or not full:
        return ""
    if words:
        heard = [w.word for w in words if (w.start_ms + w.end_ms) / 2 <= heard_ms]
        return join_units([word.strip() for word in heard if word.strip()])
    if total_ms <= 0 or heard_ms >= total_ms:
        return full
    cut = int(len(full) * heard_ms / total_ms)
    if cut < len(full) and not full[cut].isspace() and not (has_han(full[cut]) or has_han(full[cut - 1:cut])):
        space = full.rfind(" ", 0, cut)
        cut = space if space > 0 else 0
    return full[:cut].rstrip()


def function_item(spec: FunctionCallItem | FunctionCallOutputItem) -> Item:
    """The item of a client's ``function_call`` or ``function_call_output``."""
    if isinstance(spec, FunctionCallItem):
        call = ToolCall(spec.name, spec.call_id or new_id("call"), spec.arguments)
        return Item(spec.id or new_id("item"), "assistant", [], type="function_call", call=call)
    return Item(spec.id or new_id("item"), "system", [], type="function_call_output",
                call=ToolCall("", spec.call_id), output=spec.output)


def client_item(spec: ce.MessageItem, decode_audio: Callable[[str], Any], *,
                event_id: str | None = None) -> tuple[Item, list[tuple[int, Any]]]:
    """The item a ``conversation.item.create`` describes, and the audio clips still to transcribe.

    ``decode_audio`` turns a base64 clip into 16 kHz samples; each clip comes back with the index of
    the part its transcript will fill.
    """
    parts: list[Part] = []
    clips: list[tuple[int, Any]] = []
    for content in spec.content:
        if isinstance(content, ce.InputText):
            parts.append(Part("input_text", content.text))
        elif isinstance(content, ce.InputImage):
            if not content.image_url.startswith("data:image/"):
                raise ProtocolError("input_image.image_url must be a data:image/... URL", code="invalid_value",
                                    param="item.content.image_url", event_id=event_id)
            parts.append(Part("input_image", image_url=content.image_url, detail=content.detail))
        elif isinstance(content, ce.InputAudio):
            parts.append(Part("input_audio", content.transcript or ""))
            if content.audio and not content.transcript:
                clips.append((len(parts) - 1, decode_audio(content.audio)))
        else:
            parts.append(Part("output_text" if spec.role == "assistant" else "input_text", content.text))
    return Item(spec.id or new_id("item"), spec.role, parts), clips


def _no_audio(_audio: str) -> Any:
    raise ProtocolError("audio content in response.input is not transcribed; send its transcript instead",
                        code="invalid_value", param="response.input")


def response_input_items(specs: list[Any], conversation: Conversation, *, event_id: str | None = None) -> list[Item]:
    """The items of an out-of-band response's ``input``: new items as given, references to earlier ones."""
    items: list[Item] = []
    for spec in specs:
        if isinstance(spec, ce.ItemReference):
            items.append(conversation.get(spec.id, event_id=event_id))
        elif isinstance(spec, ce.MessageItem):
            items.append(client_item(spec, _no_audio, event_id=event_id)[0])
        else:
            items.append(function_item(spec))
    return items


class HistoryAccount(Protocol):
    """Where a session's history memory is also counted beyond the session: its client address's and its worker's
    budgets (``bargein.server.history_budget``)."""

    def charge(self, size: int, *, refusable: bool) -> str | None:
        """Count ``size`` more bytes; a refusable charge over a budget is not counted and says why."""

    def refund(self, size: int) -> None:
        """``size`` bytes were let go."""


class Conversation:
    """The items of one session, in order."""

    def __init__(self, max_items: int = MAX_ITEMS, max_bytes: int = MAX_HISTORY_BYTES,
                 account: HistoryAccount | None = None) -> None:
        self._items: OrderedDict[str, Item] = OrderedDict()
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.account = account
        self._sizes: dict[str, int] = {}
        """Each item's size when it was added (text that grows later, a reply's, is short)."""
        self.bytes = 0
        self.forgotten = 0
        """Items dropped to stay within the caps."""

    def bind_budget(self, max_bytes: int, account: HistoryAccount | None) -> None:
        """Set the session's byte cap and the shared account (the server does, before the session gets any item)."""
        if self.account is not None:
            self.account.refund(self.bytes)
        self.max_bytes = max_bytes
        self.account = account
        if account is not None:
            account.charge(self.bytes, refusable=False)

    def release(self) -> None:
        """The session ended: give its bytes back to the shared account (the items stay until collected)."""
        if self.account is not None:
            self.account.refund(self.bytes)
            self.account = None

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._items.values())

    def get(self, item_id: str, *, event_id: str | None = None) -> Item:
        """The item, or a protocol error naming the unknown id."""
        item = self._items.get(item_id)
        if item is None:
            raise ProtocolError(f"item with item_id {item_id[:80]!r} not found", code="item_not_found",
                                param="item_id", event_id=event_id)
        return item

    def holds(self, item: Item) -> bool:
        """True while ``item`` itself is in the conversation (not deleted, not forgotten for the caps)."""
        return self._items.get(item.id) is item

    def last_id(self) -> str | None:
        """Id of the newest item."""
        return next(reversed(self._items), None) if self._items else None

    def add(self, item: Item, *, previous_item_id: str | None = None, event_id: str | None = None,
            from_client: bool = False) -> str | None:
        """Insert after ``previous_item_id`` (default: at the end); returns the id it follows.

        Past the session's caps the oldest items are forgotten. A client's item (``from_client``) that would take
        its address or its worker over their history budgets (what it adds net of what it makes the session
        forget) is refused (``history_budget_exceeded``) and the history left as it was; the server's own items
        (transcripts, replies) are always kept.
        """
        if item.id in self._items:
            raise ProtocolError(f"an item with id {item.id!r} already exists", code="item_already_exists",
                                param="item.id", event_id=event_id)
        if previous_item_id not in (None, "root"):
            self.get(previous_item_id, event_id=event_id)
        size = item.size
        if size > self.max_bytes and from_client:
            raise ProtocolError(f"the item holds {size} bytes in memory, over this session's history cap of "
                                f"{self.max_bytes} bytes", code="history_budget_exceeded", param="item",
                                event_id=event_id)
        before = self.bytes
        previous = self._insert(item, previous_item_id)
        self._sizes[item.id] = size
        self.bytes += size
        forgotten: list[tuple[str, Item, int]] = []
        while len(self._items) > 1 and (len(self._items) > self.max_items or self.bytes > self.max_bytes):
            key, old = self._items.popitem(last=False)
            forgotten.append((key, old, self._sizes.pop(key, 0)))
            self.bytes -= forgotten[-1][2]
        refusal = self._settle(self.bytes - before, from_client=from_client)
        if refusal is not None:
            self._undo(item, forgotten, before)
            raise ProtocolError(f"the item was not added: {refusal}; delete items or start a new session later",
                                code="history_budget_exceeded", param="item", event_id=event_id)
        self.forgotten += len(forgotten)
        return previous

    def _insert(self, item: Item, previous_item_id: str | None) -> str | None:
        if previous_item_id is None or previous_item_id == self.last_id():
            previous = self.last_id()
            self._items[item.id] = item
            return previous
        self._items[item.id] = item
        if previous_item_id == "root":
            self._items.move_to_end(item.id, last=False)
            return None
        entries = list(self._items.items())[:-1]
        index = next(i for i, (key, _) in enumerate(entries) if key == previous_item_id)
        entries.insert(index + 1, (item.id, item))
        self._items = OrderedDict(entries)
        return previous_item_id

    def _settle(self, grown: int, *, from_client: bool) -> str | None:
        """Tell the shared account what the history grew (or shrank) by; a refusal for a client item."""
        if self.account is None or grown == 0:
            return None
        if grown < 0:
            self.account.refund(-grown)
            return None
        return self.account.charge(grown, refusable=from_client)

    def _undo(self, item: Item, forgotten: list[tuple[str, Item, int]], before: int) -> None:
        """Put the history back as it was before ``item`` was added (and made ``forgotten`` go)."""
        self._items.pop(item.id, None)
        self._sizes.pop(item.id, None)
        for key, old, size in reversed(forgotten):
            if key != item.id:
                self._items[key] = old
                self._items.move_to_end(key, last=False)
                self._sizes[key] = size
        self.bytes = before

    def _let_go(self, size: int) -> None:
        self.bytes -= size
        if self.account is not None:
            self.account.refund(size)

    def delete(self, item_id: str, *, event_id: str | None = None) -> None:
        """Remove an item; unknown ids are a protocol error."""
        self.get(item_id, event_id=event_id)
        del self._items[item_id]
        self._let_go(self._sizes.pop(item_id, 0))

    def truncate(self, item_id: str, content_index: int, audio_end_ms: float, *,
                 event_id: str | None = None) -> float:
        """Keep only the first ``audio_end_ms`` of an assistant reply; returns the clamped figure.

        Past the end is clamped to the item's length rather than refused: clients round their
        playback cursor and a few ms over must never be an error.
        """
        item = self.get(item_id, event_id=event_id)
        if not item.is_assistant_audio:
            raise ProtocolError("only assistant messages with audio can be truncated", code="invalid_value",
                                param="item_id", event_id=event_id)
        if content_index != 0 or content_index >= len(item.parts):
            raise ProtocolError(f"content_index {content_index} out of range", code="invalid_value",
                                param="content_index", event_id=event_id)
        clamped = max(0.0, min(float(audio_end_ms), item.audio_ms))
        item.heard_ms = clamped
        if clamped < item.audio_ms:
            item.status = "incomplete"
        return clamped

    def function_call(self, call_id: str) -> Item | None:
        """The ``function_call`` item of ``call_id``, if the conversation holds one."""
        return next((item for item in self._items.values()
                     if item.type == "function_call" and item.call is not None and item.call.call_id == call_id), None)

    def chat_messages(self, instructions: str | None, items: Iterable[Item] | None = None) -> list[ChatMessage]:
        """The history (or ``items`` instead of it) as the LLM sees it: assistant turns hold heard text only.

        Each function call is followed at once by its output (wherever the output item lies), as chat
        APIs require; a call never answered gets :data:`UNANSWERED`.
        """
        messages: list[ChatMessage] = []
        if instructions:
            messages.append(ChatMessage("system", instructions))
        chosen = list(self._items.values() if items is None else items)
        outputs = {item.call.call_id: item.output for item in chosen
                   if item.type == "function_call_output" and item.call is not None}
        for item in chosen:
            if item.type == "function_call" and item.call is not None:
                messages.append(ChatMessage("assistant", "", tool_calls=(item.call,)))
                messages.append(ChatMessage("tool", outputs.get(item.call.call_id, UNANSWERED),
                                            tool_call_id=item.call.call_id))
                continue
            if item.type == "function_call_output":
                continue
            if item.role == "assistant":
                text = item.heard_text()
                if text:
                    messages.append(ChatMessage("assistant", text))
                continue
            text = " ".join(p.text for p in item.parts if p.type in ("input_text", "input_audio") and p.text)
            images = tuple(ChatImage(p.image_url) for p in item.parts if p.type == "input_image" and p.image_url)
            if text or images:
                messages.append(ChatMessage(item.role, text.strip(), images, private=item.role == "system"))
        return messages
