"""Turning a model's output into tool calls: which tools it is offered, and reading the calls it writes.

Models with a Hermes/Qwen style chat template call a tool by writing
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; very small ones often drop the tags and
write the bare JSON object (or a fenced one) as the whole reply, or after a few words. Some go on to
invent the tool's answer in a ``<tool_response>`` block. :class:`ToolCallSplitter` separates such calls
from the spoken text as tokens stream in (holding back only what might be the start of a tag or of a
``{"name"`` object, or a whole reply that begins like JSON), drops invented tool responses unspoken, and
:func:`resolve_call` checks each call against the offered tools, mending what can be mended and refusing
(visibly, with the raw text) what cannot.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bargein.engines.base import LanguageModel
from bargein.engines.think.call_markup import CLOSE_TAG as CLOSE_TAG
from bargein.engines.think.call_markup import (
    FENCE,
    MARKUP,
    RESPONSE_CLOSE_TAG,
    RESPONSE_TAG,
    bare_call_start,
    bare_calls,
    partial_tag_length,
    without_stray_opener,
)
from bargein.engines.think.call_markup import MAX_CALL_CHARS as MAX_CALL_CHARS
from bargein.engines.think.call_markup import OPEN_TAG as OPEN_TAG
from bargein.tools.arguments import ArgumentError, check_arguments, parse_arguments
from bargein.values import CancelToken, ChatMessage, GenerationOptions, ReplyPiece, ToolCall

log = logging.getLogger(__name__)

TOOLS_TAG = "<tools>"
"""How the template lists the tools: a reply that starts with it recites the prompt instead of answering."""


def new_call_id() -> str:
    """A call id like the OpenAI ones."""
    return f"call_{secrets.token_hex(8)}"


def offered_tools(options: GenerationOptions) -> list[Mapping[str, Any]]:
    """The function tools the model may call under ``options.tool_choice``."""
    tools = [tool for tool in options.tools if tool.get("type", "function") == "function" and tool.get("name")]
    choice = options.tool_choice
    if choice == "none":
        return []
    if isinstance(choice, Mapping):
        return [tool for tool in tools if tool.get("name") == choice.get("name")]
    return tools


def forced_tool(options: GenerationOptions) -> str | None:
    """``""`` when some call is required, the tool's name when one is named, ``None`` when the model chooses."""
    choice = options.tool_choice
    if isinstance(choice, Mapping) and offered_tools(options):
        return str(choice.get("name"))
    if choice == "required" and offered_tools(options):
        return ""
    return None


def after_tool_result(messages: Sequence[ChatMessage], options: GenerationOptions) -> GenerationOptions:
    """``options`` without tools when the conversation ends with a tool's output and no call is required.

    For small embedded models: offered tools again right after a result, they call another tool (or the
    same one) instead of saying the answer, turn after turn.
    """
    if messages and messages[-1].role == "tool" and forced_tool(options) is None:
        return replace(options, tools=())
    return options


