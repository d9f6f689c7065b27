"""Prompts for the embedded model: the GGUF's own chat template, with tools and tool results when offered.

Qwen2.5 (and other Hermes-style templates) describe the offered tools in the system turn, render an
assistant's earlier calls as ``<tool_call>`` blocks and a tool's output as a ``<tool_response>``; the
template does that itself when given ``tools`` and messages in the chat completions shape. When a call
is required, the assistant turn is begun with ``<tool_call>`` (and the tool's name when one is named),
so even a small model writes a call rather than an answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from bargein.engines.base import LanguageModel, LLMCapabilities
from bargein.engines.think.tool_calls import (
    OPEN_TAG,
    after_tool_result,
    chat_tool,
    forced_tool,
    offered_tools,
    split_calls,
)
from bargein.values import CancelToken, ChatMessage, GenerationOptions, ReplyPiece

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""The fallback template for a GGUF that carries none."""


def template_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """Messages as the chat template reads them; images are left to the scene describer upstream."""
    wire: list[dict[str, Any]] = []
    for message in messages:
        entry: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.tool_calls:
            entry["tool_calls"] = [{"id": call.call_id, "type": "function", "function": {
                "name": call.name, "arguments": _as_object(call.arguments)}} for call in message.tool_calls]
        if message.tool_call_id:
            entry["tool_call_id"] = message.tool_call_id
        wire.append(entry)
    return wire


def fold_tool_results(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """The conversation with each tool exchange written as plain text for a model offered no tools.

    A small model that sees its own ``<tool_call>`` turns and ``<tool_response>`` blocks without tools on
    offer imitates them (it echoes the call as JSON) instead of answering; told the result in words
    after the question, it answers with it.
    """
    names = {call.call_id: call.name for message in messages for call in message.tool_calls}
    folded: list[ChatMessage] = []
    for message in messages:
        if message.tool_calls:
            if message.content.strip():
                folded.append(ChatMessage("assistant", message.content))
            continue
        if message.role == "tool":
            name = names.get(message.tool_call_id or "") or "requested"
            folded.append(ChatMessage("system", f"The {name} tool answered: {message.content}\n"
                                      "Use this to answer the user in plain spoken words."))
            continue
        folded.append(message)
    return folded


def _as_object(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return arguments


def forced_prefix(options: GenerationOptions) -> str:
    """The text the assistant turn starts with when a call is required (empty when the model chooses)."""
    forced = forced_tool(options)
    if forced is None:
        return ""
    if not forced:
        return OPEN_TAG + "\n"
    return OPEN_TAG + "\n" + '{"name": ' + json.dumps(forced) + ', "arguments": '


def render(formatter: Any, messages: Sequence[ChatMessage], options: GenerationOptions) -> str:
    """The prompt text: the template applied to ``messages`` and the offered tools, plus any forced prefix."""
    tools: list[Mapping[str, Any]] = offered_tools(options)
    wire = template_messages(messages if tools else fold_tool_results(messages))
    if tools:
        prompt: str = formatter(messages=wire, tools=[chat_tool(tool) for tool in tools]).prompt
    else:
        prompt = formatter(messages=wire).prompt
    return prompt + forced_prefix(options)


class TemplateToolCalling(LanguageModel):
    """``stream`` and ``stream_reply`` for an engine whose ``_text`` streams the reply to a prompt built by
    :func:`render`: text only, or with the offered tools and the calls read out of the text."""

    @property
    def capabilities(self) -> LLMCapabilities:
        """It calls the tools it is offered (read out of its text)."""
        return LLMCapabilities(tools=True)

    def _text(self, messages: Sequence[ChatMessage], cancel: CancelToken,
              options: GenerationOptions) -> AsyncIterator[str]:
        raise NotImplementedError

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        """Yield the reply piece by piece (no tools offered); return soon after ``cancel`` fires."""
        async for piece in self._text(messages, cancel, replace(options or GenerationOptions(), tools=())):
            yield piece

    async def stream_reply(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                           options: GenerationOptions | None = None) -> AsyncIterator[ReplyPiece]:
        """Like :meth:`stream`, with the offered tools in the prompt and the model's calls yielded as such."""
        options = after_tool_result(messages, options or GenerationOptions())
        text = self._text(messages, cancel, options)
        async for piece in split_calls(text, options, cancel, already_written=forced_prefix(options)):
            yield piece
