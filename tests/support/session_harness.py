"""A session in process with fake engines and no socket: what a client sends, every event it would receive
(each validated against the official models), and the helpers that speak into it."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from bargein.audio.codecs import float_to_int16
from bargein.engines.base import Engines, LanguageModel, SpeechRecognizer
from bargein.session.core import vocabulary as v
from bargein.session.realtime_session import RealtimeSession
from bargein.tools.registry import ToolRegistry
from bargein.values import CancelToken, ChatMessage, GenerationOptions
from tests.support.realtime_client import validate_server_event


class CountingLanguageModel(LanguageModel):
    """Streams numbered tokens forever, counting those produced after cancellation."""

    def __init__(self) -> None:
        self.after_cancel = 0

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        for index in range(10_000):
            if cancel.cancelled:
                self.after_cancel += 1
                return
            await asyncio.sleep(0.002)
            yield f" w{index}."


class Harness:
    """A session plus a drain of its outbound queue."""

    def __init__(self, engines: Engines, *, semantic_default: bool = False, tiered_default: bool = True,
                 builtins: ToolRegistry | None = None, text_end_default: bool = True) -> None:
        self.session = RealtimeSession(engines, semantic_default=semantic_default, tiered_default=tiered_default,
                                       builtin_tools=builtins, text_end_default=text_end_default)
        self.events: list[dict[str, Any]] = []
        self.session.start()

    async def send(self, **event: Any) -> None:
        await self.session.handle_message(json.dumps(event))

    async def drain(self, until: str | None = None, timeout: float = 10.0) -> list[dict[str, Any]]:
        async def pump() -> None:
            while True:
                item = await self.session.outbound.get()
                self.session.on_sent(item)
                validate_server_event(item.event)
                self.events.append(item.event)
                if until is not None and item.event["type"] == until:
                    return
                if until is None and len(self.session.outbound) == 0:
                    return
        await asyncio.wait_for(pump(), timeout)
        return self.events

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    def no_play_out_wait(self) -> None:
        """A reply whose words are all out closes at once, while the client may still be playing it (the
        machine's play-out wait set to nothing, as a server setting would)."""
        settings = self.session.machine.settings
        self.session.feed(v.SettingsChanged(replace(
            settings, interruption=replace(settings.interruption, playout_wait_ms=0))))


async def reply_playing(h: Harness, played_s: float = 0.6) -> str:
    """Ask for a reply by text and let the client play ``played_s`` of it; the reply's id."""
    await h.send(type="conversation.item.create", item={"type": "message", "role": "user",
                                                        "content": [{"type": "input_text", "text": "talk"}]})
    await h.send(type="response.create")
    await h.drain(until="response.output_audio.delta")
    response_id: str = h.events[-1]["response_id"]
    await asyncio.sleep(played_s)
    return response_id


class SilentRecognizer(SpeechRecognizer):
    """Hears no words in anything: every segment is noise."""

    async def transcribe(self, audio: Any, *, language: str | None = None, prompt: str | None = None) -> Any:
        from bargein.values import Transcript

        return Transcript("", no_speech_prob=0.9)


async def reply_audio(h: Harness, response_id: str, events: list[dict[str, Any]]) -> bytes:
    """The audio the client received of one reply, joined."""
    return b"".join(base64.b64decode(e["delta"]) for e in events
                    if e["type"] == "response.output_audio.delta" and e["response_id"] == response_id)


def pcm_appends(samples: np.ndarray) -> list[str]:
    """24 kHz float audio as base64 appends of 20 ms."""
    wire = float_to_int16(samples.astype(np.float32)).tobytes()
    return [base64.b64encode(wire[offset:offset + 960]).decode() for offset in range(0, len(wire), 960)]


TONE_S = 0.3 * np.sin(np.arange(24_000) / 4)
"""A second of loud sound: speech to the fake VAD."""


async def say_tone(h: Harness, seconds: float, then_silence_s: float) -> None:
    """Append ``seconds`` of loud tone (speech to the fake VAD), then silence, as 20 ms appends."""
    for chunk in pcm_appends(np.concatenate([TONE_S[:int(24_000 * seconds)], np.zeros(int(24_000 * then_silence_s))])):
        await h.send(type="input_audio_buffer.append", audio=chunk)
