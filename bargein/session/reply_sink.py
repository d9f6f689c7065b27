"""Where one reply's pipeline hands its output: every piece of text and audio goes through the machine
(``ReplyText`` / ``ReplyAudio``), and the pipeline waits here for room (the pause gate, the outbound queue and
the pacing that keeps the reply at most the output lead ahead of playback)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bargein.engines.fallback import StageFallback
from bargein.session.core import vocabulary as v
from bargein.session.live_reply import AudioPiece, LiveReply
from bargein.tools.registry import ToolOutcome
from bargein.values import ToolCall, WordTiming

if TYPE_CHECKING:
    from bargein.session.reply_runner import ReplyRunner


class ReplySink:
    """One reply's pipeline output, carried to its session's :class:`~bargein.session.reply_runner.ReplyRunner`;
    nothing is told of a reply that has ended."""

    def __init__(self, runner: ReplyRunner, reply: LiveReply) -> None:
        self.runner = runner
        self.reply = reply

    async def wait_for_room(self, response_id: str) -> None:
        """Until the reply is not paused, the outbound queue has room and pacing allows the next piece."""
        await self.reply.gate.wait()
        await self.runner.outbound.wait_for_room()
        if not self.reply.ended and (delay := self.reply.pacer.delay_s(self.reply.state.item.audio_ms)) > 0:
            await asyncio.sleep(delay)

    def reply_text(self, response_id: str, text: str) -> None:
        """A piece of the reply's text, for the machine to forward or hold."""
        self.runner.feed(v.ReplyText(response_id, text))

    def reply_audio(self, response_id: str, payload: bytes, duration_ms: float,
                    words: Sequence[WordTiming]) -> None:
        """A piece of the reply's audio, for the machine to forward or hold."""
        self.runner.feed(v.ReplyAudio(response_id, AudioPiece(payload, duration_ms, words)))

    def audio_ahead_ms(self, response_id: str) -> float | None:
        """Audio forwarded (queued or sent) that the client has not played yet, by the reply's playback estimate;
        ``None`` before the first delta has left, and while the reply is paused or over (nothing plays then)."""
        if self.reply.ended or self.reply.pause is not None or self.reply.playback.first_sent_wall_s is None:
            return None
        return self.reply.audio_left_ms()

    def reply_mark(self, response_id: str, stage: str) -> None:
        """A pipeline stage was reached (the turn ledger's marks)."""
        self.runner.progress(response_id, stage, 0)

    def reply_tokens(self, response_id: str, count: int) -> None:
        """``count`` more tokens were produced."""
        if not self.reply.ended:
            self.reply.state.output_tokens += count
        self.runner.progress(response_id, "tokens", count)

    def reply_tool_call(self, response_id: str, call: ToolCall) -> None:
        """The model called a client tool."""
        if not self.reply.ended:
            self.runner.tool_call(self.reply, call)

    def reply_server_call(self, response_id: str, call: ToolCall, outcome: ToolOutcome) -> None:
        """The model called one of bargein's own tools, and it ran."""
        if not self.reply.ended:
            self.runner.server_call(self.reply, call, outcome)

    def reply_fallback(self, response_id: str, fallback: StageFallback) -> None:
        """The reply is a stage's fallback (the LLM's apology)."""
        self.runner.tell_fallback(self.reply, fallback)
