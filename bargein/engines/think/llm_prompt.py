"""What every language model engine tells the model before the conversation (answers are spoken), and
how a long history is cut to fit a context without re-rendering it once per dropped message."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Sequence

from bargein.values import ChatMessage, opens_with_instructions

DEFAULT_SYSTEM_PROMPT = (
    "You are a friendly voice assistant having a spoken conversation: everything you write is read "
    "aloud. Reply in one or two short sentences of plain speech, like a person talking. Never use "
    "lists, numbered steps, markdown, emoji or symbols."
)
"""Short spoken answers: one or two sentences, nothing a speech synthesiser would read out as symbols."""


def with_system_prompt(messages: Sequence[ChatMessage], system_prompt: str | None) -> list[ChatMessage]:
    """``messages`` with ``system_prompt`` in front, unless the caller brought instructions of its own (a first
    system message no user caused): a private system message (a camera's note or its guidance, a client's own
    system item) is conversation, not instructions, and leaves the spoken style in place."""
    history = list(messages)
    if system_prompt and not opens_with_instructions(history):
        history.insert(0, ChatMessage(role="system", content=system_prompt))
    return history


class TokenCounts:
    """Each message's token count, computed once (the history repeats turn after turn); LRU-bounded."""

    def __init__(self, count: Callable[[ChatMessage], int], max_entries: int = 4096) -> None:
        self._count = count
        self.max_entries = max_entries
        self._known: OrderedDict[tuple[str, int, int], int] = OrderedDict()

    def __call__(self, message: ChatMessage) -> int:
        key = (message.role, len(message.content), hash(message.content))
        known = self._known.get(key)
        if known is None:
            known = self._known[key] = self._count(message)
            if len(self._known) > self.max_entries:
                self._known.popitem(last=False)
        else:
            self._known.move_to_end(key)
        return known


class HistoryTooLong(ValueError):
    """The history does not fit the context and truncation is disabled."""


def fit_history(history: Sequence[ChatMessage], cost: Callable[[ChatMessage], int], budget: int,
                render: Callable[[Sequence[ChatMessage]], list[int]], *, truncate: bool = True,
                retention_ratio: float | None = None) -> list[int]:
    """The rendered prompt of ``history`` without its oldest messages, so that it fits ``budget`` tokens.

    System messages and the last message are never dropped. Which messages go is decided from the
    per-message ``cost`` (cached by the caller), so the history is rendered once in the usual case
    and a few times at most, never once per dropped message. With ``retention_ratio`` a history that
    does not fit keeps only that fraction of its tokens; with ``truncate`` False it raises
    :class:`HistoryTooLong` instead.
    """
    costs = [cost(message) for message in history]
    total = sum(costs)
    if total > budget and not truncate:
        raise HistoryTooLong(f"the conversation (about {total} tokens) does not fit the model's context "
                             f"({budget} tokens for the prompt) and truncation is disabled")
    if total > budget and retention_ratio is not None:
        budget = max(1, min(budget, int(total * retention_ratio)))
    droppable = deque(i for i, message in enumerate(history[:-1]) if message.role != "system")
    dropped: set[int] = set()

    def drop(excess: int) -> None:
        while excess > 0 and droppable:
            index = droppable.popleft()
            dropped.add(index)
            excess -= costs[index]

    drop(total - budget)
    while True:
        tokens = render([message for i, message in enumerate(history) if i not in dropped])
        if len(tokens) <= budget or not droppable:
            return tokens
        if not truncate:
            raise HistoryTooLong(f"the conversation ({len(tokens)} tokens) does not fit the model's context "
                                 "and truncation is disabled")
        drop(len(tokens) - budget)  # the estimate was short: drop what covers the rest, render again
