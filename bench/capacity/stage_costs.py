"""CPU cost of each stage, in microseconds per 20 ms of audio per session: the capacity planner's input.

    python -m bench.capacity.stage_costs                       # the session path, < 1 minute
    python -m bench.capacity.stage_costs --models              # also Whisper, the LLM and Kokoro (a few minutes)
    python -m bench.capacity.stage_costs --json costs.json     # what `bargein capacity --costs` reads

Every figure is CPU time (``time.thread_time`` for work on the calling thread, ``time.process_time``
where the engine uses its own threads), median of several runs, so a shared machine inflates it less
than wall time. The per-session path (one 20 ms append of pcm16 at 24 kHz): JSON and validation of the
event, base64, pcm decoding, the 24 -> 16 kHz resampler, framing, Silero VAD per session at several
batch sizes (a 32 ms frame scaled to 20 ms), and the whole ``RealtimeSession.handle_message`` of
N sessions (``--sessions``, 1, 32 and 128) in one process fed together every 20 ms (all of the above plus
the state machine and the batcher, no network). The reply path: encoding 20 ms of agent audio as an
``output_audio.delta``. With ``--models``: Whisper per 20 ms of speech heard, the LLM per token, Kokoro per 20 ms
spoken.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bargein.audio.codecs import AudioFormat, decode_base64, encode_base64, float_to_int16, int16_to_float
from bargein.audio.framing import Framer
from bargein.audio.resample import LowDelayResampler
from bargein.config import Settings
from bargein.engines.factory import load_engines
from bargein.engines.listen.silero_vad import SileroModel
from bargein.protocol.client_events import parse_client_event
from bargein.session.realtime_session import RealtimeSession
from bargein.values import CancelToken, ChatMessage, GenerationOptions
from testdata.speech import chunks_20ms, librivox_clip, pcm16_24k

FRAME_TO_20MS = 20 / 32
"""A Silero frame covers 32 ms; the table is per 20 ms."""


def per_call_us(function: Callable[[], object], repeats: int, clock: Callable[[], float] = time.thread_time) -> float:
    """Median CPU microseconds of one call, over 5 runs of ``repeats`` calls."""
    runs = []
    for _ in range(5):
        started = clock()
        for _ in range(repeats):
            function()
        runs.append((clock() - started) / repeats * 1e6)
    return statistics.median(runs)


def session_path(rng: np.random.Generator) -> dict[str, float]:
    """The listening path of one 20 ms append, stage by stage."""
    chunk = (rng.standard_normal(480) * 3000).astype("<i2").tobytes() * 2
    text = json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(chunk).decode()})
    wire = AudioFormat()
    resampler = LowDelayResampler(24_000, 16_000)  # the session's listening path
    framer = Framer(512)
    samples = int16_to_float(wire.decode(chunk))
    model = SileroModel()
    costs = {
        "protocol: JSON + validation of the append": per_call_us(lambda: parse_client_event(text), 2000),
        "base64 decode": per_call_us(lambda: decode_base64(base64.b64encode(chunk).decode()), 2000),
        "pcm16 -> float32": per_call_us(lambda: int16_to_float(wire.decode(chunk)), 2000),
        "resample 24 -> 16 kHz (low-delay polyphase, streaming)": per_call_us(lambda: resampler.process(samples), 2000),
        "framing into 512-sample frames": per_call_us(lambda: framer.push(samples[:320]), 2000),
    }
    for batch in (1, 8, 32, 128):
        frames = (0.1 * rng.standard_normal((batch, 512))).astype(np.float32)
        contexts = np.zeros((batch, 64), np.float32)
        states = np.zeros((2, batch, 128), np.float32)
        per_batch = per_call_us(lambda f=frames, c=contexts, s=states: model.step(f, c, s), max(20, 400 // batch))
        costs[f"VAD Silero, batches of {batch}"] = per_batch / batch * FRAME_TO_20MS
    return costs


def reply_path(rng: np.random.Generator) -> dict[str, float]:
    """Encoding 20 ms of agent audio (24 kHz) into the event the client receives."""
    audio = (0.1 * rng.standard_normal(480)).astype(np.float32)
    wire = AudioFormat()

    def encode() -> str:
        payload = wire.encode(float_to_int16(audio))
        return json.dumps({"type": "response.output_audio.delta", "response_id": "resp_x", "item_id": "item_x",
                           "output_index": 0, "content_index": 0, "delta": encode_base64(payload)},
                          separators=(",", ":"))

    return {"reply audio: int16 + base64 + JSON of a delta": per_call_us(encode, 2000)}


async def whole_sessions(count: int, seconds: float) -> float:
    """CPU microseconds per 20 ms per session of ``count`` in-process sessions fed a clip together."""
    engines = load_engines(Settings(engines="instant"))
    chunks = chunks_20ms(pcm16_24k(librivox_clip("0880"), silence_after_s=1.0))
    texts = [json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(c).decode()})
             for c in chunks]
    sessions = [RealtimeSession(engines) for _ in range(count)]
    listening_only = json.dumps({"type": "session.update", "session": {
        "type": "realtime", "audio": {"input": {"turn_detection": {"type": "server_vad", "create_response": False}}}}})
    for session in sessions:
        session.start()
        await session.handle_message(listening_only)
    drains = [asyncio.create_task(_drain(session)) for session in sessions]
    ticks = int(seconds / 0.02)
    for index in range(min(25, ticks)):  # warm-up: the batcher task, first allocations
        await asyncio.gather(*(s.handle_message(texts[index % len(texts)]) for s in sessions))
    started = time.process_time()
    for index in range(ticks):
        await asyncio.gather(*(s.handle_message(texts[(index + i * 7) % len(texts)]) for i, s in enumerate(sessions)))
    used = time.process_time() - started
    for drain in drains:
        drain.cancel()
    for session in sessions:
        await session.close()
    await engines.aclose()
    return used / ticks / count * 1e6


async def _drain(session: RealtimeSession) -> None:
    while True:
        item = await session.outbound.get()
        session.on_sent(item)


async def model_costs() -> dict[str, float]:
    """Whisper, LLM and Kokoro CPU (all threads of this process)."""
    engines = load_engines(Settings())
    costs: dict[str, float] = {}
    audio = librivox_clip("0880")
    await engines.asr.transcribe(audio[:16_000])
    started = time.process_time()
    for _ in range(3):
        await engines.asr.transcribe(audio)
    costs["ASR Whisper tiny.en, per 20 ms of speech"] = (time.process_time() - started) / 3 / (len(audio) / 16_000) \
        * 0.02 * 1e6
    tokens = 0
    started = time.process_time()
    for question in ("What is the capital of France?", "How do I boil an egg?", "Tell me a fact about cats."):
        async for _token in engines.llm.stream([ChatMessage("user", question)], cancel=CancelToken(),
                                               options=GenerationOptions(48)):
            tokens += 1
    costs["LLM embedded, per token"] = (time.process_time() - started) / max(tokens, 1) * 1e6
    spoken = 0
    started = time.process_time()
    for sentence in ("The weather will be sunny tomorrow with a light breeze.", "Please set a timer for ten minutes."):
        async for chunk in engines.tts.synthesize(sentence, voice=None, cancel=CancelToken()):
            spoken += len(chunk.audio)
    costs["TTS Kokoro, per 20 ms spoken"] = (time.process_time() - started) / (spoken / engines.tts.sample_rate) \
        * 0.02 * 1e6
    await engines.aclose()
    return costs


def main() -> None:
    """Measure, print the table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", action="store_true", help="also Whisper, the LLM and Kokoro")
    parser.add_argument("--sessions", default="1,32,128", help="in-process session counts for the whole path")
    parser.add_argument("--seconds", type=float, default=4.0, help="audio fed per whole-path measurement")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} at the start")
    rng = np.random.default_rng(0)
    costs: dict[str, Any] = {**session_path(rng), **reply_path(rng)}
    for count in (int(n) for n in args.sessions.split(",")):
        costs[f"whole listening session path, {count} sessions in one process"] = asyncio.run(
            whole_sessions(count, args.seconds))
    if args.models:
        costs.update(asyncio.run(model_costs()))
    print(f"{'stage':70s} {'CPU us per 20 ms per session':>30s} {'% of a core':>12s}")
    for stage, value in costs.items():
        unit_share = "" if "per token" in stage else f"{value / 200:11.2f}%"
        print(f"{stage:70s} {value:30.1f} {unit_share:>12s}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if args.json:
        Path(args.json).write_text(json.dumps({"load_average": os.getloadavg()[0], "costs_us": costs,
                                               **planner_fields(costs)}, indent=1))


def planner_fields(costs: dict[str, float]) -> dict[str, float]:
    """The measured figures under the names ``bargein capacity --costs`` reads (StageCosts fields)."""
    names = {"vad_us_per_20ms": "VAD Silero, batches of 32", "asr_us_per_20ms_speech":
             "ASR Whisper tiny.en, per 20 ms of speech", "llm_us_per_token": "LLM embedded, per token",
             "tts_us_per_20ms": "TTS Kokoro, per 20 ms spoken"}
    return {field: costs[stage] for field, stage in names.items() if stage in costs}


if __name__ == "__main__":
    main()
