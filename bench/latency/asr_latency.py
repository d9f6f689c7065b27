"""End-of-speech -> final transcript: how long Whisper takes per turn, and what each speed-up costs in WER.

    python -m bench.latency.asr_latency [--model tiny.en|base] [--threads 2] [--repeats 3] [--flite] [--batch]

Clips: the five LibriVox sentences of Debian's pocketsphinx-testdata (3-7 s) and its short clips
(cards, "go forward ten meters": 1-3.5 s); ``--flite`` adds 24 short voice-assistant commands spoken
by flite's four voices. Each configuration decodes every clip ``--repeats`` times, interleaved so
that load from other processes hits all of them alike; the median wall time per clip set is printed
with the corpus WER. ``--batch`` times CTranslate2 batches against the same clips one by one.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bargein.audio.resample import resample
from bargein.engines.transcribe.wer import word_error_rate
from bargein.engines.transcribe.whisper_asr import WhisperRecognizer, load_whisper
from bargein.engines.transcribe.whisper_decode import FINAL, FULL_WINDOW, PARTIAL, window_frames

DATA = Path("/usr/share/pocketsphinx/test/data")
Audio = npt.NDArray[np.float32]
Clip = tuple[str, Audio, str]  # set name, 16 kHz audio, reference text

COMMANDS = (
    "what time is it", "turn off the lights", "set a timer for ten minutes", "what's the weather like tomorrow",
    "play some jazz", "yes please", "how far is the moon", "tell me a joke", "call my mother",
    "remind me to buy milk", "open the garage door", "who wrote pride and prejudice", "can you hear me",
    "thank you very much", "what did you say", "wait a second", "book a table for four people tonight",
    "how do I make pancakes", "skip this track", "is it going to rain this afternoon",
    "what's on my calendar for friday", "add eggs and bread to my shopping list", "never mind",
    "how do you spell necessary",
)


def _wav(path: Path) -> Audio:
    with wave.open(str(path)) as handle:
        rate = handle.getframerate()
        samples = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
    return resample(samples.astype(np.float32) / 32768.0, rate, 16_000)


def _transcriptions(path: Path) -> dict[str, str]:
    """``<s> words </s> (file-id)`` lines, as in Sphinx test sets."""
    references = {}
    for line in path.read_text().splitlines():
        if "<s>" in line:
            references[line.rsplit("(", 1)[1].rstrip(")").strip()] = line.split("<s>")[1].split("</s>")[0].strip()
    return references


def load_clips(with_flite: bool) -> list[Clip]:
    """LibriVox sentences and short commands with their reference text."""
    clips: list[Clip] = []
    for file_id, text in _transcriptions(DATA / "librivox" / "transcription").items():
        clips.append(("librivox", _wav(DATA / "librivox" / f"{file_id}.wav"), text))
    for file_id, text in _transcriptions(DATA / "cards" / "cards.transcription").items():
        clips.append(("short", _wav(DATA / "cards" / f"{file_id}.wav"), text))
    raw = np.fromfile(DATA / "goforward.raw", dtype="<i2").astype(np.float32) / 32768.0
    clips.append(("short", raw, "go forward ten meters"))
    if with_flite:
        clips.extend(("flite", audio, text) for audio, text in _flite_commands())
    return clips


def _flite_commands() -> list[tuple[Audio, str]]:
    if shutil.which("flite") is None:
        print("flite is not installed: skipping the synthetic commands")
        return []
    voices = ("kal16", "awb", "slt", "rms")
    spoken = []
    with tempfile.TemporaryDirectory() as folder:
        for index, text in enumerate(COMMANDS):
            path = Path(folder) / f"{index}.wav"
            subprocess.run(["flite", "-voice", voices[index % len(voices)], "-t", text, "-o", str(path)], check=True)
            spoken.append((_wav(path), text))
    return spoken


def configurations(asr: WhisperRecognizer) -> dict[str, Callable[[Audio], str]]:
    """What is compared: faster-whisper's own transcribe() (the before), then each cut in turn."""
    model = asr.core.model

    def faster_whisper(**options: object) -> Callable[[Audio], str]:
        def run(audio: Audio) -> str:
            segments, _ = model.transcribe(audio, language="en", vad_filter=False, **options)  # type: ignore[arg-type]
            return " ".join(segment.text.strip() for segment in segments)
        return run

    def ours(options: object) -> Callable[[Audio], str]:
        return lambda audio: asr.transcribe_sync(audio, language="en", options=options).text  # type: ignore[arg-type]

    return {
        "faster-whisper defaults (beam 5, timestamps, 30 s)": faster_whisper(),
        "faster-whisper beam 1, no timestamps (30 s)": faster_whisper(
            beam_size=1, without_timestamps=True, condition_on_previous_text=False),
        "ours: 30 s window, silence padding": ours(FULL_WINDOW),
        "ours: 30 s window, no word timings": ours(dataclasses.replace(FULL_WINDOW, word_timestamps=False)),
        "ours: short window, loops trimmed, no retry": ours(dataclasses.replace(FINAL, loop_guard="trim")),
        "ours: final (short window + loop guard + words)": ours(FINAL),
        "ours: partial (short window, trim loops, no words)": ours(PARTIAL),
    }


