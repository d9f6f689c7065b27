"""Turning a model's output into tool calls: which tools it is offered, and reading the calls it writes.

Models with a Hermes/Qwen style chat template call a tool by writing
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; very small ones often drop the tags and
write the bare JSON object (or a fenced one) as the whole reply. :class:`ToolCallSplitter` separates
such calls from the spoken text as tokens stream in (holding back only what might be the start of a
tag, or a whole reply that begins like JSON), and :func:`resolve_call` checks each against the offered
tools, mending what can be mended and refusing (visibly, with the raw text) what cannot.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bargein.engines.base import (
    CancelToken,
    ChatMessage,
    GenerationOptions,
    LanguageModel,
    ReplyPiece,
    ToolCall,
    ToolCallingModel,
)
from bargein.tools.arguments import ArgumentError, check_arguments, parse_arguments

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
TOOLS_TAG = "<tools>"
"""How the template lists the tools: a reply that starts with it recites the prompt instead of answering."""
MAX_CALL_CHARS = 8_192
"""A call longer than this is cut off and refused: no tool here takes that much."""


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
                    keep = _partial_tag_length(self._pending, CLOSE_TAG)
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
            start = self._pending.find(OPEN_TAG)
            # A closing tag outside a call (a model that closes its call twice) is markup, never speech.
            stray = self._pending.find(CLOSE_TAG, 0, None if start < 0 else start)
            if stray >= 0:
                if stray:
                    out.append(self._pending[:stray])
                self._pending = self._pending[stray + len(CLOSE_TAG):]
                continue
            if start < 0:
                keep = max(_partial_tag_length(self._pending, OPEN_TAG), _partial_tag_length(self._pending, CLOSE_TAG))
                if len(self._pending) > keep:
                    out.append(self._pending[:len(self._pending) - keep])
                self._pending = self._pending[len(self._pending) - keep:]
                break
            if start:
                out.append(self._pending[:start])
            self._pending = self._pending[start + len(OPEN_TAG):]
            self._in_call = True
        return out

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
            raw, self._pending = self._pending.strip(), ""
            if raw.startswith(TOOLS_TAG):
                return [ToolCall(name="", call_id=new_call_id(), raw=raw[:200],
                                 refused="the model recited its tool list instead of answering")]
            several = _bare_calls(raw)
            if several is not None:  # one strict JSON call after another (the model dropped the tags)
                return [resolve_call(call, self.tools) for call in several]
            try:
                body, _ = parse_arguments(raw)
            except ArgumentError:
                body = {}
            if "name" not in body:  # it only looked like JSON: it is the reply
                return [raw] if raw else []
            self._call = [raw]
            return [self._close_call()]
        if self._in_call:
            self._take_call(self._pending)
            self._pending = ""
            if self._overlong:  # refused already, when it grew too long
                self._in_call = self._overlong = False
                return []
            return [self._close_call()]
        rest, self._pending = self._pending, ""
        return [rest] if rest else []

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


def _bare_calls(raw: str) -> list[str] | None:
    """The calls of a bare reply made only of two or more strict JSON calls (each with a ``name``),
    separated by white space or stray ``<tool_call>`` tags; ``None`` for anything else."""
    if len(raw) > MAX_CALL_CHARS:
        return None
    decoder = json.JSONDecoder()
    calls: list[str] = []
    rest = raw
    while True:
        rest = rest.strip()
        while rest.startswith((OPEN_TAG, CLOSE_TAG)):
            rest = rest.removeprefix(OPEN_TAG).removeprefix(CLOSE_TAG).strip()
        if not rest:
            break
        try:
            value, end = decoder.raw_decode(rest)
        except (ValueError, RecursionError):
            return None
        if not isinstance(value, dict) or "name" not in value:
            return None
        calls.append(rest[:end])
        rest = rest[end:]
    return calls if len(calls) > 1 else None


def _partial_tag_length(text: str, tag: str) -> int:
    """How many trailing characters of ``text`` could be the start of ``tag``."""
    for length in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-length:]):
            return length
    return 0


async def reply_pieces(llm: LanguageModel, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                       options: GenerationOptions) -> AsyncIterator[ReplyPiece]:
    """The model's reply with tool calls when it can make them; plain text from any other model."""
    if isinstance(llm, ToolCallingModel) and offered_tools(options):
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
    if not offered_tools(options):
        async for piece in text:
            yield piece
        return
    splitter = ToolCallSplitter(offered_tools(options))
    if already_written:
        splitter.feed(already_written)
    async for piece in text:
        for out in splitter.feed(piece):
            yield out
    if not cancel.cancelled:
        for out in splitter.finish():
            yield out