def chat_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A Realtime function tool in the chat completions shape (``{"type": "function", "function": {...}}``)."""
    return {"type": "function", "function": {
        "name": tool.get("name"), "description": tool.get("description", ""),
        "parameters": tool.get("parameters") or {"type": "object", "properties": {}}}}


def resolve_call(raw: str, tools: Sequence[Mapping[str, Any]], *, call_id: str | None = None,
                 name: str | None = None) -> ToolCall:
    """A :class:`ToolCall` from a model's call: ``raw`` is ``{"name", "arguments"}`` JSON, or just the
    arguments when ``name`` is given (as the OpenAI API sends them)."""
    call_id = call_id or new_call_id()
    by_name = {str(tool.get("name")): tool for tool in tools}
    try:
        if name is None:
            body, mended = parse_arguments(raw)
            name = body.get("name")
            arguments = body.get("arguments", body.get("parameters", {}))
            if isinstance(arguments, str):
                arguments_text = arguments
            else:
                arguments_text = json.dumps(arguments, ensure_ascii=False)
                mended = mended or not isinstance(arguments, dict)
        else:
            arguments_text, mended = raw, False
        if not isinstance(name, str) or name not in by_name:
            raise ArgumentError(f"the model called {name!r}, which is not one of the offered tools "
                                f"({', '.join(by_name) or 'none'})")
        checked = check_arguments(arguments_text, by_name[name].get("parameters"))
    except ArgumentError as error:
        return ToolCall(name=name if isinstance(name, str) else "", call_id=call_id, refused=str(error),
                        raw=raw[:MAX_CALL_CHARS])
    return ToolCall(name=name, call_id=call_id, arguments=checked.json,
                    repaired=mended or checked.repaired, raw=raw[:MAX_CALL_CHARS])


@dataclass
class ToolCallSplitter:
    """Splits streamed model text into spoken text and ``<tool_call>`` bodies (pure, no I/O)."""

    tools: Sequence[Mapping[str, Any]]
    _pending: str = ""
    _in_call: bool = False
    _call: list[str] = field(default_factory=list)
    _call_chars: int = 0
    _started: bool = False
    _bare: bool = False
    _overlong: bool = False
    """Inside a call already refused as too long: the rest of it, to its closing tag, is dropped."""
    _in_response: bool = False
    """Inside an invented ``<tool_response>``: dropped to its closing tag (or the end of the reply)."""
    _inline: str | None = None
    """Inside a bare JSON call written after some words: the fence that opened it (``""`` for none)."""
    _close_fence: bool = False
    """After an inline call opened by a code fence: the closing fence is markup too."""

    def feed(self, piece: str) -> list[ReplyPiece]:
        """The text and calls complete after ``piece``; a possible tag start is held back."""
        out: list[ReplyPiece] = []
        self._pending += piece
        if self._bare or not self._begin():
            return out
        while self._pending:
            if self._in_call:
                end = self._pending.find(CLOSE_TAG)
                if end < 0:
                    keep = partial_tag_length(self._pending, CLOSE_TAG)
                    self._take_call(self._pending[:len(self._pending) - keep])
                    self._pending = self._pending[len(self._pending) - keep:]
                    if self._call_chars > MAX_CALL_CHARS and not self._overlong:
                        out.append(self._close_call())
                        self._in_call = self._overlong = True  # the rest of it is not spoken either
                    break
                self._take_call(self._pending[:end])
                self._pending = self._pending[end + len(CLOSE_TAG):]
                if self._overlong:
                    self._in_call = self._overlong = False
                    continue
                out.append(self._close_call())
                continue
            if self._in_response:
                end = self._pending.find(RESPONSE_CLOSE_TAG)
                if end < 0:
                    keep = partial_tag_length(self._pending, RESPONSE_CLOSE_TAG)
                    self._pending = self._pending[len(self._pending) - keep:]
                    break
                self._pending = self._pending[end + len(RESPONSE_CLOSE_TAG):]
                self._in_response = False
                continue
            if self._inline is not None:
                call = self._inline_call()
                if call is None:
                    break
                out.append(call)
                continue
            if self._close_fence:
                head = self._pending.lstrip()
                if len(head) < len(FENCE) and FENCE.startswith(head):
                    break  # white space, or part of the closing fence: not yet known
                self._close_fence = False
                if head.startswith(FENCE):
                    self._pending = head[len(FENCE):]
                continue
            if not self._text(out):
                break
        return out

    def _text(self, out: list[ReplyPiece]) -> bool:
        """Release spoken text up to the next markup and step into it; False when the rest must wait."""
        marks = [(at, tag) for tag in MARKUP if (at := self._pending.find(tag)) >= 0]
        call_at, sure = bare_call_start(self._pending)
        at, tag = min(marks) if marks else (len(self._pending), "")
        if call_at is not None and call_at < at:
            if call_at:
                out.append(self._pending[:call_at])
            self._pending = self._pending[call_at:]
            if not sure:
                return False  # it may still become a call: held back until it is known
            fence = self._pending[:self._pending.find("{")]
            self._inline, self._pending = fence, self._pending[len(fence):]
            return True
        if not tag:
            keep = max(partial_tag_length(self._pending, markup) for markup in MARKUP)
            if len(self._pending) > keep:
                out.append(self._pending[:len(self._pending) - keep])
            self._pending = self._pending[len(self._pending) - keep:]
            return False
        if at:
            out.append(self._pending[:at])
        self._pending = self._pending[at + len(tag):]
        # a closing tag outside its block (a model that closes its call twice) is markup, never speech
        self._in_call = tag == OPEN_TAG
        self._in_response = tag == RESPONSE_TAG
        return True

    def _inline_call(self) -> ToolCall | None:
        """The inline call once its JSON object is complete (or too long to be one); None until then."""
        try:
            _, end = json.JSONDecoder().raw_decode(self._pending)
        except (ValueError, RecursionError):
            if len(self._pending) <= MAX_CALL_CHARS:
                return None
            end = len(self._pending)  # refused below as too long; what follows is spoken
        raw, self._pending = self._pending[:end], self._pending[end:]
        self._close_fence, self._inline = bool(self._inline), None
        if len(raw) > MAX_CALL_CHARS:
            return ToolCall(name="", call_id=new_call_id(), refused="the tool call is too long", raw=raw[:200])
        return resolve_call(raw, self.tools)

    def _begin(self) -> bool:
        """Decide, once the reply's first visible character is in, whether it is a bare JSON call."""
        if self._started:
            return True
        head = self._pending.lstrip()
        if not head or (head[0] == "<" and len(head) < len(TOOLS_TAG) and TOOLS_TAG.startswith(head)):
            return False  # nothing yet, or not yet known to be a <tool_call> or a recited <tools> list
        self._started = True
        if head[0] in "{`" or head.startswith(TOOLS_TAG):
            self._bare = True
            self._in_call = True
            return False
        return True

    def finish(self) -> list[ReplyPiece]:
        """Whatever is left when the model stops: held-back text, or a call missing its closing tag."""
        if self._bare:
            return self._finish_bare()
        if self._in_call:
            self._take_call(self._pending)
            self._pending = ""
            if self._overlong:  # refused already, when it grew too long
                self._in_call = self._overlong = False
                return []
            return [self._close_call()]
        rest, self._pending = self._pending, ""
        if self._in_response:
            return []
        if self._inline is not None:  # the model stopped inside it: read it as a whole bare reply is read
            fence, self._inline = self._inline, None
            return ToolCallSplitter(self.tools)._read_bare((fence + rest).strip())
        if self._close_fence and FENCE.startswith(rest.strip()):
            return []
        return [rest] if rest else []

    def _finish_bare(self) -> list[ReplyPiece]:
        raw, self._pending = self._pending.strip(), ""
        if raw.startswith(TOOLS_TAG):
            return [ToolCall(name="", call_id=new_call_id(), raw=raw[:200],
                             refused="the model recited its tool list instead of answering")]
        return self._read_bare(raw)

    def _read_bare(self, raw: str) -> list[ReplyPiece]:
        """A reply that began like JSON: its calls, and any words (or invented tool response) after a call."""
        several = bare_calls(raw)
        if several is not None:  # one strict JSON call after another (the model dropped the tags)
            return [resolve_call(call, self.tools) for call in several]
        try:
            head, end = json.JSONDecoder().raw_decode(raw)
        except (ValueError, RecursionError):
            head, end = None, len(raw)
        if isinstance(head, dict) and "name" in head and raw[end:].strip():
            tail = ToolCallSplitter(self.tools, _started=True)  # the rest is read like any reply's text
            return [resolve_call(raw[:end], self.tools), *tail.feed(raw[end:]), *tail.finish()]
        try:
            body, _ = parse_arguments(raw)
        except ArgumentError:
            body = {}
        if "name" not in body:  # it only looked like JSON: its words are the reply
            words = without_stray_opener(raw)
            return [words] if words else []
        self._call = [raw]
        return [self._close_call()]

    def _take_call(self, text: str) -> None:
        if self._call_chars <= MAX_CALL_CHARS and not self._overlong:
            self._call.append(text)
            self._call_chars += len(text)

    def _close_call(self) -> ToolCall:
        raw = "".join(self._call).strip()
        self._call, self._call_chars, self._in_call = [], 0, False
        if len(raw) > MAX_CALL_CHARS:
            return ToolCall(name="", call_id=new_call_id(), refused="the tool call is too long", raw=raw[:200])
        return resolve_call(raw, self.tools)


