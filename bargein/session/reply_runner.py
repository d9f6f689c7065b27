"""Starts and runs a session's replies, and routes the machine's actions about each to its handle.

Each reply is one :class:`~bargein.session.reply_handle.ReplyHandle`. Its task waits for the words it answers, tells
the machine what they are (``ReplyInputReady``) and, once the machine says so (``GenerateReply``), runs the pipeline
(LLM -> TTS), which hands every piece of text and audio to the machine (``ReplyText`` / ``ReplyAudio``); only what
the machine forwards is sent. Pacing keeps a reply at most ``output_lead_ms`` ahead of real-time playback, and a
reply whose words are all out stays live while the client plays that last stretch, so a barge-in pauses or cancels
it for real rather than after ``response.done``, and a pause stops it at the sample the client had reached.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from bargein.metrics.cost_meter import request_usage
from bargein.protocol import client_events as ce
from bargein.protocol.errors import EngineFailure, ProtocolError
from bargein.protocol.server_events import error_event, event, new_id
from bargein.protocol.session_config import SessionConfig
from bargein.session.core import vocabulary as v
from bargein.session.history import Conversation, Item, response_input_items
from bargein.session.outbound import Outbound, Outgoing
from bargein.session.play_out import Heard, PlayingOut
from bargein.session.reply_handle import Closing, ReplyHandle, ReplyWiring
from bargein.session.reply_pipeline import ReplyPipeline, ReplyPlan, generation_options
from bargein.session.reply_sink import HandleSink, Progress
from bargein.session.response_events import reply_state
from bargein.session.speculation import PrefetchedReply
from bargein.session.tool_use import PendingCalls, ToolSetup, tool_setup
from bargein.tools.registry import ToolRegistry
from bargein.values import ChatMessage, GenerationOptions, ToolCall

log = logging.getLogger(__name__)
RECENT_REPLIES = 4
"""Replies whose play estimate is kept, for a barge-in while the client still plays a finished one."""
class See(Protocol):
    """The ``see`` stage's hand in a reply's prompt (:class:`~bargein.session.eyes.SessionEyes`)."""

    def prompt(self, response_id: str, messages: list[ChatMessage]) -> list[ChatMessage]:
        """The reply's messages with the turn's images or the camera's note."""

    def context(self, messages: list[ChatMessage]) -> list[ChatMessage]:
        """The same without taking the turn's images (no side effects): a speculative reply's prompt."""

    def quote(self, messages: list[ChatMessage], instructions: str) -> str | None:
        """The reply's words when the user asks to read what the camera shows (None: the model answers)."""
Closed = Callable[[str, str, float, float, bool, bool], None]
"""``(response_id, status, sent_ms, heard_ms, output_queued, playing)``: a reply's ``response.done`` went out
(:meth:`~bargein.session.observers.SessionObserver.on_reply_closed`)."""
TIMED_OUT = "(no result: the client did not answer the call in time)"


@dataclass(frozen=True)
class ReplyRequest:
    """What a reply was asked for, resolved before it waits for the words it answers."""

    instructions: str
    max_tokens: int | None
    tools: ToolSetup
    context: list[Item] | None
    """The client's own input for the reply (``response.input``), in place of the conversation."""
    prefetch: bool
    """A speculative head start may be adopted (only in the reply's own voice and pace: no per-reply overrides)."""


