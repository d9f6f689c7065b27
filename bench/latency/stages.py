"""Every stage of the data path on this machine, with the default embedded models.

    python -m bench.latency.stages [--quick] [--turns 5]

Prints: Silero VAD cost per 32 ms chunk, single-stream and batched over 32 and 128 sessions; Whisper's
real-time factor, word error rate on the LibriVox clips of Debian's pocketsphinx-testdata and the time
from end of speech to the final transcript (cold, and as served with speculative recognition); the
LLM's warm time to first token and tokens/s; Kokoro's real-time factor and time to first audio; the
TTS -> ASR round-trip word accuracy on 20 sentences; and first audio with the defaults, measured in
process (a session fed a LibriVox clip in real time: from the last sample of speech, as the VAD placed
it in the stream, to the first non-silent agent sample leaving the session; no network, no client: the floor of
what ``bench/latency/first_audio.py`` measures).
Medians throughout: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bargein.audio.resample import resample
from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.factory import load_engines
from bargein.engines.listen.silero_vad import SileroModel
from bargein.engines.transcribe.wer import word_error_rate
from bargein.session.realtime_session import RealtimeSession
from bargein.values import CancelToken, ChatMessage, GenerationOptions
from testdata.speech import chunks_20ms, librivox_clip, librivox_reference, pcm16_24k

CLIPS = ("0870", "0880", "0890", "0920", "0930")
SENTENCES = (
    "The weather will be sunny tomorrow with a light breeze.", "Please set a timer for ten minutes.",
    "I would like to book a table for two at seven.", "The train to London leaves at half past nine.",
    "Could you turn the lights off in the kitchen?", "My favourite colour is green.",
    "We need milk, eggs and bread from the shop.", "The meeting has been moved to Thursday afternoon.",
    "How far away is the nearest petrol station?", "She plays the piano every evening.",
    "Call my sister and tell her I am running late.", "The museum opens at ten in the morning.",
    "Remind me to water the plants on Sunday.", "It takes about twenty minutes to walk there.",
    "What is the capital city of Australia?", "The children are playing in the garden.",
    "Please read me the latest news headlines.", "I left my keys on the kitchen table.",
    "The concert was cancelled because of the rain.", "Turn the volume down a little, please.",
)
QUESTIONS = ("What is the capital of France?", "How do I boil an egg?", "Tell me a fun fact about cats.",
             "What should I cook for dinner tonight?", "How far is the moon?")


def timed(function: Callable[[], Any], repeats: int) -> float:
    """Median wall seconds of ``repeats`` calls."""
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def vad_costs(quick: bool) -> None:
    model = SileroModel()
    rng = np.random.default_rng(0)
    print("VAD (Silero, one onnxruntime thread), per 32 ms chunk:")
    for batch in (1, 32, 128):
        frames = (0.1 * rng.standard_normal((batch, 512))).astype(np.float32)
        contexts = np.zeros((batch, 64), np.float32)
        states = np.zeros((2, batch, 128), np.float32)
        seconds = timed(lambda f=frames, c=contexts, s=states: model.step(f, c, s), 20 if quick else 100)
        print(f"  {batch:4d} sessions in one batch: {seconds * 1000:7.3f} ms per batch, "
              f"{seconds * 1000 / batch:6.3f} ms per session-chunk ({seconds / 0.032 * 100:5.1f} % of one core)")


async def asr_figures(engines: Engines, silence_ms: float) -> None:
    asr = engines.asr
    durations, seconds, hypotheses, references = [], [], [], []
    for clip in CLIPS:
        audio = librivox_clip(clip)
        await asr.transcribe(audio[:16_000])  # warm
        started = time.perf_counter()
        transcript = await asr.transcribe(audio)
        seconds.append(time.perf_counter() - started)
        durations.append(len(audio) / 16_000)
        hypotheses.append(transcript.text)
        references.append(librivox_reference(clip))
    rtf = sum(seconds) / sum(durations)
    wer = word_error_rate(references, hypotheses)
    cold = statistics.median(seconds)
    served = statistics.median(max(0.0, s - silence_ms / 1000) for s in seconds)
    print(f"ASR (Whisper tiny.en): real-time factor {rtf:.3f}, WER on the {len(CLIPS)} LibriVox clips {wer:.1%}")
    print(f"  end of speech -> final transcript: cold {cold * 1000:.0f} ms median; as served (recognition starts "
          f"at the first silence, {silence_ms:.0f} ms before the endpoint) {served * 1000:.0f} ms")


async def llm_figures(engines: Engines) -> None:
    ttfts, rates = [], []
    for question in QUESTIONS:
        messages = [ChatMessage("user", question)]
        started = time.perf_counter()
        first = None
        count = 0
        async for _token in engines.llm.stream(messages, cancel=CancelToken(), options=GenerationOptions(64)):
            count += 1
            if first is None:
                first = time.perf_counter()
        if first is not None and count > 1:
            ttfts.append(first - started)
            rates.append((count - 1) / max(time.perf_counter() - first, 1e-6))
    print(f"LLM ({engines.description.get('llm', '?')}): warm time to first token "
          f"{statistics.median(ttfts) * 1000:.0f} ms median, {statistics.median(rates):.1f} tokens/s")


async def tts_figures(engines: Engines, count: int) -> list[tuple[str, np.ndarray]]:
    firsts, rtfs, spoken = [], [], []
    for sentence in SENTENCES[:count]:
        started = time.perf_counter()
        first = None
        pieces = []
        async for chunk in engines.tts.synthesize(sentence, voice=None, cancel=CancelToken()):
            if first is None:
                first = time.perf_counter() - started
            pieces.append(chunk.audio)
        total = time.perf_counter() - started
        audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
        firsts.append(first or total)
        rtfs.append(total / max(len(audio) / engines.tts.sample_rate, 1e-6))
        spoken.append((sentence, resample(audio, engines.tts.sample_rate, 16_000)))
    print(f"TTS (Kokoro): real-time factor {statistics.median(rtfs):.3f}, time to first audio "
          f"{statistics.median(firsts) * 1000:.0f} ms median")
    return spoken


async def round_trip(engines: Engines, spoken: list[tuple[str, np.ndarray]]) -> None:
    references, hypotheses = [], []
    for sentence, audio in spoken:
        references.append(sentence)
        hypotheses.append((await engines.asr.transcribe(audio)).text)
    accuracy = 1 - word_error_rate(references, hypotheses)
    print(f"TTS -> ASR round trip on {len(spoken)} sentences: word accuracy {accuracy:.1%}")


async def first_audio(engines: Engines, turns: int) -> None:
    """In process: a clip in real time, then silence; last speech sample -> first audible agent sample."""
    results = []
    for index in range(turns):
        session = RealtimeSession(engines)
        session.start()
        clip = CLIPS[index % len(CLIPS)]
        pcm = pcm16_24k(librivox_clip(clip), silence_after_s=10.0)
        sent_at: list[float] = []
        audible_at: float | None = None
        speech_end_ms: float | None = None

        async def pump(session: RealtimeSession = session) -> None:
            nonlocal audible_at, speech_end_ms
            while True:
                item = await session.outbound.get()
                session.on_sent(item)
                event = item.event
                if event["type"] == "input_audio_buffer.speech_stopped":
                    speech_end_ms = float(event["audio_end_ms"])
                if event["type"] == "response.output_audio.delta" and audible_at is None:
                    samples = np.frombuffer(base64.b64decode(event["delta"]), "<i2")
                    loud = np.nonzero(np.abs(samples) > 300)[0]
                    if len(loud):
                        audible_at = time.monotonic() + loud[0] / 24_000

        pumping = asyncio.create_task(pump())
        started = time.monotonic()
        for position, chunk in enumerate(chunks_20ms(pcm)):
            await session.handle_message(json.dumps({"type": "input_audio_buffer.append",
                                                     "audio": base64.b64encode(chunk).decode()}))
            sent_at.append(time.monotonic())
            delay = started + (position + 1) * 0.02 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if audible_at is not None:
                break
        pumping.cancel()
        await session.close()
        if audible_at is None or speech_end_ms is None:
            print(f"  turn {index + 1}: no audible reply")
            continue
        # the wall time at which the last speech sample went in (20 ms chunks of 24 kHz in real time)
        last_sample_at = sent_at[min(len(sent_at) - 1, int(speech_end_ms // 20))]
        results.append((audible_at - last_sample_at) * 1000)
        print(f"  turn {index + 1}: first audio {results[-1]:.0f} ms")
    if results:
        print(f"first audio with the defaults: p50 {statistics.median(results):.0f} ms over {len(results)} turns "
              f"(goal: p50 <= 600 ms; includes the 500 ms endpoint silence)")


async def main_async(args: argparse.Namespace) -> None:
    vad_costs(args.quick)
    started = time.perf_counter()
    engines = load_engines(Settings())
    print(f"(models loaded in {time.perf_counter() - started:.1f} s)")
    await asr_figures(engines, 500)
    await llm_figures(engines)
    spoken = await tts_figures(engines, 10 if args.quick else 20)
    await round_trip(engines, spoken)
    await first_audio(engines, args.turns)
    await engines.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--turns", type=int, default=5, help="first-audio turns")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
