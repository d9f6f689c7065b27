"""Whisper tiny.en against Moonshine base-en on the same held-out clips: WER and time per segment, side by side.

    python -m bench.quality.asr_compare [--limit N] [--dump FILE.json]
    python -m bench.quality.asr_compare --report FILE.json     # the tables again from a dump, nothing recognised

Needs the held-out family set (``python -m testdata.make_family_set --split held_out``) and the
``moonshine-cpp`` wheel on the path (:mod:`bench.harness.moonshine_runner`). The clips, every one a
segment as the server would hand it over:

* **clean**: the ten finished questions of ``bench.harness.question_clips`` (held-out synthesisers and a
  recorded human), the family set's clean ``room`` cases and the five LibriVox sentences of pocketsphinx's
  test data;
* **talker**: the family set's ``talker`` cases (another voice 10 dB below the user, a bed at 20 dB SNR);
* **phone + talker**: the family set's ``phone`` cases (the talker mix band-limited and through G.711
  μ-law or A-law at 8 kHz);
* **phone, μ-law**: the ten finished questions through an 8 kHz μ-law round trip (no talker).

The family set's cases are commands, queries and backchannels (scored), and noise and vocal sounds (no
words: the words each recogniser wrote on them are counted). A family-set segment is its sound's true bounds
widened by :data:`LEAD_S` and :data:`TAIL_S`, fixed before any run, so it holds whatever the talker said then.
Each clip is recognised once by each recogniser, in alternating order so load from other processes hits both
alike: Whisper as the server loads it (:func:`load_whisper`'s defaults, finals in English, on its two encoder
threads), Moonshine on the one thread its library runs. The time is wall time per segment; the CPU time is
the whole process's over the call.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bargein.audio.resample import resample
from bargein.engines.transcribe.wer import normalize, word_error_rate
from bench.harness.realtime_harness import percentile
from testdata.make_family_set import CACHE as FAMILY_CACHE

Audio = npt.NDArray[np.float32]
RATE = 16_000
FAMILY_SET = FAMILY_CACHE / "held_out"
LEAD_S = 0.25
"""Audio kept before a family-set sound's true start (the VAD's segment opens a little early)."""
TAIL_S = 0.35
"""Audio kept after its true end."""
WORDED = ("command", "query", "backchannel")
LENGTHS = ((0.0, 1.5, "< 1.5 s"), (1.5, 3.0, "1.5-3 s"), (3.0, 99.0, ">= 3 s"))
CONDITIONS = {"room": "clean", "talker": "talker", "phone": "phone + talker"}


@dataclass(frozen=True)
class Clip:
    """One segment to recognise: its condition, kind (what is said), name, 16 kHz audio and reference words."""

    condition: str
    kind: str
    name: str
    audio: Audio
    reference: str


@dataclass
class Heard:
    """What one recogniser wrote for one clip, and how long it took."""

    recogniser: str
    condition: str
    kind: str
    name: str
    seconds: float
    reference: str
    text: str
    ms: float
    cpu_ms: float


def _read(path: Path) -> tuple[Audio, int]:
    import wave

    with wave.open(str(path)) as handle:
        rate = handle.getframerate()
        samples = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
    return samples.astype(np.float32) / 32768.0, rate


def family_clips() -> list[Clip]:
    """The held-out family set's cases as segments: clean room, talker, phone (the noisy room beds left out)."""
    manifest = json.loads((FAMILY_SET / "manifest.json").read_text())
    clips = []
    for case in manifest["cases"]:
        if case["condition"] == "room" and case.get("snr_db") is not None:
            continue  # a noisy bed is neither clean speech nor a talker
        audio, rate = _read(FAMILY_SET / case["file"])
        start = max(0, int((case["event_start_s"] - LEAD_S) * rate))
        end = int((case["event_end_s"] + TAIL_S) * rate)
        segment = resample(np.ascontiguousarray(audio[start:end]), rate, RATE)
        worded = case["category"] in WORDED
        clips.append(Clip(CONDITIONS[case["condition"]], case["category"] if worded else "no words", case["id"],
                          segment, case["text"] if worded else ""))
    return clips


def question_clips() -> list[Clip]:
    """The ten finished questions, clean and through an 8 kHz μ-law round trip."""
    from bench.harness.question_clips import question_turns
    from testdata.make_family_set import telephone
    from testdata.noise_sources import RATE as WIRE_RATE

    clips = []
    for turn in question_turns():
        clips.append(Clip("clean", "question", turn.name, resample(turn.audio, WIRE_RATE, RATE), turn.text))
        phoned = resample(telephone(turn.audio, "audio/pcmu"), 8_000, RATE)
        clips.append(Clip("phone, μ-law", "question", turn.name, phoned, turn.text))
    return clips


