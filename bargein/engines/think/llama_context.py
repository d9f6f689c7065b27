"""A conversation as llama.cpp prompt tokens (:mod:`bargein.engines.think.llama_prompt`'s rendering), cut to
fit the context by cached per-message token counts, never by re-rendering once per dropped message."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from bargein.engines.think.llama_prompt import CHATML, render
from bargein.engines.think.llama_slots import shared_prefix
from bargein.engines.think.llm_prompt import HistoryTooLong, TokenCounts, fit_history, with_system_prompt
from bargein.values import ChatMessage, GenerationOptions, opens_with_instructions

CHARS_PER_TOKEN_CAP = 8
"""A message is cut to ``n_ctx * 8`` characters (its start and its end) before tokenising: more could never fit."""
MAX_SHORTENINGS = 4
"""Times a prompt is re-rendered after shortening messages that do not fit (once is the norm; more when a cut
text tokenises differently)."""
SHORTENING_SLACK = 16
"""Tokens cut beyond the measured excess: a cut's marker, and text that tokenises differently once cut."""
MIN_KEPT_TOKENS = 32
"""A message is never cut below this (its start and end): when the excess is the offered tools' and the
template's, cutting the instructions and the question to nothing would answer nothing; the reply then gets
the room that is left."""

INSTRUCTIONS_SHARE = 0.5
"""When the instructions alone leave no room, they are cut to this share of the prompt's budget together
(the rest is the conversation's and the question's)."""


PUBLIC_RENDERS = 16
"""Renders of instructions and tools kept to find prompts' public prefixes (sessions mostly share a few)."""


class PromptTooLong(RuntimeError):
    """Even the newest message alone does not fit the context."""


