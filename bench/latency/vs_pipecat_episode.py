"""One episode of ``bench.latency.vs_pipecat`` against either system: the connection (:class:`Link`) that
streams clip A, then clip B cutting into the reply, and what the client measured of both (:class:`Episode`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bargein.audio.codecs import float_to_int16, int16_to_float
from bargein.audio.resample import StreamResampler
from bench.harness.realtime_harness import (
    WIRE_RATE,
    Microphone,
    SpeechClip,
    first_audible,
    fmt_ms,
)
from bench.latency.vs_pipecat_engines import (
    ENDPOINT_SILENCE_MS,
    INSTRUCTIONS,
    MAX_OUTPUT_TOKENS,
    VAD_THRESHOLD,
)

CUT_IN_LEAD_S = 0.1
LEAD_S = 1.0
"""Silence streamed on a fresh connection before the first clip (Pipecat builds its pipeline then)."""
LEDGER_STAGES = ("endpoint_ms", "asr_final_ms", "llm_first_token_ms", "tts_first_audio_ms", "first_delta_sent_ms")


@dataclass
class Link:
    """What one connection received: agent audio chunks and interruption signals, with arrival times.

    It also plays the audio back in its head, as a client with no jitter buffer would: a chunk starts
    when it arrives or when the previous one ends, whichever is later, and a signal flushes what is
    queued. ``heard`` is when the first non-silent sample of a chunk would then sound.
    """

    audio: list[tuple[float, float, float | None]] = field(default_factory=list)
    """(arrival, milliseconds of audio, when its first non-silent sample sounds or None if silent)."""
    signals: list[float] = field(default_factory=list)
    stages: dict[str, list[float]] = field(default_factory=dict)
    """Server-side stage times the system reports itself (bargein's ledger, Pipecat's TTFB metrics)."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    play_end: float = 0.0

    def take_audio(self, pcm16: bytes, at: float) -> None:
        """Record one agent audio chunk (pcm16 24 kHz)."""
        start = max(at, self.play_end)
        self.play_end = start + len(pcm16) / 2 / WIRE_RATE
        loud = first_audible(pcm16)
        self.audio.append((at, len(pcm16) / 48.0, None if loud is None else start + loud / WIRE_RATE))
        self.changed.set()

    def take_signal(self, at: float) -> None:
        """Record an interruption signal (the client flushes its playback)."""
        self.signals.append(at)
        self.play_end = min(self.play_end, at)
        self.changed.set()

    async def first(self, found: Callable[[], tuple[float, float] | None],
                    timeout: float) -> tuple[float, float] | None:
        """Wait until ``found`` gives a value, or None after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while (value := found()) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)
        return value

    def audible_after(self, t: float) -> tuple[float, float] | None:
        """(arrival, heard) of the first audible chunk that arrived after ``t``."""
        return next(((at, heard) for at, _ms, heard in self.audio if heard is not None and at > t), None)

    def signal_after(self, t: float) -> float | None:
        """Arrival of the first signal after ``t``."""
        return next((at for at in self.signals if at > t), None)


@dataclass
class Episode:
    """One system's figures for one round (milliseconds; None when it did not happen)."""

    system: str
    clips: str
    round_index: int = -1
    first_audio: list[float | None] = field(default_factory=list)
    """Per turn: first audible sample received (docs/design.md's first audio)."""
    first_heard: list[float | None] = field(default_factory=list)
    """Per turn: first audible sample played by a client with no jitter buffer (see :class:`Link`)."""
    signal_ms: float | None = None
    stop_ms: float | None = None
    audio_after_signal_ms: float = 0.0
    stages: dict[str, list[float]] = field(default_factory=dict)

    def take_first(self, found: tuple[float, float] | None, end_at: float) -> None:
        """Record one turn's first audio, received and heard, from the end of speech at ``end_at``."""
        self.first_audio.append(None if found is None else 1000 * (found[0] - end_at))
        self.first_heard.append(None if found is None else 1000 * (found[1] - end_at))

    def line(self) -> str:
        """One row of the per-episode log."""
        def cell(value: float | None) -> str:
            return fmt_ms(math.nan if value is None else value)

        firsts = ", ".join(cell(v).strip() for v in self.first_audio)
        return (f"{self.system:8s} clips {self.clips}: first audio [{firsts}] ms, barge-in signal "
                f"{cell(self.signal_ms).strip()} ms, stop {cell(self.stop_ms).strip()} ms, audio after the "
                f"signal {self.audio_after_signal_ms:.0f} ms")