def librivox_clips() -> list[Clip]:
    """The five LibriVox sentences of pocketsphinx's test data (read human speech, 3-8 s)."""
    from testdata.make_listening_set import librivox
    from testdata.noise_sources import RATE as WIRE_RATE

    return [Clip("clean", "librivox", f"librivox/{name}", resample(audio, WIRE_RATE, RATE), text)
            for name, audio, text in librivox()]


def recognisers() -> dict[str, Callable[[Audio], str]]:
    """Both recognisers, loaded and warmed up, as blocking audio-to-text calls."""
    from bargein.engines.transcribe.whisper_asr import load_whisper
    from bench.harness.moonshine_runner import load_moonshine

    whisper = load_whisper()
    moonshine = load_moonshine()
    print(f"whisper: {whisper.description}\nmoonshine: {moonshine.description}")
    return {"whisper tiny.en": lambda audio: whisper.transcribe_sync(audio, language="en").text,
            "moonshine base-en": moonshine.transcribe}


def run(clips: list[Clip], runs: dict[str, Callable[[Audio], str]]) -> list[Heard]:
    """Every clip through every recogniser once, the order alternating clip by clip."""
    heard = []
    names = list(runs)
    for index, clip in enumerate(clips):
        for name in names if index % 2 == 0 else names[::-1]:
            started, cpu = time.perf_counter(), time.process_time()
            text = runs[name](clip.audio)
            ms, cpu_ms = 1000 * (time.perf_counter() - started), 1000 * (time.process_time() - cpu)
            heard.append(Heard(name, clip.condition, clip.kind, clip.name, len(clip.audio) / RATE, clip.reference,
                               text, ms, cpu_ms))
    return heard


def score(rows: list[Heard]) -> str:
    """Corpus WER and whole transcripts right, or for clips without words the words written on them."""
    if not rows:
        return "-"
    if not rows[0].reference:
        return f"{sum(len(normalize(h.text)) for h in rows)} words out"
    wer = word_error_rate([h.reference for h in rows], [h.text for h in rows])
    exact = sum(normalize(h.reference) == normalize(h.text) for h in rows)
    return f"WER {wer:.3f}, {exact}/{len(rows)} exact"


def _timing(rows: list[Heard]) -> str:
    wall = [h.ms for h in rows]
    cpu = float(np.mean([h.cpu_ms for h in rows])) if rows else math.nan
    return f"{percentile(wall, 50):.0f} / {percentile(wall, 95):.0f} ({cpu:.0f})"


def report(heard: list[Heard]) -> None:
    """Per condition and kind: WER and exact transcripts of each recogniser; per clip length: the times."""
    names = list(dict.fromkeys(h.recogniser for h in heard))

    def table(first: str, keys: list[tuple[str, ...]], key: Callable[[Heard], tuple[str, ...]],
              cell: Callable[[list[Heard]], str]) -> None:
        print(f"\n| {first} | clips | " + " | ".join(names) + " |\n|---|---|" + "---|" * len(names))
        for k in keys:
            rows = {name: [h for h in heard if h.recogniser == name and key(h) == k] for name in names}
            print(f"| {' / '.join(k)} | {len(rows[names[0]])} | " + " | ".join(cell(rows[n]) for n in names) + " |")

    def worded(h: Heard) -> tuple[str, ...]:
        return (h.condition, "no words" if not h.reference else "with words")

    conditions = list(dict.fromkeys(worded(h) for h in heard))
    table("condition", sorted(conditions, key=lambda k: k[1] == "no words"), worded, score)
    table("condition / kind", list(dict.fromkeys((h.condition, h.kind) for h in heard if h.reference)),
          lambda h: (h.condition, h.kind), score)

    def length(h: Heard) -> tuple[str, ...]:
        return next((label,) for low, high, label in LENGTHS if low <= h.seconds < high)

    table("clip length: p50 / p95 ms (mean CPU ms)", [(label,) for _, _, label in LENGTHS], length, _timing)


def main() -> None:
    """Parse the options, recognise every clip with both (or read a dump), print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=0, help="only the first N clips (a smoke run)")
    parser.add_argument("--dump", type=Path, help="write every clip's transcripts and times as JSON")
    parser.add_argument("--report", type=Path, help="print the tables of an earlier --dump instead of running")
    args = parser.parse_args()
    if args.report:
        report([Heard(**row) for row in json.loads(args.report.read_text())])
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print("load at start:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    clips = question_clips() + librivox_clips() + family_clips()
    clips = clips[:args.limit] if args.limit else clips
    heard = run(clips, recognisers())
    report(heard)
    print("\nload at end:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    if args.dump:
        args.dump.write_text(json.dumps([asdict(h) for h in heard], indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
