"""Where one reply's pipeline hands its output: every piece of text and audio goes through the machine
(``ReplyText`` / ``ReplyAudio``), the rest to the reply's :class:`~bargein.session.reply_handle.ReplyHandle`, and the
pipeline waits here for room (the pause gate, the outbound queue and the pacing that keeps the reply at most the
output lead ahead of playback)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from bargein.engines.fallback import StageFallback
from bargein.session.core import vocabulary as v
from bargein.session.reply_handle import ReplyHandle
from bargein.tools.registry import ToolOutcome
from bargein.values import ToolCall, WordTiming

Progress = Callable[[str, str, int], None]
"""``(response_id, stage, count)``: a pipeline stage was reached, or tokens were produced."""


class HandleSink:
    """One reply's pipeline output (:class:`~bargein.session.reply_pipeline.ReplySink`), carried to the machine and
    to the reply's handle; nothing is told of a reply that has ended."""

    def __init__(self, handle: ReplyHandle, feed: Callable[[v.Event], None], progress: Progress) -> None:
        self.handle = handle
        self.feed = feed
        self.progress = progress

    async def wait_for_room(self) -> None:
        """Until the reply is not paused, the outbound queue has room and pacing allows the next piece."""
        handle = self.handle
        await handle.gate.wait()
        await handle.wiring.outbound.wait_for_room()
        if not handle.ended and (delay := handle.pacer.delay_s(handle.state.item.audio_ms)) > 0:
            await asyncio.sleep(delay)

    def reply_text(self, text: str) -> None:
        """A piece of the reply's text, for the machine to forward or hold."""
        self.feed(v.ReplyText(self.handle.response_id, text))

    def reply_audio(self, payload: bytes, duration_ms: float, words: Sequence[WordTiming]) -> None:
        """A piece of the reply's audio, for the machine to forward or hold."""
        self.feed(v.ReplyAudio(self.handle.response_id, v.AudioPiece(payload, duration_ms, words)))

    def audio_ahead_ms(self) -> float | None:
        """Audio forwarded (queued or sent) that the client has not played yet, by the reply's playback estimate;
        ``None`` before the first delta has left, and while the reply is paused or over (nothing plays then)."""
        handle = self.handle
        if handle.ended or handle.paused is not None or handle.playback.first_sent_wall_s is None:
            return None
        return handle.audio_left_ms()

    def reply_mark(self, stage: str) -> None:
        """A pipeline stage was reached (the turn ledger's marks)."""
        self.progress(self.handle.response_id, stage, 0)

    def reply_tokens(self, count: int) -> None:
        """``count`` more tokens were produced."""
        if not self.handle.ended:
            self.handle.state.output_tokens += count
        self.progress(self.handle.response_id, "tokens", count)

    def reply_tool_call(self, call: ToolCall, *, after_words: bool = False) -> None:
        """The model called a client tool (after writing words, when ``after_words``)."""
        if not self.handle.ended:
            self.handle.state.worded = self.handle.state.worded or after_words
            self.handle.tool_call(call)

    def reply_server_call(self, call: ToolCall, outcome: ToolOutcome) -> None:
        """The model called one of bargein's own tools, and it ran."""
        if not self.handle.ended:
            self.handle.server_call(call, outcome)

    def reply_fallback(self, fallback: StageFallback) -> None:
        """The reply is a stage's fallback (the LLM's apology)."""
        self.handle.tell_fallback(fallback)
