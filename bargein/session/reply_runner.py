"""Carries out the machine's decisions about replies: start, forward, hold, pause, resume, cancel, finish.

Each reply is one :class:`LiveReply`. Its pipeline (LLM -> TTS) runs as a task and hands every piece of
text and audio to the machine (``ReplyText`` / ``ReplyAudio``); only what the machine forwards is sent.
Pacing keeps a reply at most ``output_lead_ms`` ahead of real-time playback, and a reply whose words are
all out stays live while the client plays that last stretch, so a barge-in pauses or cancels it for real
rather than after ``response.done``, and a pause stops it at the sample the client had reached.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Literal

from bargein.engines.fallback import StageFallback
from bargein.protocol import client_events as ce
from bargein.protocol.errors import EngineFailure, ProtocolError, fallback_error
from bargein.protocol.server_events import error_event, event, new_id
from bargein.protocol.session_config import SessionConfig
from bargein.session.core import vocabulary as v
from bargein.session.history import Conversation, Item, response_input_items
from bargein.session.live_reply import AudioPiece, LiveReply, Pause, restarted_clocks, resumption
from bargein.session.outbound import Outbound, Outgoing
from bargein.session.play_out import Heard, PlayingOut, last_stretch_played
from bargein.session.playback import Pacer
from bargein.session.reply_pipeline import ReplyPipeline, ReplyPlan, generation_options
from bargein.session.reply_sink import ReplySink
from bargein.session.response_events import reply_state
from bargein.session.speculation import PrefetchedReply
from bargein.session.tool_use import PendingCalls, ToolSetup, tool_setup
from bargein.tools.registry import ToolOutcome, ToolRegistry
from bargein.values import CancelToken, ChatMessage, GenerationOptions, ToolCall

log = logging.getLogger(__name__)
DIDNT_CATCH = "Sorry, I didn't catch that. Could you say it again?"
"""The reply to a turn whose words the recogniser lost (it failed or timed out)."""
RECENT_REPLIES = 4
"""Replies whose play estimate is kept, for a barge-in while the client still plays a finished one."""
Progress = Callable[[str, str, int], None]
"""``(response_id, stage, count)``: a pipeline stage was reached, or tokens were produced."""
Closed = Callable[[str, str, float, float, bool, bool], None]
"""``(response_id, status, sent_ms, heard_ms, output_queued, playing)``: a reply's ``response.done`` went out
(:meth:`~bargein.session.observers.SessionObserver.on_reply_closed`)."""
TIMED_OUT = "(no result: the client did not answer the call in time)"


class ReplyRunner:
    """The live and recently finished replies of one session."""

    def __init__(self, pipeline: ReplyPipeline, *, outbound: Outbound, conversation: Conversation,
                 feed: Callable[[v.Event], None], config: Callable[[], SessionConfig],
                 wait_for_words: Callable[[], Awaitable[None]],
                 take_prefetch: Callable[[list[ChatMessage], GenerationOptions], PrefetchedReply | None],
                 progress: Progress, closed: Closed, output_lead_ms: float = 1000.0,
                 builtins: ToolRegistry | None = None, heard: Heard | None = None) -> None:
        self.pipeline = pipeline
        self.builtins = builtins
        """bargein's own tools, offered (and run here) when the session brings none."""
        self.pending = PendingCalls(self._call_timed_out, on_owed=lambda owed: self.feed(v.ToolWait(owed)))
        self.outbound = outbound
        self.conversation = conversation
        self.feed = feed
        self.config = config
        self.wait_for_words = wait_for_words
        self.take_prefetch = take_prefetch
        self.progress = progress
        self.closed = closed
        self.output_lead_ms = output_lead_ms
        self.live: dict[str, LiveReply] = {}
        self.recent: deque[LiveReply] = deque(maxlen=RECENT_REPLIES)
        self.tasks: set[asyncio.Task[None]] = set()
        self.playing = PlayingOut(heard)
        """Closed replies the client may still be playing: how much of each was heard is told when that ends."""
        self.closing = False

    def _emit(self, item: Outgoing) -> None:
        self.outbound.put(item)

    def tell_fallback(self, reply: LiveReply, fallback: StageFallback) -> None:
        """Tell the client that ``reply`` is a stage's fallback (the LLM's spoken apology): an ``error`` before
        its ``response.done``, which stays ``completed``; the apology is still spoken and the session goes on."""
        if not reply.ended:
            self._emit(Outgoing(error_event(fallback_error(reply.response_id, fallback.code, fallback.reason))))

    def default_tools(self) -> ToolSetup:
        """The tools a reply with no per-response overrides offers (a speculative head start must match)."""
        return tool_setup(self.config(), None, self.builtins)

    def start(self, response_id: str, trigger: str, params: ce.ResponseParams | None) -> None:
        """Open the reply's events and start its pipeline; ``params`` apply to this reply only."""
        config = self.config()
        state = reply_state(response_id, config, params)  # the reply's format, voice and limit are fixed here
        reply = LiveReply(state, CancelToken(), Pacer(self.output_lead_ms))
        self.live[response_id] = reply
        self.recent.append(reply)
        state.open(self._emit, self.conversation)
        instructions = params.instructions if params and params.instructions else config.instructions
        max_tokens = state.max_output_tokens
        task = asyncio.create_task(self._run(reply, instructions, None if max_tokens == "inf" else max_tokens,
                                             trigger, params))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, reply: LiveReply, instructions: str, max_tokens: int | None, trigger: str,
                   params: ce.ResponseParams | None) -> None:
        state = reply.state
        failed = False
        try:
            # checked when the response was created; resolved here, where a failure ends the reply cleanly
            tools = tool_setup(self.config(), params, self.builtins)
            context = response_input_items(params.input, self.conversation) if params and params.input is not None \
                else None
            # a head start's first clause is used only in the reply's own voice and pace (ReplyPlan.prespoken)
            prefetch = params is None or (params.tools is None and params.tool_choice is None and context is None)
            await self.wait_for_words()  # the reply answers what the user said, so it needs the words
            if reply.cancel.cancelled:
                return
            lost = trigger == "turn_detected" and self._last_user_unheard()
            if trigger == "turn_detected" and not self._last_user_text() and not lost:
                log.info("reply %s: the turn had no words, so nothing to answer", reply.response_id)
                return
            messages = self.conversation.chat_messages(instructions, context)
            # an estimate at 4 characters a token: counting words would walk the whole history's text here
            state.input_tokens = sum(len(m.content) for m in messages) // 4
            config = self.config()
            options = generation_options(max_tokens, tools, config.truncation_options())  # as the plan's below
            prefetched = self.take_prefetch(messages, options) if prefetch and not lost else None
            if lost:  # the recogniser lost the words: say so, in the reply's voice and pace, with no tools
                plan = ReplyPlan(reply.response_id, messages, state.audio, state.voice,
                                 state.output_format, max_tokens, _said(DIDNT_CATCH), speed=config.audio.output.speed)
            else:
                plan = ReplyPlan(reply.response_id, messages, state.audio, state.voice,
                                 state.output_format, max_tokens,
                                 prefetched.adopt(reply.cancel) if prefetched is not None else None, tools,
                                 config.audio.output.speed, prefetched.spoken if prefetched is not None else None,
                                 truncation=config.truncation_options())
            await self.pipeline.run(plan, ReplySink(self, reply), reply.cancel)
            await self._played_out(reply)
        except Exception as error:
            failed = True
            if isinstance(error, ProtocolError) and not isinstance(error, EngineFailure):
                # the client's own doing (an item its input names was deleted since): said as it is
                if not reply.ended:
                    self._emit(Outgoing(error_event(replace(error, message=f"response {reply.response_id} "
                                                                           f"failed: {error.message}"))))
                return
            log.exception("reply %s failed", reply.response_id)
            if not reply.ended:
                # the details (upstream addresses, bodies) are in the log; the client gets a stable code,
                # and which stage failed when the engines said so (an EngineFailure's message)
                what = error.message if isinstance(error, EngineFailure) else "the reply failed in an engine"
                self._emit(Outgoing(error_event(ProtocolError(
                    f"{what}; the server's log has the details", code="engine_error", type="server_error"))))
        finally:
            if not reply.ended:
                self.feed(v.ReplyFinished(reply.response_id, failed=failed))

    async def _played_out(self, reply: LiveReply) -> None:
        """Keep a spoken reply live while the client plays what pacing sent ahead (``last_stretch_played``): till then
        the user may still pause it, a cough resumes it from the cut and a question cancels it where it was heard.
        A reply that called a client's tools does not wait: the client sends their outputs and asks for the next
        reply once it has this one's ``response.done``."""
        if not reply.state.audio or reply.ended or reply.state.calls:
            return
        self.feed(v.ReplyPlayingOut(reply.response_id))
        reply.playing_out = True
        await last_stretch_played(reply)  # or the machine's play-out timer ends it

    def truncated(self, item_id: str) -> None:
        """The client truncated ``item_id``. A reply of it that is only playing out its last stretch, not paused (a
        pause waits for its verdict), was stopped by the client: it ends now, so a ``response.create`` sent right
        behind the truncate finds no reply in progress."""
        for reply in list(self.live.values()):
            item = reply.state.item
            if (reply.playing_out and reply.pause is None and item.id == item_id and item.heard_ms is not None
                    and item.heard_ms < item.audio_ms):
                self.feed(v.ReplyFinished(reply.response_id))

    def _last_user_unheard(self) -> bool:
        user_items = [item for item in self.conversation if item.role == "user"]
        return bool(user_items) and user_items[-1].unheard

    def _last_user_text(self) -> str:
        user_items = [item for item in self.conversation if item.role == "user"]
        return " ".join(p.text for p in user_items[-1].parts).strip() if user_items else ""

    # -- output the machine admitted or held --------------------------------------------------------

    def forward(self, response_id: str, payload: object) -> None:
        """Send a piece of audio the machine admitted."""
        assert isinstance(payload, AudioPiece)
        reply = self.live[response_id]
        reply.forwarded += payload.data
        reply.state.audio_delta(self._emit, payload.data, payload.duration_ms, payload.words)

    def forward_text(self, response_id: str, text: str) -> None:
        """Send a piece of text the machine admitted."""
        self.live[response_id].state.text_delta(self._emit, text)

    def hold(self, response_id: str, payload: object) -> None:
        """Audio or text produced while paused waits, in order, for the resume."""
        assert isinstance(payload, AudioPiece | str)
        pause = self.live[response_id].pause
        assert pause is not None
        pause.held.append(payload)

    # -- pause and resume ---------------------------------------------------------------------------

    def pause(self, response_id: str, item_id: str) -> None:
        """Stop sending at once; remember where the client's playback stands (the cut point)."""
        reply = self.live[response_id]
        self.outbound.purge(response_id)
        cut_ms = reply.playback.heard_ms()
        reply.pause = Pause(cut_ms, item_id)
        reply.gate.clear()
        self._emit(Outgoing(event("bargein.reply.paused", response_id=response_id, item_id=reply.state.item.id,
                                  segment_item_id=item_id, audio_end_ms=round(cut_ms, 3))))

    def all_paused(self) -> bool:
        """True when every live reply is paused (the user speaks over it): the history a reply to the user
        would follow is then :meth:`history_as_if_cut`, and stays so while the pause lasts."""
        return all(reply.pause is not None for reply in self.live.values())

    def history_as_if_cut(self) -> list[Item]:
        """The conversation as it will read if every paused reply is cancelled now (its item cut as
        :meth:`cancel` cuts it, :meth:`~bargein.session.live_reply.LiveReply.cut_now`), so a reply speculated
        during the pause is asked with the prompt the committed turn will ask."""
        cut: dict[str, Item] = {}
        for reply in self.live.values():
            if reply.pause is not None and reply.state.audio:
                audio_ms, heard_ms = reply.cut_now()
                cut[reply.state.item.id] = replace(reply.state.item, audio_ms=audio_ms, heard_ms=heard_ms)
        return [cut.get(item.id, item) for item in self.conversation]

    def resume(self, response_id: str) -> None:
        """A false interruption: re-send from the cut point, then what was held, then carry on."""
        reply = self.live[response_id]
        pause, reply.pause = reply.pause, None
        assert pause is not None
        item = reply.state.item
        cut = resumption(bytes(reply.forwarded), item.heard_ms if item.heard_ms is not None else pause.cut_ms,
                         reply.state.output_format, item.words)
        del reply.forwarded[cut.cut_byte:]
        item.words = cut.kept_words
        item.audio_ms = cut.cut_ms
        item.heard_ms = None
        item.status = "in_progress"
        reply.playback, reply.pacer = restarted_clocks(cut.cut_ms, self.output_lead_ms)
        self._emit(Outgoing(event("bargein.reply.resumed", response_id=response_id, item_id=item.id,
                                  audio_start_ms=round(cut.cut_ms, 3))))
        for piece in [*cut.pieces, *pause.held]:
            if isinstance(piece, str):
                self.forward_text(response_id, piece)
            elif isinstance(piece, ToolCall):
                self.tool_call(reply, piece)
            else:
                self.forward(response_id, piece)
        reply.gate.set()

    # -- the end of a reply -------------------------------------------------------------------------

    def cancel(self, response_id: str, reason: str) -> None:
        """Stop every stage, drop queued audio, keep what was heard, emit ``response.done`` cancelled."""
        reply = self.live.pop(response_id)
        reply.cancel.cancel(reason)
        self.outbound.purge(response_id)
        reply.end()
        item = reply.state.item
        if reply.state.audio:
            item.audio_ms, item.heard_ms = reply.cut_now()
        reply.pause = None
        self._close(reply, "cancelled", reason)

    def finish(self, response_id: str, status: str) -> None:
        """The reply ended by itself: closing events and ``response.done``. One that failed while paused keeps,
        as a cancelled one does, only what was heard up to the pause; one that failed while playing keeps only
        the words of the audio it sent (a clause's text goes out with its first audio, not with its last)."""
        reply = self.live.pop(response_id)
        reply.end()
        item = reply.state.item
        if reply.pause is not None:
            self.outbound.purge(response_id)
            if reply.state.audio:
                item.audio_ms, item.heard_ms = reply.cut_now()
            reply.pause = None
        elif status == "failed" and reply.state.audio and item.heard_ms is None:
            item.heard_ms = item.audio_ms
        self._close(reply, "failed" if status == "failed" else "completed", None)

    def _close(self, reply: LiveReply, status: Literal["completed", "cancelled", "failed"],
               reason: str | None) -> None:
        """``response.done``, and what was sent and heard to the observers. A spoken reply not cut short is heard
        in full only once the client has played it all: until then the user may still cut it
        (:meth:`cut_playing`), so its heard audio is told again, for good, when the playback ends."""
        reply.state.close(self._emit, status, reason=reason)
        item = reply.state.item
        heard = item.audio_ms if item.heard_ms is None else item.heard_ms
        playing = reply.state.audio and heard >= item.audio_ms > 0
        if playing and self.closing:  # the client is gone: it played what it had played by now
            heard, playing = min(heard, reply.playback.heard_ms()), False
        output_queued = item.audio_ms > 0 if reply.state.audio else bool(reply.state.text_parts)
        self.closed(reply.response_id, status, item.audio_ms, heard, output_queued, playing)
        if playing:  # told after the close: an observer hears of the close first
            self.playing.add(reply)

    # -- function calls ------------------------------------------------------------------------------

    def tool_call(self, reply: LiveReply, call: ToolCall) -> None:
        """A call of a client tool becomes a ``function_call`` item; a refused one, a visible error. While the
        reply is paused the call waits with its held output: the turn over it may cut the reply, and a call
        announced then would follow that turn in the history, unanswered."""
        if reply.pause is not None:
            reply.pause.held.append(call)
            return
        if call.refused:
            self._emit(Outgoing(error_event(ProtocolError(
                f"the model wrote a tool call that was refused: {call.refused}. It wrote: {call.raw[:300]!r}",
                code="invalid_tool_call", type="server_error"))))
            return
        reply.state.function_call(self._emit, self.conversation, call)
        if reply.state.in_conversation:
            self.pending.add(call.call_id)

    def server_call(self, reply: LiveReply, call: ToolCall, outcome: ToolOutcome) -> None:
        """A built-in tool ran inside the reply: shown to clients that asked for bargein's events."""
        self._emit(Outgoing(event("bargein.tool.call", response_id=reply.response_id, name=call.name,
                                  call_id=call.call_id, arguments=call.arguments, output=outcome.output,
                                  ok=outcome.ok, repaired=call.repaired, refused=call.refused)))

    def _call_timed_out(self, call_id: str) -> None:
        """Nobody answered ``call_id``: close it with an output that says so, so the history stays whole."""
        if self.conversation.function_call(call_id) is None:
            return
        item = Item(new_id("item"), "system", [], type="function_call_output", call=ToolCall("", call_id),
                    output=TIMED_OUT)
        previous = self.conversation.add(item)
        self._emit(Outgoing(event("conversation.item.added", previous_item_id=previous, item=item.wire())))
        self._emit(Outgoing(event("conversation.item.done", previous_item_id=previous, item=item.wire())))

    def cut_playing(self) -> None:
        """The user spoke while the client may still be playing a finished reply: keep what was heard.

        A client truncate, if one follows, replaces this estimate with its playback cursor (in the history and,
        within a grace period, in the heard-audio metric).
        """
        for reply in self._tracked():
            item = reply.state.item
            if not reply.ended or (item.heard_ms is not None and item.heard_ms < item.audio_ms):
                continue  # still live, or cut already (by a cancel or the client's truncate)
            heard = reply.playback.heard_ms()
            if heard < reply.playback.sent_ms - 1.0:
                item.heard_ms = heard
                item.status = "incomplete"
                self.playing.cut(reply, heard)

    def on_sent(self, item: Outgoing) -> None:
        """An audio delta left for the client: advance that reply's play estimate."""
        if item.response_id is None or not item.is_data:
            return
        reply = next((r for r in self.recent if r.response_id == item.response_id), None) \
            or self.playing.replies.get(item.response_id)  # an older reply the client may still play
        if reply is not None:
            reply.playback.on_sent(item.audio_ms)
            self.playing.watch(reply)

    def _tracked(self) -> list[LiveReply]:
        """The replies whose playback is followed: the recent ones, and older ones the client may still play."""
        recent = list(self.recent)
        ids = {reply.response_id for reply in recent}
        return recent + [reply for reply in self.playing.replies.values() if reply.response_id not in ids]

    def close(self) -> list[asyncio.Task[None]]:
        """Cancel every live reply's work (the session is ending); returns the tasks to await. The client stops
        playing: a closed reply it was still playing was heard as far as it had played."""
        self.closing = True
        self.playing.close()
        self.pending.close()
        for reply in self.live.values():
            reply.cancel.cancel("session closed")
        for task in self.tasks:
            task.cancel()
        return list(self.tasks)


async def _said(text: str) -> AsyncIterator[str]:
    """A fixed line as the token stream a reply speaks."""
    yield text