@contextlib.asynccontextmanager
async def bargein_link(port: int, *, default_endpoint: bool = False) -> Any:
    """A Realtime session through the official ``openai`` client, configured like the Pipecat side."""
    import base64

    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key="sk-local", websocket_base_url=f"ws://127.0.0.1:{port}/v1", max_retries=0)
    link = Link()
    async with client.realtime.connect(model="bargein-bench", max_retries=0,
                                       extra_query={"bargein_events": "1"}) as connection:
        updated = asyncio.Event()

        async def read() -> None:
            with contextlib.suppress(Exception):
                while True:
                    raw = await connection.recv_bytes()
                    at = time.monotonic()
                    event = json.loads(raw)
                    kind = event.get("type")
                    if kind == "response.output_audio.delta":
                        link.take_audio(base64.b64decode(event["delta"]), at)
                    elif kind == "input_audio_buffer.speech_started":
                        link.take_signal(at)
                    elif kind == "bargein.turn.metrics":
                        for key in LEDGER_STAGES:
                            if isinstance(event.get(key), int | float):
                                link.stages.setdefault(key, []).append(float(event[key]))
                    elif kind == "session.updated":
                        updated.set()
                    elif kind == "error":
                        print(f"bargein error event: {event.get('error')}", flush=True)

        reader = asyncio.create_task(read())
        detection: dict[str, Any] = {"type": "server_vad", "threshold": VAD_THRESHOLD, "prefix_padding_ms": 300}
        if not default_endpoint:  # a silence of the client's own is plain silence; without one, the tiered default
            detection["silence_duration_ms"] = ENDPOINT_SILENCE_MS
        await connection.session.update(session={
            "type": "realtime", "instructions": INSTRUCTIONS, "max_output_tokens": MAX_OUTPUT_TOKENS,
            "audio": {"input": {"turn_detection": detection}}})
        await asyncio.wait_for(updated.wait(), 30)

        async def send(chunk: bytes) -> None:
            await connection.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())

        try:
            yield link, send
        finally:
            reader.cancel()


@contextlib.asynccontextmanager
async def pipecat_link(port: int) -> Any:
    """A plain ``websockets`` client of the Pipecat pipeline, speaking its protobuf frames (16 kHz up)."""
    import websockets
    from pipecat.frames.protobufs import frames_pb2 as pb  # generated code: no type information

    frames: Any = pb

    link = Link()
    resampler = StreamResampler(WIRE_RATE, 16_000)
    async with websockets.connect(f"ws://127.0.0.1:{port}/ws", max_size=None) as socket:
        async def read() -> None:
            with contextlib.suppress(Exception):
                async for message in socket:
                    at = time.monotonic()
                    frame = frames.Frame.FromString(message)
                    kind = frame.WhichOneof("frame")
                    if kind == "audio":
                        link.take_audio(frame.audio.audio, at)
                    elif kind == "interruption":
                        link.take_signal(at)
                    elif kind == "message" and (event := json.loads(frame.message.data)).get("type") == "metrics":
                        link.stages.setdefault(f"{event['stage']} ttfb_ms", []).append(float(event["ms"]))

        async def send(chunk: bytes) -> None:
            samples = float_to_int16(resampler.process(int16_to_float(np.frombuffer(chunk, dtype="<i2"))))
            frame = frames.Frame(audio=frames.AudioRawFrame(audio=samples.tobytes(), sample_rate=16_000,
                                                             num_channels=1))
            await socket.send(frame.SerializeToString())

        reader = asyncio.create_task(read())
        try:
            yield link, send
        finally:
            reader.cancel()


async def run_episode(system: str, port: int, first: SpeechClip, second: SpeechClip,
                      args: argparse.Namespace) -> Episode:
    """Clip ``first``, a barge-in by ``second`` at the reply's first audio, the reply to ``second``."""
    episode = Episode(system, f"{first.name}+{second.name}")
    opened = bargein_link(port, default_endpoint=args.pipecat_smart_turn) if system == "bargein" \
        else pipecat_link(port)
    async with opened as (link, send):
        mic = Microphone(send)
        streaming = asyncio.create_task(mic.run())
        try:
            await asyncio.sleep(LEAD_S)
            start = mic.play(first.pcm)
            end_at = await mic.wait_sent(start + first.end)
            heard = await link.first(lambda: link.audible_after(end_at), args.reply_timeout_s)
            episode.take_first(heard, end_at)
            skip = max(0, second.onset - int(CUT_IN_LEAD_S * WIRE_RATE))
            start = mic.play(second.from_sample(skip))
            clip_at = await mic.wait_sent(start)
            onset_at = await mic.wait_sent(start + second.onset - skip)
            end_at = await mic.wait_sent(start + second.end - skip)
            if heard is not None:  # there was a reply to cut into
                _barge(link, episode, clip_at, onset_at, end_at)
            episode.take_first(await link.first(lambda: link.audible_after(end_at), args.reply_timeout_s), end_at)
            await asyncio.sleep(1.0)  # the reply plays a little; closing the connection then ends it
            episode.stages = link.stages
        finally:
            mic.stop()
            streaming.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await streaming
    return episode


def _barge(link: Link, episode: Episode, clip_at: float, onset_at: float, end_at: float) -> None:
    signal = link.signal_after(clip_at)
    if signal is None or signal > end_at:
        return
    old = [at for at, _ms, loud in link.audio if loud and onset_at < at <= end_at]
    episode.signal_ms = 1000 * (signal - onset_at)
    episode.stop_ms = 1000 * (max([signal, *old]) - onset_at)
    episode.audio_after_signal_ms = sum(ms for at, ms, _loud in link.audio if signal < at <= end_at)
