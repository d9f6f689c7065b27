"""What every language model engine tells the model before the conversation: answers are spoken."""

from __future__ import annotations

from collections.abc import Sequence

from bargein.engines.base import ChatMessage

DEFAULT_SYSTEM_PROMPT = (
    "You are a friendly voice assistant having a spoken conversation: everything you write is read "
    "aloud. Reply in one or two short sentences of plain speech, like a person talking. Never use "
    "lists, numbered steps, markdown, emoji or symbols."
)
"""Short spoken answers: one or two sentences, nothing a speech synthesiser would read out as symbols."""


def with_system_prompt(messages: Sequence[ChatMessage], system_prompt: str | None) -> list[ChatMessage]:
    """``messages`` with ``system_prompt`` in front, unless the caller brought its own system message."""
    history = list(messages)
    if system_prompt and not any(message.role == "system" for message in history):
        history.insert(0, ChatMessage(role="system", content=system_prompt))
    return history
