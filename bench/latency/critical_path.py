"""The floor of first audio on this machine: each step a finished question waits for after its last word, alone.

    python -m bench.latency.critical_path [--repeats 3]      # about 2 minutes, the ten question clips

A turn that ends on a finished question (``bench/harness/question_clips.py``) reaches its first audio, at best, by
these steps one after the other, each run here with the default models in process and nothing else running:

1. **recognition and end-of-turn score**: the speculative guess (Whisper tiny.en on the turn so far) and Smart
   Turn's score of the same audio start at the first silence and run together (timed alone, each of them, and
   both together as they run live); the short tier of the default
   endpoint needs both (its 200 ms of silence has passed by the time they are back);
2. **the reply's prompt**: the LLM has evaluated the history and the words of the turn's last partial
   transcript during speech (prompt warming); the words after them and the turn's closing markers are left
   to evaluate before the first token;
3. **the first clause**: three whole words (``FIRST_CLAUSE_WORDS``), so the next word must have begun;
4. **its speech**: Kokoro's first audio for those words.

The sum of the steps' medians estimates what the session adds after its VAD has heard the silence begin, with
every step given the whole machine; live, the steps also share the two cores with the VAD, the partial
recognitions, the event loop and each other, and the VAD hears the silence some 60 ms after the voice ends
(``bench/latency/first_audio.py``'s "VAD end - energy end"). Medians throughout. The LLM here has the engine's own
system prompt and no tools, where a live session's prompt also carries the built-in tools; that part is cached in both.
How much of the question the warm covered is set by :data:`PARTIAL_SHARE` and printed: the tokens left to
evaluate at the reply.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bargein.audio.resample import resample
from bargein.engines.speak.clauses import FIRST_CLAUSE_WORDS, ClauseSplitter
from bargein.values import CancelToken, ChatMessage, GenerationOptions
from bench.harness.question_clips import Turn, question_turns
from bench.harness.realtime_harness import WIRE_RATE, speech_bounds

LISTEN_RATE = 16_000
HISTORY = (
    ChatMessage("user", "Good morning, can you help me with a few questions?"),
    ChatMessage("assistant", "Good morning! Of course, ask me anything and I will do my best to help."),
)
"""The conversation before the question (its prompt is cached, as in a live session)."""
PARTIAL_SHARE = 0.5
"""The share of the question's words its last partial transcript heard (partials come once a second; the
questions last 1.5 to 3 s)."""


def _median_ms(values: list[float]) -> float:
    return 1000.0 * statistics.median(values)


def turn_audio(turns: list[Turn]) -> list[npt.NDArray[np.float32]]:
    """Each turn at 16 kHz, up to 100 ms after its last word (the audio the guess hears)."""
    clips = []
    for turn in turns:
        _, end, _ = speech_bounds(turn.audio, WIRE_RATE)
        clips.append(resample(turn.audio[:end + WIRE_RATE // 10], WIRE_RATE, LISTEN_RATE))
    return clips


def recognise_and_score(clips: list[npt.NDArray[np.float32]], repeats: int) -> dict[str, list[float]]:
    """Times of the guess alone, the score alone, and both started together (until the later is back)."""
    from bargein.engines.listen.smart_turn import SmartTurnModel
    from bargein.engines.transcribe.whisper_asr import load_whisper

    asr = load_whisper()
    turn_model = SmartTurnModel()
    times: dict[str, list[float]] = {"recognition alone": [], "end-of-turn score alone": [], "both together": []}

    def timed(work: Callable[[npt.NDArray[np.float32]], object], audio: npt.NDArray[np.float32]) -> float:
        time.sleep(0.2)  # as live: the cores idle a moment before the silence
        started = time.perf_counter()
        work(audio)
        return time.perf_counter() - started

    for _ in range(repeats):
        for audio in clips:
            times["recognition alone"].append(timed(lambda clip: asr.transcribe_sync(clip, language="en"), audio))
            times["end-of-turn score alone"].append(timed(lambda clip: turn_model.probabilities([clip]), audio))
            time.sleep(0.2)
            scorer = threading.Thread(target=turn_model.probabilities, args=([audio],))
            started = time.perf_counter()
            scorer.start()
            asr.transcribe_sync(audio, language="en")
            scorer.join()
            times["both together"].append(time.perf_counter() - started)
    return times


async def reply_steps(questions: list[str], repeats: int) -> tuple[dict[str, list[float]], list[int]]:
    """Per question: the first token after the warmed prompt, then the first clause; and the clause's speech.
    Also the prompt tokens each reply had left to evaluate."""
    from bargein.engines.speak.kokoro_tts import load_kokoro
    from bargein.engines.think.llama_llm import load_llama

    llm = await asyncio.to_thread(load_llama)
    tts = await asyncio.to_thread(load_kokoro)
    times: dict[str, list[float]] = {"prompt left to evaluate, to the first token": [],
                                     "first token to the first clause": [], "first clause to its first audio": []}
    options = GenerationOptions(max_tokens=24, temperature=0.0)
    left: list[int] = []
    wide = [0, 0]  # evaluations on every core, of all the replies' evaluations
    for _ in range(repeats):
        for question in questions:
            words = question.split()
            heard = " ".join(words[:max(1, round(len(words) * PARTIAL_SHARE))])
            await asyncio.to_thread(llm.generate, [*HISTORY, ChatMessage("user", heard)],
                                    GenerationOptions(max_tokens=1))  # the warm: history and the partial's words
            warmed = llm.last_stats
            splitter = ClauseSplitter(first_max_words=FIRST_CLAUSE_WORDS)
            started = time.perf_counter()
            first_token = clause = None
            cancel = CancelToken()
            async for token in llm.stream([*HISTORY, ChatMessage("user", question)], cancel=cancel, options=options):
                first_token = first_token or time.perf_counter()
                if ready := splitter.feed(token):
                    clause = ready[0]
                    break
            cancel.cancel()
            clause_at = time.perf_counter()
            clause = clause or splitter.flush()
            for _ in range(100):  # the cancelled reply's figures are filed once its job has stopped
                if llm.last_stats is not warmed:
                    break
                await asyncio.sleep(0.01)
            stats = llm.last_stats if llm.last_stats is not warmed else None
            if first_token is None or not clause or stats is None:
                continue
            if stats.restored_snapshot:  # a saved cache would hold the whole question: not the warm's case
                raise RuntimeError("the reply restored a saved cache; the timing would not be the warm's")
            left.append(stats.prompt_tokens - stats.reused_tokens)
            wide[0] += stats.wide_evaluations
            wide[1] += stats.evaluations
            times["prompt left to evaluate, to the first token"].append(first_token - started)
            times["first token to the first clause"].append(clause_at - first_token)
            spoken = time.perf_counter()
            async for _chunk in tts.synthesize(clause, voice=None, cancel=CancelToken()):
                times["first clause to its first audio"].append(time.perf_counter() - spoken)
                break
    print(f"the replies' evaluations on every core: {wide[0]} of {wide[1]}")
    return times, left


def main() -> None:
    """Parse the options, time each step, print the medians and their sum."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"load average {' '.join(f'{value:.2f}' for value in os.getloadavg())}", flush=True)
    turns = question_turns()
    heard = recognise_and_score(turn_audio(turns), args.repeats)
    replying, left = asyncio.run(reply_steps([turn.text for turn in turns], args.repeats))
    print(f"\n{'step':50} {'median ms':>9}")
    for name, values in {**heard, **replying}.items():
        print(f"{name:50} {_median_ms(values):9.0f}   (n {len(values)})")
    total = sum(_median_ms(values) for name, values in {**heard, **replying}.items()
                if name not in ("recognition alone", "end-of-turn score alone"))
    print(f"{'sum of the medians but the two alone':50} {total:9.0f}")
    print(f"prompt tokens left to evaluate at the reply (warm covered {PARTIAL_SHARE:.0%} of the words): "
          f"median {statistics.median(left):.0f}, {min(left)} to {max(left)}")
    print(f"load average {' '.join(f'{value:.2f}' for value in os.getloadavg())}")

if __name__ == "__main__":
    main()