def bench_configurations(asr: WhisperRecognizer, clips: list[Clip], repeats: int) -> None:
    """Print the median time and WER of every configuration, per clip set."""
    runs = configurations(asr)
    times: dict[tuple[str, str], list[float]] = {}
    texts: dict[tuple[str, int], str] = {}
    for repeat in range(repeats):
        for index, (set_name, audio, _) in enumerate(clips):
            for name, run in runs.items():
                started = time.perf_counter()
                text = run(audio)
                times.setdefault((name, set_name), []).append(time.perf_counter() - started)
                if repeat == 0:
                    texts[(name, index)] = text
    sets = list(dict.fromkeys(set_name for set_name, _, _ in clips))
    header = "".join(f" | {s:>8} median s   WER" for s in sets)
    print(f"{'configuration':52}{header}")
    for name in runs:
        row = ""
        for set_name in sets:
            members = [i for i, clip in enumerate(clips) if clip[0] == set_name]
            wer = word_error_rate([clips[i][2] for i in members], [texts[(name, i)] for i in members])
            row += f" | {statistics.median(times[(name, set_name)]):17.3f} {wer:5.3f}"
        print(f"{name:52}{row}")
    print(f"finals decoded again on the full window (loop guard): {asr.core.retries} over all runs")
    for index, (set_name, _, reference) in enumerate(clips):
        final = texts[("ours: final (short window + loop guard + words)", index)]
        if word_error_rate([reference], [final]) > 0.3:
            print(f"  worst ({set_name}): {reference!r} -> {final!r}")


def bench_batching(asr: WhisperRecognizer, clips: list[Clip], repeats: int) -> None:
    """Does a CTranslate2 batch of short turns beat the same turns one by one? (Decides the worker design.)"""
    core = asr.core
    short = [audio for set_name, audio, _ in clips if set_name != "librivox"]
    frames = window_frames(16_000, FINAL)
    tokenizer = core.tokenizer("en")
    start = core.model.get_prompt(tokenizer, [], without_timestamps=True)

    def features(audio: Audio) -> Audio:
        mel = core.model.feature_extractor(audio)
        window = np.full((mel.shape[0], frames), mel.max() - 2.0, dtype=np.float32)
        window[:, :min(frames, mel.shape[1])] = mel[:, :frames]
        return window

    for size in (1, 2, 4, 8):
        batch = np.stack([features(short[i % len(short)]) for i in range(size)])
        one_by_one, together = [], []
        for _ in range(repeats):
            started = time.perf_counter()
            for item in batch:
                core.model.model.generate(core.model.encode(item), [start], beam_size=1, max_length=64)
            one_by_one.append(time.perf_counter() - started)
            started = time.perf_counter()
            core.model.model.generate(core.model.encode(batch), [start] * size, beam_size=1, max_length=64)
            together.append(time.perf_counter() - started)
        print(f"batch of {size}: one by one {min(one_by_one):.3f} s, as one batch {min(together):.3f} s")


def main() -> None:
    """Parse the options and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny.en")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--flite", action="store_true", help="add flite-spoken short commands")
    parser.add_argument("--batch", action="store_true", help="time CTranslate2 batching instead")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    asr = load_whisper(args.model, cpu_threads=args.threads)
    print(f"{asr.description}; loaded and warmed up in {time.perf_counter() - started:.1f} s")
    clips = load_clips(args.flite)
    if args.batch:
        bench_batching(asr, clips, args.repeats)
    else:
        bench_configurations(asr, clips, args.repeats)


if __name__ == "__main__":
    main()
