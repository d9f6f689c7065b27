"""Part d's unanswered lossy turn (issue 45): a cancel the data channel delivers seconds late must not silence the
next turn's reply.

Over the lossy relay a client event lost on its way waits for SCTP's retransmission timeout, which a loaded,
jittery path pushed past 5 s (``bench.latency.webrtc_loss_turns`` counts the client's timeouts). The benchmark
cancelled each reply with an unnamed ``response.cancel`` and an ``output_audio_buffer.clear``; delivered that late,
they landed on the next turn's reply, which never sounded. Here a scripted server holds the client's events back
until the next reply has started (the worst moment) and then applies them as bargein does: an unnamed cancel
cancels the live reply, a cancel naming another one is refused, a clear silences what is playing.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import pytest

from bench.harness.realtime_harness import WIRE_RATE, SpeechClip
from bench.latency import webrtc_turns
from bench.latency.webrtc_links import Received

FRAME_S = 0.02


class ScriptedMicrophone:
    """Clips played one after another in real time, as the links' microphones are."""

    def __init__(self, server: LateEventsServer) -> None:
        self.server = server
        self._free_at = 0.0

    def play(self, pcm: bytes) -> int:
        """Queue a clip; its first sample's position is its start time in samples."""
        start = max(time.monotonic(), self._free_at)
        self._free_at = start + len(pcm) / 2 / WIRE_RATE
        self.server.heard(start, self._free_at)
        return round(start * WIRE_RATE)

    async def wait_sent(self, sample: int) -> float:
        """When position ``sample`` leaves."""
        at = sample / WIRE_RATE
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        return at

    def stop(self) -> None:
        """Nothing runs."""


class LateEventsServer:
    """A server whose client events arrive only once the next reply has started; each reply speaks until stopped."""

    def __init__(self) -> None:
        self.received = Received(packets=[])
        self.mic = ScriptedMicrophone(self)
        self.held: list[dict[str, Any]] = []
        self.live: str | None = None
        self.sounding: str | None = None
        self.replies = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def send(self, event: dict[str, Any]) -> None:
        """A client event: held back until the next reply has started."""
        self.held.append(event)

    async def close(self) -> None:
        """Stop every scripted task."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def heard(self, start: float, end: float) -> None:
        """A clip is spoken from ``start`` to ``end``: it stops the reply playing, and a new reply follows."""
        task = asyncio.ensure_future(self._turn(start, end))
        self._tasks.add(task)

    async def _turn(self, start: float, end: float) -> None:
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        self.sounding = None  # the user's speech pauses the reply playing (the server's own barge-in)
        await asyncio.sleep(max(0.0, end + 0.2 - time.monotonic()))
        self.replies += 1
        self.live = self.sounding = f"resp_{self.replies}"
        self._event({"type": "response.created", "response": {"id": self.live}})
        held, self.held = self.held, []
        for event in held:
            self._apply(event)
        if self.sounding is not None:
            task = asyncio.ensure_future(self._speak(self.sounding))
            self._tasks.add(task)

    def _apply(self, event: dict[str, Any]) -> None:
        if event["type"] == "output_audio_buffer.clear":
            self.sounding = None
        elif event["type"] == "response.cancel":
            named = event.get("response_id")
            if self.live is None or (named is not None and named != self.live):
                self._event({"type": "error", "error": {"code": "response_cancel_not_active"}})
                return
            self._event({"type": "response.done", "response": {"id": self.live, "status": "cancelled"}})
            self.live = self.sounding = None

    async def _speak(self, response_id: str) -> None:
        while self.sounding == response_id:
            frame = (time.monotonic(), 1000, 1000 * FRAME_S)
            self.received.audio.append(frame)
            assert self.received.packets is not None
            self.received.packets.append(frame)
            await asyncio.sleep(FRAME_S)

    def _event(self, event: dict[str, Any]) -> None:
        self.received.events.append((time.monotonic(), event))


def _clip(seconds: float = 0.3) -> SpeechClip:
    samples = np.full(int(seconds * WIRE_RATE), 3000, dtype="<i2")
    return SpeechClip("speech", samples.tobytes(), 0, len(samples) - 1, 0.0)


async def test_a_cancel_delivered_after_the_next_reply_started_leaves_that_reply_sounding(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webrtc_turns, "CANCEL_WAIT_S", 1.0, raising=False)  # a short test: the wait gives up soon
    server = LateEventsServer()
    try:
        results = await webrtc_turns.run_turns(server, [_clip()], 3, barge=False, reply_timeout_s=3.0, quiet=True)
    finally:
        await server.close()
    assert [r.completed for r in results] == [True, True, True], [r.unanswered for r in results]
    refused = [event for _at, event in server.received.events if event["type"] == "error"]
    assert len(refused) == 2, "each late cancel named the reply it meant, which had ended: refused"


async def test_the_turns_reply_is_one_no_earlier_turn_answered_with() -> None:
    """Over a lagging data channel an earlier reply's ``response.created`` can arrive after this turn's speech."""
    received = Received()
    received.events.append((time.monotonic(), {"type": "response.created", "response": {"id": "resp_1"}}))
    after = time.monotonic() - 1.0

    async def created_later() -> None:
        await asyncio.sleep(0.1)
        received.events.append((time.monotonic(), {"type": "response.created", "response": {"id": "resp_2"}}))

    later = asyncio.ensure_future(created_later())
    assert await webrtc_turns._reply_of_turn(received, after, {"resp_1"}, 2.0) == "resp_2"
    await later
    assert await webrtc_turns._reply_of_turn(received, after, {"resp_1", "resp_2"}, 0.0) is None