class ReplyRunner:
    """The live and recently finished replies of one session."""

    def __init__(self, pipeline: ReplyPipeline, *, outbound: Outbound, conversation: Conversation,
                 feed: Callable[[v.Event], None], config: Callable[[], SessionConfig],
                 wait_for_words: Callable[[], Awaitable[None]],
                 take_prefetch: Callable[[list[ChatMessage], GenerationOptions], PrefetchedReply | None],
                 progress: Progress, closed: Closed, output_lead_ms: float = 1000.0,
                 builtins: ToolRegistry | None = None, heard: Heard | None = None, see: See | None = None) -> None:
        self.pipeline = pipeline
        self.see = see
        """The ``see`` stage's hand in a reply's prompt (the turn's images within their budget, the scene note)."""
        self.remembered: Callable[[list[ChatMessage]], list[ChatMessage]] | None = None
        """Long-term memory's hand in a reply's prompt (the recalled notes; a speculative head start's too)."""
        self.builtins = builtins
        """bargein's own tools, offered (and run here) when the session brings none."""
        self.pending = PendingCalls(self._call_timed_out, on_owed=lambda owed: self.feed(v.ToolWait(owed)))
        self.wiring = ReplyWiring(outbound, conversation, self.pending)
        self.outbound = outbound
        self.conversation = conversation
        self.feed = feed
        self.config = config
        self.wait_for_words = wait_for_words
        self.take_prefetch = take_prefetch
        self.progress = progress
        self.closed = closed
        self.output_lead_ms = output_lead_ms
        self.live: dict[str, ReplyHandle] = {}
        self.recent: deque[ReplyHandle] = deque(maxlen=RECENT_REPLIES)
        self.tasks: set[asyncio.Task[None]] = set()
        self.playing = PlayingOut(heard, feed)
        """Closed replies the client may still be playing: how much of each was heard is told when that ends."""
        self.closing = False

    def with_memory(self, messages: list[ChatMessage]) -> list[ChatMessage]:
        """``messages`` as the ``see`` stage would give them to a reply now (the camera's note, or in ``native`` mode
        the turn's frames so far, none taken) and with the session's recalled memories (unchanged without either):
        a speculative reply's prompt, which the reply adopts where its own prompt comes out the same."""
        if self.see is not None:
            messages = self.see.context(messages)
        return messages if self.remembered is None else self.remembered(messages)

    def default_tools(self) -> ToolSetup:
        """The tools a reply with no per-response overrides offers (a speculative head start must match)."""
        return tool_setup(self.config(), None, self.builtins)

    # -- starting and running a reply ---------------------------------------------------------------

    def start(self, response_id: str, trigger: str, params: ce.ResponseParams | None) -> None:
        """Open the reply's events and start its task; ``params`` apply to this reply only."""
        config = self.config()
        state = reply_state(response_id, config, params)  # the reply's format, voice and limit are fixed here
        handle = ReplyHandle(state, self.wiring, lead_ms=self.output_lead_ms)
        self.live[response_id] = handle
        self.recent.append(handle)
        handle.open()
        instructions = params.instructions if params and params.instructions else config.instructions
        task = asyncio.create_task(self._run(handle, instructions, params))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def generate(self, order: v.GenerateReply) -> None:
        """The machine's word to run a reply's pipeline (the reply's task, which fed the event it answers, reads it
        once that feed returns)."""
        if (handle := self.live.get(order.response_id)) is not None:
            handle.generation = order

    async def _run(self, handle: ReplyHandle, instructions: str, params: ce.ResponseParams | None) -> None:
        failed = False
        usage: dict[str, int] = {}
        request_usage.set(usage)  # this task's own: what the model says the reply's prompts used
        try:
            # checked when the response was created; resolved here, where a failure ends the reply cleanly
            request = self._request(handle, instructions, params)
            await self.wait_for_words()  # the reply may answer what the user said, so it needs the words
            if handle.token.cancelled:
                return
            self.feed(v.ReplyInputReady(handle.response_id, self._user_words()))
            if handle.generation is None:  # the machine ended it: nothing to answer
                return
            await self.pipeline.run(self._plan(handle, request, handle.generation), self._sink(handle), handle.token)
            await self._played_out(handle)
        except Exception as error:
            failed = True
            self._failed(handle, error)
        finally:
            self._used(handle, usage)
            if not handle.ended:
                self.feed(v.ReplyFinished(handle.response_id, failed=failed))

    def _used(self, handle: ReplyHandle, usage: dict[str, int]) -> None:
        """The model's own count of the reply's prompt tokens and of those whose KV cache it reused, where it
        told them (a model that does not keeps the estimate, and no cached tokens)."""
        if "prompt_tokens" not in usage:
            return
        handle.state.input_tokens, handle.state.cached_tokens = usage["prompt_tokens"], usage.get("cached_tokens", 0)
        self.progress(handle.response_id, "prompt_tokens", usage["prompt_tokens"])
        self.progress(handle.response_id, "cached_tokens", usage.get("cached_tokens", 0))

    def _request(self, handle: ReplyHandle, instructions: str, params: ce.ResponseParams | None) -> ReplyRequest:
        tools = tool_setup(self.config(), params, self.builtins)
        context = response_input_items(params.input, self.conversation) if params and params.input is not None \
            else None
        max_tokens = handle.state.max_output_tokens
        prefetch = params is None or (params.tools is None and params.tool_choice is None and context is None)
        return ReplyRequest(instructions, None if max_tokens == "inf" else max_tokens, tools, context, prefetch)

    def _plan(self, handle: ReplyHandle, request: ReplyRequest, order: v.GenerateReply) -> ReplyPlan:
        """The pipeline's plan: the model's answer (with a speculative head start it may adopt), or a fixed line (the
        machine's, or the camera's writing quoted to a request to read it) in the reply's voice and pace, with no
        tools."""
        state = handle.state
        messages = self.conversation.chat_messages(request.instructions, request.context)
        fixed_line = order.fixed_line
        if self.see is not None:
            if fixed_line is None and request.prefetch:  # a reply with per-response overrides is the model's
                fixed_line = self.see.quote(messages, request.instructions)
            messages = self.see.prompt(handle.response_id, messages)
        messages = messages if self.remembered is None else self.remembered(messages)
        # an estimate at 4 characters a token: counting words would walk the whole history's text here
        state.input_tokens = sum(len(m.content) for m in messages) // 4
        config = self.config()
        if fixed_line is not None:
            return ReplyPlan(handle.response_id, messages, state.audio, state.voice, state.output_format,
                             request.max_tokens, _said(fixed_line), speed=config.audio.output.speed)
        options = generation_options(request.max_tokens, request.tools, config.truncation_options())  # as below
        prefetched = self.take_prefetch(messages, options) if request.prefetch else None
        return ReplyPlan(handle.response_id, messages, state.audio, state.voice, state.output_format,
                         request.max_tokens, prefetched.adopt(handle.token) if prefetched is not None else None,
                         request.tools, config.audio.output.speed,
                         prefetched.spoken if prefetched is not None else None, truncation=config.truncation_options(),
                         prefetched_since=prefetched.unspoken_since if prefetched is not None else None)

    def _sink(self, handle: ReplyHandle) -> HandleSink:
        return HandleSink(handle, self.feed, self.progress)

    def _failed(self, handle: ReplyHandle, error: Exception) -> None:
        """Tell the client its reply failed: its own doing in its own words, an engine's with a stable code."""
        if isinstance(error, ProtocolError) and not isinstance(error, EngineFailure):
            # the client's own doing (an item its input names was deleted since): said as it is
            if not handle.ended:
                self.outbound.put(Outgoing(error_event(replace(
                    error, message=f"response {handle.response_id} failed: {error.message}"))))
            return
        log.exception("reply %s failed", handle.response_id, exc_info=error)
        if not handle.ended:
            # the details (upstream addresses, bodies) are in the log; the client gets a stable code,
            # and which stage failed when the engines said so (an EngineFailure's message)
            what = error.message if isinstance(error, EngineFailure) else "the reply failed in an engine"
            self.outbound.put(Outgoing(error_event(ProtocolError(
                f"{what}; the server's log has the details", code="engine_error", type="server_error"))))

    async def _played_out(self, handle: ReplyHandle) -> None:
        """Keep a spoken reply live while the client plays what pacing sent ahead (the machine's play-out timer
        bounds the wait): till then the user may still pause it, a cough resumes it from the cut and a question
        cancels it where it was heard. A reply that called a client's tools does not wait: the client sends their
        outputs and asks for the next reply once it has this one's ``response.done``."""
        if not handle.state.audio or handle.ended or handle.state.calls:
            return
        self.feed(v.ReplyPlayingOut(handle.response_id))
        await handle.played_out()  # or the machine's play-out timer ends it

    def _user_words(self) -> v.UserWords:
        """What the recogniser made of the user's last turn (the machine decides what a reply does about it)."""
        user_items = [item for item in self.conversation if item.role == "user"]
        if user_items and user_items[-1].unheard:
            return "lost"
        said = " ".join(p.text for p in user_items[-1].parts).strip() if user_items else ""
        return "some" if said else "none"

    def truncated(self, item_id: str) -> None:
        """The client truncated ``item_id`` to its playback cursor: a live reply of it cut short of the audio sent is
        told to the machine (which ends one that is only playing out its last stretch)."""
        for handle in list(self.live.values()):
            item = handle.state.item
            if item.id == item_id and item.heard_ms is not None and item.heard_ms < item.audio_ms:
                self.feed(v.ReplyTruncated(handle.response_id))

    # -- the machine's actions, routed to the reply's handle ----------------------------------------

    def forward(self, response_id: str, piece: v.AudioPiece) -> None:
        """Send a piece of audio the machine admitted."""
        self.live[response_id].forward(piece)

    def forward_text(self, response_id: str, text: str) -> None:
        """Send a piece of text the machine admitted."""
        self.live[response_id].forward_text(text)

    def hold(self, response_id: str, piece: v.AudioPiece | str) -> None:
        """Audio or text produced while paused waits, in order, for the resume."""
        self.live[response_id].hold(piece)

    def pause(self, response_id: str, item_id: str) -> None:
        """Stop sending at once; remember where the client's playback stands (the cut point)."""
        self.live[response_id].pause(item_id)

    def resume(self, response_id: str) -> None:
        """A false interruption: re-send from the cut point, then what was held, then carry on."""
        self.live[response_id].resume()

    def cancel(self, response_id: str, reason: str) -> None:
        """Stop every stage, drop queued audio, keep what was heard, emit ``response.done`` cancelled."""
        handle = self.live.pop(response_id)
        self._closed(handle, handle.cancel(reason, client_gone=self.closing))

    def finish(self, response_id: str, status: Literal["completed", "failed"]) -> None:
        """The reply ended by itself: closing events and ``response.done`` (completed or failed)."""
        handle = self.live.pop(response_id)
        self._closed(handle, handle.finish(status, client_gone=self.closing))

    def _closed(self, handle: ReplyHandle, closing: Closing) -> None:
        """Tell the observers of a reply's ``response.done``; one the client may still be playing is followed
        until its playback ends, when its heard audio is told again, for good."""
        self.closed(handle.response_id, closing.status, closing.sent_ms, closing.heard_ms, closing.output_queued,
                    closing.playing)
        if closing.playing:  # told after the close: an observer hears of the close first
            self.playing.add(handle)

    # -- what the session asks of its replies -------------------------------------------------------

    def all_paused(self) -> bool:
        """True when every live reply is paused (the user speaks over it): the history a reply to the user
        would follow is then :meth:`history_as_if_cut`, and stays so while the pause lasts."""
        return all(handle.paused is not None for handle in self.live.values())

    def history_as_if_cut(self) -> list[Item]:
        """The conversation as it will read if every paused reply is cancelled now (its item cut as a cancel cuts
        it, :meth:`~bargein.session.reply_handle.ReplyHandle.item_as_if_cancelled`), so a reply speculated during
        the pause is asked with the prompt the committed turn will ask."""
        cut = {handle.state.item.id: handle.item_as_if_cancelled() for handle in self.live.values()}
        return [cut.get(item.id, item) for item in self.conversation]

    def _call_timed_out(self, call_id: str) -> None:
        """Nobody answered ``call_id``: close it with an output that says so, so the history stays whole."""
        if self.conversation.function_call(call_id) is None:
            return
        item = Item(new_id("item"), "system", [], type="function_call_output", call=ToolCall("", call_id),
                    output=TIMED_OUT)
        previous = self.conversation.add(item)
        self.outbound.put(Outgoing(event("conversation.item.added", previous_item_id=previous, item=item.wire())))
        self.outbound.put(Outgoing(event("conversation.item.done", previous_item_id=previous, item=item.wire())))

    def cut_playing(self) -> None:
        """The user spoke while the client may still be playing a finished reply: keep what was heard.

        A client truncate, if one follows, replaces this estimate with its playback cursor (in the history and,
        within a grace period, in the heard-audio metric).
        """
        for handle in self._tracked():
            if (heard := handle.cut_by_speech()) is not None:
                self.playing.cut(handle, heard)

    def on_sent(self, item: Outgoing) -> None:
        """An audio delta left for the client: advance that reply's play estimate."""
        if item.response_id is None or not item.is_data:
            return
        handle = next((h for h in self.recent if h.response_id == item.response_id), None) \
            or self.playing.replies.get(item.response_id)  # an older reply the client may still play
        if handle is not None:
            handle.playback.on_sent(item.audio_ms)
            self.playing.sent(handle)

    def _tracked(self) -> list[ReplyHandle]:
        """The replies whose playback is followed: the recent ones, and older ones the client may still play."""
        recent = list(self.recent)
        ids = {handle.response_id for handle in recent}
        return recent + [handle for handle in self.playing.replies.values() if handle.response_id not in ids]

    def close(self) -> list[asyncio.Task[None]]:
        """Cancel every live reply's work (the session is ending); returns the tasks to await. The client stops
        playing: a closed reply it was still playing was heard as far as it had played."""
        self.closing = True
        self.playing.close()
        self.pending.close()
        for handle in self.live.values():
            handle.stop("session closed")
        for task in self.tasks:
            task.cancel()
        return list(self.tasks)


async def _said(text: str) -> AsyncIterator[str]:
    """A fixed line as the token stream a reply speaks."""
    yield text
