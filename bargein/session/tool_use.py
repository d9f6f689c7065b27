"""Which tools a reply offers, and the server-side half of calling them.

A session's own tools (``session.tools``, or a response's ``tools``) are the client's: a call to one
becomes a ``function_call`` item the client answers. A session that brings no tools is offered
bargein's built-in tools instead (when the server enables them), and those calls are run here, inside
the reply: the model is asked again with the result and the client hears only the answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from bargein.engines.base import LanguageModel
from bargein.engines.think.tool_calls import close_stream, forced_tool, reply_pieces
from bargein.protocol import client_events as ce
from bargein.protocol.errors import ProtocolError
from bargein.protocol.session_config import SessionConfig
from bargein.protocol.tool_items import validate_tool_choice, validate_tools
from bargein.tools.grounding import grounded
from bargein.tools.registry import ToolOutcome, ToolRegistry
from bargein.values import CancelToken, ChatMessage, GenerationOptions, ReplyPiece, ToolCall

log = logging.getLogger(__name__)
MAX_SERVER_ROUNDS = 3
"""Built-in calls one reply may chain before the model must answer in words."""
TOOL_RESULT_TIMEOUT_S = 60.0
"""How long a client function call waits for its output before it is closed as unanswered."""
MAX_PENDING_CALLS = 16
WORDS_ONLY_NOTE = "Call no tool now: answer the user's last message in plain spoken words."
"""Asked after a dropped call, with the tools still in the prompt (see :func:`asked_again_in_words`)."""


@dataclass(frozen=True)
class ToolSetup:
    """The tools one reply offers and which of them the server runs itself."""

    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str | dict[str, Any] = "auto"
    server_side: ToolRegistry | None = None

    def apply(self, options: GenerationOptions) -> GenerationOptions:
        """``options`` with these tools offered."""
        return replace(options, tools=self.tools, tool_choice=self.tool_choice)


def tool_setup(config: SessionConfig, params: ce.ResponseParams | None, builtins: ToolRegistry | None) -> ToolSetup:
    """The reply's tools: the response's own, else the session's, else the built-ins (run server-side).

    A response's ``tools`` / ``tool_choice`` were checked when it was created (see :func:`check_params`).
    """
    tools = validate_tools(params.tools, where="response.tools") if params and params.tools is not None \
        else config.tools
    choice: Any = params.tool_choice if params and params.tool_choice is not None else config.tool_choice
    if config.type == "transcription":
        return ToolSetup()
    if tools:
        beside = builtins.beside_client_tools() if builtins is not None else None
        if beside is None or choice == "none":
            return ToolSetup(tuple(tools), choice)
        return ToolSetup((*tools, *beside.definitions()), choice, beside)
    if builtins is None or choice == "none":
        return ToolSetup()
    return ToolSetup(tuple(builtins.definitions()), choice if isinstance(choice, str) else "auto", builtins)


def check_params(params: ce.ResponseParams | None, event_id: str | None) -> None:
    """Refuse a ``response.create`` whose own tools or tool choice are malformed (a ``ProtocolError``)."""
    if params is None or (params.tools is None and params.tool_choice is None):
        return
    try:
        tools = validate_tools(params.tools, where="response.tools") if params.tools is not None else []
        if params.tool_choice is not None:
            validate_tool_choice(params.tool_choice, tools, where="response.tool_choice")
    except ProtocolError as error:
        raise ProtocolError(error.message, code=error.code, param=error.param, event_id=event_id) from None


ServerCallReport = Callable[[ToolCall, ToolOutcome], None]


async def reply_with_tools(llm: LanguageModel, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                           options: GenerationOptions, server_side: ToolRegistry | None,
                           report: ServerCallReport, first: AsyncIterator[Any] | None = None,
                           ) -> AsyncIterator[ReplyPiece]:
    """The reply's text and client calls; built-in calls are run and the model asked again with the result.

    A built-in call the model chose (not a required one) whose arguments share nothing with what the user
    said or a tool answered (:func:`ungrounded_call`) is not run: when the round opens with it, the model is
    asked again for words (:func:`asked_again_in_words`). ``first`` is a stream already started for the first
    round (a speculative head start, which makes the same decision before the commit).
    """
    history = list(messages)
    for round_index in range(MAX_SERVER_ROUNDS + 1):
        if round_index == MAX_SERVER_ROUNDS:  # the model has made its calls: now it answers in words
            options = replace(options, tools=())
        ran: list[ChatMessage] = []
        source = first if first is not None else reply_pieces(llm, history, cancel=cancel, options=options)
        first = None
        drops = partial(ungrounded_call, messages=history, options=options, server_side=server_side)
        async for piece in answered_in_words(source, llm, history, cancel=cancel, options=options, drops_call=drops):
            if drops(piece):
                continue  # the reply is under way: this call is left out, the rest goes on
            if isinstance(piece, ToolCall) and server_side is not None and (piece.name in server_side
                                                                          or piece.refused):
                # a refused call is answered with the reason, so the model says it cannot rather than guess
                outcome = ToolOutcome(json.dumps({"error": piece.refused}), ok=False) if piece.refused \
                    else await server_side.run_async(piece.name, piece.arguments)
                report(piece, outcome)
                ran += [ChatMessage("assistant", "", tool_calls=(piece,)),
                        ChatMessage("tool", outcome.output, tool_call_id=piece.call_id)]
                continue
            yield piece
        if not ran or cancel.cancelled:
            return
        history += ran
        # a required or named call has been made: what follows the result is the model's own choice
        options = replace(options, tool_choice="auto")


async def answered_in_words(stream: AsyncIterator[ReplyPiece], llm: LanguageModel, messages: Sequence[ChatMessage],
                            *, cancel: CancelToken, options: GenerationOptions,
                            drops_call: Callable[[ToolCall], bool]) -> AsyncIterator[ReplyPiece]:
    """``stream``, except that a call it opens with (before any words or other call) that ``drops_call``
    drops is replaced by the model's answer in words to ``messages`` (:func:`asked_again_in_words`); the
    stream is closed first, so its generation stops. Later calls pass through. A reply and its speculative
    head start both read the model this way, so they decide alike."""
    said = False
    async for piece in stream:
        if isinstance(piece, ToolCall) and not said and drops_call(piece):
            await close_stream(stream)
            async for text in asked_again_in_words(llm, messages, cancel=cancel, options=options):
                yield text
            return
        said = said or not isinstance(piece, str) or bool(piece.strip())
        yield piece


async def asked_again_in_words(llm: LanguageModel, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                               options: GenerationOptions) -> AsyncIterator[str]:
    """The model's answer in words to ``messages``, after it opened a reply with a call that was dropped.

    The tools stay in the prompt and a note after the conversation asks for words: the prompt then only
    appends to the one just evaluated (and warmed while the user spoke), so an engine with a prompt cache
    evaluates the note alone. Without the tools' descriptions the prompt would share only what precedes
    them, and everything after (a memory session's notes, the conversation) would be evaluated again
    after the user stopped. A model that opens with a call even so is asked again without tools."""
    stream = reply_pieces(llm, [*messages, ChatMessage("system", WORDS_ONLY_NOTE)], cancel=cancel, options=options)
    said = False
    async for piece in stream:
        if isinstance(piece, ToolCall):
            if said:
                continue  # words are under way: a later call is left out, as without tools
            await close_stream(stream)
            async for text in reply_pieces(llm, messages, cancel=cancel, options=replace(options, tools=())):
                if isinstance(text, str):
                    yield text
            return
        said = said or bool(piece.strip())
        yield piece


def ungrounded_call(piece: ReplyPiece, messages: Sequence[ChatMessage], options: GenerationOptions,
                    server_side: ToolRegistry | None) -> bool:
    """True for a built-in call the model chose (not a required or named one) whose arguments share nothing
    with what the user said or a tool answered in ``messages`` (:func:`~bargein.tools.grounding.grounded`):
    the model filled it in from the tool's description. A call that names a tool nobody offered (the embedded
    model called ``amity({})`` for "He might even have been made amiable himself.") rests on nothing either:
    told so, it would spend a second round on the refusal. (A refusal without a name, such as a recited tool
    list or an overlong call, is still answered with its reason.) Such a call is not run (logged here): when the
    reply opens with it, the model is asked again without tools and answers in words; later in a reply, it
    is left out."""
    if not isinstance(piece, ToolCall) or server_side is None or forced_tool(options) is not None:
        return False
    if piece.refused and piece.name and piece.name not in server_side:
        log.info("dropped a call to %r, which no one offered; answering without tools", piece.name)
        return True
    if piece.name not in server_side:
        return False
    told = " ".join(message.content for message in messages  # not the server's own example exchange
                    if message.role in ("user", "tool") and not message.private)
    if grounded(piece.arguments, told):
        return False
    log.info("dropped an ungrounded call %s(%s); answering without tools", piece.name, piece.arguments)
    return True


def prime_default_prompt(llm: LanguageModel, builtins: ToolRegistry | None) -> bool:
    """Have the model evaluate a default session's prompt (instructions and offered tools) ahead of the
    first turn, where it can (``prefill``); the first session then reuses it instead of waiting for it."""
    if not llm.capabilities.prefill:
        return False
    config = SessionConfig()
    options = tool_setup(config, None, builtins).apply(GenerationOptions())
    llm.prefill([ChatMessage("system", config.instructions), ChatMessage("user", "Hello.")], options)
    return True


class PendingCalls:
    """Client function calls waiting for their output, each closed as unanswered after a timeout.

    ``on_owed(True)`` when the first call starts waiting, ``on_owed(False)`` when the last one is settled.
    """

    def __init__(self, on_timeout: Callable[[str], None], timeout_s: float = TOOL_RESULT_TIMEOUT_S, *,
                 on_owed: Callable[[bool], None] = lambda owed: None) -> None:
        self.on_timeout = on_timeout
        self.on_owed = on_owed
        self.timeout_s = timeout_s
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._timers

    def add(self, call_id: str) -> None:
        """Start waiting for ``call_id``'s output (the oldest wait is dropped past the bound)."""
        if len(self._timers) >= MAX_PENDING_CALLS:
            oldest = next(iter(self._timers))
            self._expire(oldest)
        loop = asyncio.get_running_loop()
        first = not self._timers
        self._timers[call_id] = loop.call_later(self.timeout_s, self._expire, call_id)
        if first:
            self.on_owed(True)

    def answer(self, call_id: str) -> bool:
        """The output arrived; False when nothing was waiting for it."""
        timer = self._timers.pop(call_id, None)
        if timer is None:
            return False
        timer.cancel()
        if not self._timers:
            self.on_owed(False)
        return True

    def _expire(self, call_id: str) -> None:
        timer = self._timers.pop(call_id, None)
        if timer is not None:
            timer.cancel()
            self.on_timeout(call_id)
            if not self._timers:
                self.on_owed(False)

    def close(self) -> None:
        """Stop every timer (the session is ending)."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
