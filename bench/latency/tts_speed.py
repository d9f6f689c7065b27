"""Speed of the speech synthesisers: real-time factor and time to first audio.

    python -m bench.latency.tts_speed [--engines kokoro flite] [--threads 1]

For each sentence (typical LLM reply clauses) it times one ``synthesize`` call on a warm engine:
time to first chunk (wall clock from the call to the first chunk in hand), where the first sound lies
inside that chunk (leading silence the client plays before hearing anything), and the real-time factor
(synthesis wall time / audio duration; below 1 is faster than real time). Medians are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bargein.engines.base import SpeechSynthesizer
from bargein.values import CancelToken

SENTENCES = [
    "Sure, I can help with that.",
    "The weather tomorrow looks sunny, with a high of twenty two degrees.",
    "Yes.",
    "Let me think about it for a second.",
    "The capital of Australia is Canberra, not Sydney, as many people assume.",
    "You could try restarting the router first, and if that does not work, call your provider.",
    "Good morning!",
    "That recipe needs three eggs, a cup of flour and a pinch of salt.",
    "I'm not sure I understood, could you say that again?",
    "In short, the meeting moved to Thursday at half past ten in the small conference room.",
]


async def _measure(tts: SpeechSynthesizer, text: str) -> tuple[float, float, float, float]:
    """(seconds to first chunk, seconds of silence before the first sound, total seconds, audio seconds)."""
    start = time.perf_counter()
    first = None
    onset = 0.0
    samples = 0
    async for chunk in tts.synthesize(text, voice=None, cancel=CancelToken()):
        if first is None:
            first = time.perf_counter() - start
            loud = np.flatnonzero(np.abs(chunk.audio) > 0.01)
            onset = (float(loud[0]) if len(loud) else float(len(chunk.audio))) / chunk.sample_rate
        samples += len(chunk.audio)
    total = time.perf_counter() - start
    return first or total, onset, total, samples / tts.sample_rate


async def _bench(name: str, tts: SpeechSynthesizer) -> None:
    await _measure(tts, "Warm up.")
    rows = [await _measure(tts, s) for s in SENTENCES]
    first = statistics.median(r[0] for r in rows) * 1000
    onset = statistics.median(r[1] for r in rows) * 1000
    rtf = statistics.median(r[2] / r[3] for r in rows)
    total_rtf = sum(r[2] for r in rows) / sum(r[3] for r in rows)
    print(f"{name:7s} first chunk {first:6.1f} ms (median)  + leading silence {onset:5.1f} ms   "
          f"RTF {rtf:.4f} median, {total_rtf:.4f} overall ({1 / total_rtf:5.1f}x real time), "
          f"{sum(r[3] for r in rows):.1f} s of audio over {len(rows)} sentences")


def main() -> None:
    """Parse arguments, load the engines, print one line of figures per engine."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", nargs="+", default=["kokoro", "flite"], choices=["kokoro", "flite"])
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime threads for kokoro")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    for name in args.engines:
        start = time.perf_counter()
        tts: SpeechSynthesizer
        if name == "kokoro":
            from bargein.engines.speak.kokoro_tts import load_kokoro

            tts = load_kokoro(threads=args.threads)
        else:
            from bargein.engines.speak.flite_tts import FliteSynthesizer

            tts = FliteSynthesizer()
        print(f"{name:7s} loaded in {time.perf_counter() - start:.2f} s")
        asyncio.run(_bench(name, tts))


if __name__ == "__main__":
    main()