class LlamaPrompt:
    """Renders histories for one ``llama_cpp.Llama``; call only from the thread that owns the model."""

    def __init__(self, llama: Any, system_prompt: str | None, n_ctx: int | None = None) -> None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.llama = llama
        self.n_ctx = n_ctx or int(llama.n_ctx())
        """The context a prompt and its reply must fit (one sequence's, for the batched engine)."""
        self.system_prompt = system_prompt
        template = llama.metadata.get("tokenizer.chat_template") or CHATML
        self._eos = self._special(llama.token_eos())
        self._bos = self._special(llama.token_bos())
        self._formatter: Any = Jinja2ChatFormatter(template=template, eos_token=self._eos, bos_token=self._bos)
        self.counts = TokenCounts(self._count)
        probe = ChatMessage(role="user", content="hello")
        base = [ChatMessage(role="system", content="s")]
        # what a message costs beyond its own text (role markers, separators); 2 more for safety
        extra = (len(self.render([*base, probe], GenerationOptions())) - len(self.render(base, GenerationOptions()))
                 - self._text_tokens("hello"))
        self._per_message = max(0, extra) + 2
        self._public: dict[tuple[object, ...], list[int]] = {}

    def fit(self, messages: Sequence[ChatMessage], options: GenerationOptions) -> list[int]:
        """Prompt tokens for ``messages`` (oldest dropped first, as ``options`` allow) leaving
        ``options.max_tokens`` for the reply, or half the context when that is more."""
        return self.fit_public(messages, options)[0]

    def fit_public(self, messages: Sequence[ChatMessage], options: GenerationOptions) -> tuple[list[int], int]:
        """:meth:`fit`'s tokens, and how many of them no user wrote: the prompt's public prefix, as long as
        it agrees with the rendering of the instructions (the first system message, not the system notes after
        it) and the offered tools alone (the KV caches another session may reuse; see
        :mod:`~bargein.engines.think.llama_kv`)."""
        n_ctx = self.n_ctx
        limit = n_ctx * CHARS_PER_TOKEN_CAP
        history = [m if len(m.content) <= limit else replace(m, content=f"{m.content[:limit // 2]} … "
                                                                     f"{m.content[-(limit // 2):]}")
                   for m in with_system_prompt(messages, self.system_prompt)]
        # A reply of max_output_tokens "as many as the context holds" must not push the whole history out.
        budget = n_ctx - min(options.max_tokens, n_ctx // 2)
        capped = False
        for shortenings in range(MAX_SHORTENINGS + 1):
            try:
                tokens = fit_history(history, self.counts, budget, lambda kept: self.render(kept, options),
                                     truncate=options.truncate, retention_ratio=options.retention_ratio)
            except HistoryTooLong as error:
                raise PromptTooLong(str(error)) from None
            if len(tokens) <= budget or not options.truncate or shortenings == MAX_SHORTENINGS:
                break
            # Over budget with every droppable message gone: only the system messages and the newest one
            # are left, and one of them (a long tool output, transcript or instructions) is too long
            # alone. Truncation is on, so shorten them rather than fail the reply: instructions over their
            # share first (the same cut every turn), then whatever is still too long, longest first.
            shortened = None if capped else self._cap_instructions(history, budget)
            capped = True  # once: a second cap would cut again by how far the newest message overflows
            if shortened is None:
                shortened = self._shorten(history, len(tokens) - budget)
            if shortened is None:
                break
            history = shortened
        if len(tokens) >= n_ctx:
            raise PromptTooLong(f"the prompt ({len(tokens)} tokens) does not fit the context")
        return tokens, self._public_length(history, options, tokens)

    def _public_length(self, history: list[ChatMessage], options: GenerationOptions, tokens: list[int]) -> int:
        # the instructions only: a system message after them is a camera's note or a client's own system item,
        # what a user's camera saw or a user wrote, which another session must not be able to guess by its timing
        leading = [ChatMessage(role="system", content=history[0].content)] if opens_with_instructions(history) else []
        key = (tuple(message.content for message in leading), repr(options.tools), repr(options.tool_choice))
        public = self._public.get(key)
        if public is None:
            try:
                public = self.render(leading, options) if leading or options.tools else []
            except Exception:  # a template that cannot render instructions alone: nothing counts as public
                public = []
            if len(self._public) >= PUBLIC_RENDERS:
                self._public.pop(next(iter(self._public)))
            self._public[key] = public
        return shared_prefix(public, tokens)

    def _cap_instructions(self, history: list[ChatMessage], budget: int) -> list[ChatMessage] | None:
        """``history`` with its system messages cut to :data:`INSTRUCTIONS_SHARE` of ``budget`` together, each
        in proportion to its length; None when they already fit that share or none can be cut.

        The cut depends only on the instructions and the budget, never on the turn's question, so every turn
        of a conversation whose instructions are too long sends the same prefix and llama.cpp reuses its
        cached evaluation instead of evaluating the whole prompt again.
        """
        system = [i for i, message in enumerate(history) if message.role == "system"]
        tokens = {i: self._tokens(history[i].content) for i in system}
        total, share = sum(len(t) for t in tokens.values()), int(budget * INSTRUCTIONS_SHARE)
        if total <= share + SHORTENING_SLACK:  # already capped: a cut's ellipsis adds a token or two
            return None
        capped = list(history)
        for index in system:
            keep = max(MIN_KEPT_TOKENS, len(tokens[index]) * share // total)
            if keep < len(tokens[index]):
                capped[index] = self._cut(history[index], keep, tokens[index])
        return capped if capped != history else None

    def _cut(self, message: ChatMessage, keep: int, tokens: list[int] | None = None) -> ChatMessage:
        """``message`` cut to ``keep`` tokens: its start and its end, joined by an ellipsis (``tokens``: its
        text's tokens, when the caller has them already)."""
        if tokens is None:
            tokens = self._tokens(message.content)
        if keep >= len(tokens):
            return message
        head, tail = tokens[: keep // 2], tokens[len(tokens) - (keep - keep // 2):]
        return replace(message, content=f"{self._text(head)} … {self._text(tail)}".strip())

    def _shorten(self, history: list[ChatMessage], excess: int) -> list[ChatMessage] | None:
        """``history`` with its never-dropped messages (the system ones and the last), longest first, cut by
        ``excess`` tokens and a little more between them, each keeping its start and its end (a tool output's
        head, the question at the end of a long transcript) and never under :data:`MIN_KEPT_TOKENS`; None when
        none of them can be cut."""
        kept = [i for i, message in enumerate(history) if message.role == "system" or i == len(history) - 1]
        shortened = list(history)
        left = excess + SHORTENING_SLACK
        for index in sorted(kept, key=lambda i: self.counts(history[i]), reverse=True):
            if left <= 0:
                break
            message = history[index]
            tokens = self._tokens(message.content)
            keep = max(MIN_KEPT_TOKENS, len(tokens) - left)
            if keep >= len(tokens):
                continue
            left -= len(tokens) - keep
            shortened[index] = self._cut(message, keep, tokens)
        return shortened if left < excess + SHORTENING_SLACK else None

    def _text(self, tokens: list[int]) -> str:
        return str(self.llama.detokenize(tokens, special=False).decode("utf-8", "ignore"))

    def render(self, messages: Sequence[ChatMessage], options: GenerationOptions) -> list[int]:
        """The whole prompt (the offered tools, the generation prompt and any forced call prefix) as tokens."""
        prompt = render(self._formatter, messages, options)
        add_bos = not (self._bos and prompt.startswith(self._bos))
        tokens: list[int] = self.llama.tokenize(prompt.encode("utf-8"), add_bos=add_bos, special=True)
        return tokens

    def _count(self, message: ChatMessage) -> int:
        return self._text_tokens(message.content) + self._per_message

    def _text_tokens(self, text: str) -> int:
        return len(self._tokens(text))

    def tokens_of(self, text: str) -> list[int]:
        """``text``'s tokens as a message's content tokenises (no special tokens, no BOS)."""
        return self._tokens(text)

    def _tokens(self, text: str) -> list[int]:
        tokens: list[int] = self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        return tokens

    def _special(self, token: int) -> str:
        return str(self.llama.detokenize([token], special=True).decode("utf-8", "replace"))