async def reply_pieces(llm: LanguageModel, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                       options: GenerationOptions) -> AsyncIterator[ReplyPiece]:
    """The model's reply with tool calls when it can make them; plain text from any other model."""
    if llm.capabilities.tools and offered_tools(options):
        async for piece in llm.stream_reply(messages, cancel=cancel, options=options):
            yield piece
        return
    async for text in llm.stream(messages, cancel=cancel, options=options):
        yield text


async def close_stream(stream: AsyncIterator[Any]) -> None:
    """Close a reply stream left before its end (such as :func:`reply_pieces`'), so its generation stops
    now rather than when the stream is collected."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


async def split_calls(text: AsyncIterator[str], options: GenerationOptions, cancel: CancelToken, *,
                      already_written: str = "") -> AsyncIterator[ReplyPiece]:
    """A model's streamed text as spoken pieces and tool calls; ``already_written`` is a forced start
    of the reply that lies in the prompt, read as though the model had written it."""
    tools = offered_tools(options)
    splitter = ToolCallSplitter(tools)
    if already_written:
        splitter.feed(already_written)
    async for piece in text:
        for out in _offered(splitter.feed(piece), tools):
            yield out
    if not cancel.cancelled:
        for out in _offered(splitter.finish(), tools):
            yield out


def _offered(pieces: list[ReplyPiece], tools: Sequence[Mapping[str, Any]]) -> list[ReplyPiece]:
    """``pieces`` less any call, when no tool was offered (the answer to a tool's result): call markup the model
    still writes is neither spoken nor run."""
    if tools:
        return pieces
    for call in (piece for piece in pieces if isinstance(piece, ToolCall)):
        log.info("a reply offered no tools wrote a call to %r: dropped, not spoken", call.name)
    return [piece for piece in pieces if isinstance(piece, str)]
