"""bargein against Pipecat in one run: same engines, same clips, same client-side measurement.

    .venv-pipecat/bin/python -m bench.latency.vs_pipecat --turns 10

Needs an environment with ``pipecat-ai`` besides bargein (see docs/benchmarks.md); it starts, on
loopback, one ``python -m llama_cpp.server`` (SmolLM2-135M by default) that both systems use as their
OpenAI-compatible LLM, ``python -m bargein serve`` on its default engines, and a Pipecat pipeline
(``bench/latency/pipecat_server.py``) on the same engines from bargein's own factory (processes started by
``bench/latency/vs_pipecat_engines.py``), then alternates between them round by round (the
order flips every round), so machine noise hits both. It stops by itself (``--time-limit-s``).

Each round gives each system one fresh connection and one episode: clip A; when the first audible agent
sample of the reply arrives, clip B cuts in (from 0.1 s before its speech onset); the reply to B plays
for a second; the connection closes. The client is a microphone: one 20 ms chunk every 20 ms of 24 kHz
pcm16 (silence between clips), every chunk's send time logged. bargein gets it as
``input_audio_buffer.append`` through the official ``openai`` client; Pipecat as audio frames of its
stock ``ProtobufFrameSerializer`` through a plain ``websockets`` client, resampled to 16 kHz in the
client by the streaming resampler bargein's server uses on its side.

* **first audio**: from the send time of the chunk holding the last speech sample of a clip (speech
  bounds from frame energy, offline) to the arrival of the first agent audio chunk holding a non-silent
  sample (above -60 dBFS) after it. Two per episode: clip A and clip B (the turn after a barge-in).
* **first audio heard**: the same, to when that sample would sound at a client with no jitter buffer
  (see :class:`Link`): bargein sends audio up to 1 s ahead in large deltas, Pipecat 40 ms frames.
* **barge-in signal**: from the send time of the chunk holding the first speech sample of clip B to the
  arrival of the server's interruption signal: ``input_audio_buffer.speech_started`` for bargein, the
  ``interruption`` frame Pipecat's output transport writes for its ``InterruptionFrame``
  (it writes it after it has dropped its queued audio). Both tell a client to flush its playback.
* **barge-in stop**: the later of the signal and the last audible agent chunk arriving between clip B's
  onset and its end (audio of the interrupted reply still coming), from the same onset. A client that
  flushes on the signal plays nothing of the interrupted reply after this moment.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
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
    load_clips,
    percentile,
)
from bench.latency.vs_pipecat_engines import (
    ENDPOINT_SILENCE_MS,
    INSTRUCTIONS,
    MAX_OUTPUT_TOKENS,
    VAD_THRESHOLD,
    services,
)

ROOT = Path(__file__).resolve().parents[2]
CUT_IN_LEAD_S = 0.1
LEAD_S = 1.0
"""Silence streamed on a fresh connection before the first clip (Pipecat builds its pipeline then)."""
SYSTEMS = ("bargein", "pipecat")
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


Sender = Callable[[bytes], Awaitable[None]]


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


async def run_rounds(ports: dict[str, int], args: argparse.Namespace, started: float) -> list[Episode]:
    """Warm-up, then alternating rounds until ``--turns`` first-audio turns each or the time limit."""
    clips = load_clips()
    for system in SYSTEMS:
        for _ in range(args.warmup):
            print("warm-up " + (await run_episode(system, ports[system], clips[0], clips[1], args)).line(), flush=True)
    episodes: list[Episode] = []
    rounds = math.ceil(args.turns / 2)
    longest = 0.0
    for index in range(rounds):
        if time.monotonic() - started + 1.2 * longest > args.time_limit_s:
            print(f"time limit: stopping after {index} of {rounds} rounds", flush=True)
            break
        began = time.monotonic()
        first, second = clips[(2 * index) % len(clips)], clips[(2 * index + 1) % len(clips)]
        order = SYSTEMS if index % 2 == 0 else SYSTEMS[::-1]
        for system in order:
            episode = await run_episode(system, ports[system], first, second, args)
            episode.round_index = index
            episodes.append(episode)
            print(f"round {index:2d} " + episode.line(), flush=True)
            await asyncio.sleep(args.settle_s)  # cancelled work (LLM, TTS) of the closed session drains
        longest = max(longest, time.monotonic() - began)
    return episodes


def summary(episodes: list[Episode]) -> None:
    """Both distributions side by side and the ratio of the first-audio medians."""
    from importlib.metadata import version

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\npipecat-ai {version('pipecat-ai')}; load average at the end: {load} on {os.cpu_count()} cores")
    print(f"{'':28s} {'n':>4s} {'miss':>4s} {'p50':>6s} {'p95':>6s} {'max':>6s}  (ms)")
    medians: dict[str, float] = {}
    rows: list[tuple[str, Callable[[Episode], list[float | None]]]] = [
        ("first audio", lambda e: e.first_audio), ("first audio heard", lambda e: e.first_heard),
        ("barge-in signal", lambda e: [e.signal_ms]), ("barge-in stop", lambda e: [e.stop_ms])]
    for label, pick in rows:
        for system in SYSTEMS:
            raw = [v for e in episodes if e.system == system for v in pick(e)]
            values = [v for v in raw if v is not None]
            cells = " ".join(fmt_ms(percentile(values, q)) for q in (50, 95))
            top = fmt_ms(max(values) if values else math.nan)
            print(f"{system + ' ' + label:28s} {len(values):4d} {len(raw) - len(values):4d} {cells} {top}")
            if label == "first audio":
                medians[system] = percentile(values, 50)
    ratio = medians["pipecat"] / medians["bargein"] if medians["bargein"] > 0 else math.nan
    print(f"first audio, ratio of medians pipecat / bargein: {ratio:.2f}")
    paired = _paired(episodes)
    if paired:
        print(f"first audio, paired (same round, clip and turn) pipecat - bargein: median "
              f"{percentile(paired, 50):+.0f} ms, bargein sooner in {sum(d > 0 for d in paired)} of {len(paired)}")
    print("server-side stages, medians (ms; each system's own definitions, see docs/benchmarks.md):")
    for system in SYSTEMS:
        merged: dict[str, list[float]] = {}
        for episode in (e for e in episodes if e.system == system):
            for key, values in episode.stages.items():
                merged.setdefault(key, []).extend(values)
        print(f"  {system:8s} " + ", ".join(f"{k} {percentile(v, 50):.0f}" for k, v in sorted(merged.items())))
    leaks = {s: sum(e.audio_after_signal_ms for e in episodes if e.system == s) for s in SYSTEMS}
    print("agent audio arriving after the interruption signal (all barge-ins): "
          + ", ".join(f"{s} {ms:.0f} ms" for s, ms in leaks.items()))


def _paired(episodes: list[Episode]) -> list[float]:
    by_round = {(e.round_index, e.system): e for e in episodes}
    differences = []
    for (index, system), episode in by_round.items():
        other = by_round.get((index, "pipecat"))
        if system != "bargein" or other is None:
            continue
        differences += [p - b for b, p in zip(episode.first_audio, other.first_audio, strict=False)
                        if b is not None and p is not None]
    return differences


def main() -> None:
    """Parse flags, start the servers, run the rounds, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=10, help="first-audio turns per system (2 per round)")
    parser.add_argument("--llm", default="smollm2-135m", help="packaged GGUF name (bargein.engines.think.llm_models)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured episodes per system first")
    parser.add_argument("--pipecat-stop-secs", type=float, default=0.2,
                        help="Pipecat VAD stop_secs; its user_speech_timeout is the rest of the 500 ms endpoint")
    parser.add_argument("--pipecat-smart-turn", action="store_true",
                        help="Pipecat ends turns with its Smart Turn analyzer (after --pipecat-stop-secs of silence); "
                             "bargein then runs on its default (tiered) endpoint instead of a plain 500 ms")
    parser.add_argument("--reply-timeout-s", type=float, default=20.0)
    parser.add_argument("--settle-s", type=float, default=2.0, help="pause between episodes")
    parser.add_argument("--time-limit-s", type=float, default=840.0, help="stop starting rounds after this")
    parser.add_argument("--plot", help="draw the distributions into this PNG (needs matplotlib)")
    args = parser.parse_args()
    with contextlib.suppress(ImportError):  # Pipecat (imported by its client) logs a banner at INFO
        from loguru import logger

        logger.remove()
        logger.add(sys.stderr, level="WARNING")
    started = time.monotonic()
    with services(args) as ports:
        print(f"servers ready in {time.monotonic() - started:.0f} s", flush=True)
        episodes = asyncio.run(run_rounds(ports, args, started))
    summary(episodes)
    if args.plot:
        plot(episodes, args.plot)


def plot(episodes: list[Episode], path: str) -> None:
    """CDFs of first audio and barge-in stop, both systems."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib; no plot drawn")
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for axis, title, pick in ((axes[0], "first audio", lambda e: e.first_audio),
                              (axes[1], "barge-in stop", lambda e: [e.stop_ms])):
        for system in SYSTEMS:
            values = sorted(v for e in episodes if e.system == system for v in pick(e) if v is not None)
            if values:
                axis.step(values, [(i + 1) / len(values) for i in range(len(values))], where="post",
                          label=f"{system} (p50 {percentile(values, 50):.0f} ms, n={len(values)})")
        axis.set_xlabel("ms")
        axis.set_ylabel("fraction")
        axis.set_title(f"{title} (CDF)")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    fig.suptitle("bargein vs Pipecat, same engines, alternating rounds (client-measured)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
