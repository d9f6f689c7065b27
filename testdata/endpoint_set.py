"""The endpoint evaluation set: sentences said whole, and the same sentences with a pause in the middle.

Each sentence has a hesitation point (``|``). The **complete** clip says it whole: the turn should end
soon after the last word. The **paused** clip stops at the hesitation point, is silent for a while
(600, 900 or 1,200 ms), then says the rest: ending the turn during that silence cuts the user off.

The hesitation is written as a comma (``"a table for, four people"``), so the TTS gives the words
before it the level, unfinished pitch of a speaker who is going on, as people do when they pause to
think; the short pause the TTS makes there is then lengthened to the chosen silence. A pause put
between two separately spoken halves would end the first half with a sentence's falling pitch, which
sounds finished to any listener (and to Smart Turn), and is not what a hesitating speaker sounds like.

Three synthetic voice families speak every sentence, and real recorded speech (``librivox``,
testdata/endpoint_real.py) is a fourth: Kokoro (bargein's own TTS, its bundled voice at three
rates), flite (four voices) and espeak-ng (four voices). Clips are 16 kHz mono with a faint hiss
(-65 dBFS) under them, 0.5 s of lead and 2.5 s of tail; they are cached under
``~/.cache/bargein/endpoint-set`` (nothing goes into git) with a manifest giving, for each clip, its
family, voice, text, the pause (start, length) and where the speech really ends.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import asdict
from pathlib import Path

import numpy as np

from bargein.audio.resample import resample
from testdata.endpoint_clips import (
    LEAD_S,
    PAUSES_MS,
    RATE,
    Audio,
    Clip,
    Family,
    frame_db,
    loud_bounds,
    place,
    wav_samples,
    write_clip,
)
from testdata.endpoint_real import build_real

VERSION = 1
DEFAULT_DIR = Path("~/.cache/bargein/endpoint-set").expanduser()
SYNTHETIC: tuple[Family, ...] = ("kokoro", "flite", "espeak")
FAMILIES: tuple[Family, ...] = (*SYNTHETIC, "librivox")
"""The synthetic families, then real recorded speech (testdata/endpoint_real.py)."""

SENTENCES = (
    "I want to book a table for | four people.",
    "Can you remind me to | call the dentist tomorrow?",
    "What's the weather like in | San Francisco this weekend?",
    "Set an alarm for | seven thirty.",
    "I'd like to order a large pizza with | mushrooms and olives.",
    "Play something by | the Beatles.",
    "How long does it take to | drive to Chicago?",
    "Send a message to | my sister.",
    "Add | bread and butter to the shopping list.",
    "Tell me about the | history of Rome.",
    "I need directions to the | nearest pharmacy.",
    "Could you turn the volume | down a bit?",
    "Schedule a meeting with | Sarah on Friday afternoon.",
    "What's the difference between | a crocodile and an alligator?",
    "Find me a recipe for | chocolate cake.",
    "How many calories are in | a banana?",
    "Call my mom and | tell her I'll be late.",
    "I was thinking that maybe we could | go to the beach.",
    "Give me a summary of | today's news.",
    "Who was the president of | France in nineteen ninety?",
    "Move my appointment to | next Tuesday.",
    "My favourite colour is | green.",
    "Can you explain how | a rainbow forms?",
    "I'm looking for a | cheap hotel near the station.",
)

VOICES: dict[Family, tuple[str, ...]] = {
    "kokoro": ("heart@0.9", "heart@1.0", "heart@1.12"),
    "flite": ("slt", "rms", "awb", "kal16"),
    "espeak": ("en-us", "en-gb", "en-us+f3", "en-gb-x-rp+m3"),
    "librivox": (),
}


def _speak_kokoro(text: str, voice: str) -> Audio:
    from testdata.make_listening_set import Voice

    global _KOKORO
    if _KOKORO is None:
        _KOKORO = Voice(seed=11)
    speed = float(voice.split("@")[1])
    return resample(_KOKORO.say(text, speed), 24_000, RATE)


_KOKORO = None


def _speak_program(family: Family, text: str, voice: str) -> Audio:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "say.wav"
        if family == "flite":
            command = ["flite", "-voice", voice, "-t", text, "-o", str(out)]
        else:
            command = ["espeak-ng", "-v", voice, "-s", "165", "-w", str(out), text]
        subprocess.run(command, check=True, capture_output=True)
        return wav_samples(out)


def speak(family: Family, text: str, voice: str) -> Audio:
    """``text`` in one voice of a family, at 16 kHz, leading and trailing silence trimmed."""
    audio = _speak_kokoro(text, voice) if family == "kokoro" else _speak_program(family, text, voice)
    start, end = loud_bounds(audio)
    return audio[start:end]


def comma_pause(audio: Audio, near: float, floor_db: float = 35.0) -> tuple[int, int] | None:
    """The quiet stretch the TTS made at the comma: the longest run of quiet 10 ms frames nearest the
    fraction ``near`` of the clip (the comma's place in the text), as sample bounds; None if none."""
    db = frame_db(audio)
    quiet = db < db.max() - floor_db
    runs: list[tuple[int, int]] = []
    index = 0
    while index < len(quiet):
        if quiet[index]:
            end = index
            while end < len(quiet) and quiet[end]:
                end += 1
            if end - index >= 3:  # 30 ms or more: a pause, not a stop consonant
                runs.append((index, end))
            index = end
        else:
            index += 1
    target = near * len(quiet)
    nearby = [run for run in runs if abs((run[0] + run[1]) / 2 - target) <= 0.25 * len(quiet)]
    if not nearby:
        return None
    start, end = max(nearby, key=lambda run: run[1] - run[0])
    frame = RATE // 100
    return start * frame, end * frame


def build(out: Path = DEFAULT_DIR, *, families: tuple[Family, ...] = FAMILIES, quick: bool = False) -> list[Clip]:
    """Make (or load from ``out``) every clip of the set; a family missing from the cache is added to it."""
    manifest = out / "manifest.json"
    clips: list[Clip] = []
    if manifest.is_file():
        stored = json.loads(manifest.read_text())
        if stored.get("version") == VERSION and stored.get("quick") == quick:
            clips = [Clip(**entry) for entry in stored["clips"]]
    out.mkdir(parents=True, exist_ok=True)
    have = {clip.family for clip in clips}
    if not have >= set(families):
        sentences = SENTENCES[::4] if quick else SENTENCES
        for family in (f for f in SYNTHETIC if f in families and f not in have):
            for voice_index, voice in enumerate(VOICES[family]):
                for number, sentence in enumerate(sentences):
                    clips += _sentence_clips(out, family, voice, voice_index, number, sentence)
        if "librivox" in families and "librivox" not in have:
            clips += build_real(out)
        manifest.write_text(json.dumps({"version": VERSION, "quick": quick, "clips": [asdict(c) for c in clips]}))
    return [clip for clip in clips if clip.family in families]


def _sentence_clips(out: Path, family: Family, voice: str, voice_index: int, number: int,
                    sentence: str) -> list[Clip]:
    first, second = (part.strip() for part in sentence.split("|"))
    rng = np.random.default_rng(number * 131 + voice_index * 17 + FAMILIES.index(family))
    whole = speak(family, f"{first} {second}", voice)
    slug = f"{family}-{voice.replace('@', '_').replace('+', '_')}-{number:02d}"
    clips = [write_clip(out, Clip(f"{slug}-complete", family, voice, number, f"{first} {second}", "complete",
                                  0, 0.0, LEAD_S + len(whole) / RATE, f"{slug}-complete.wav"), place(whole, rng))]
    hesitant = speak(family, f"{first}, {second}", voice)
    pause = comma_pause(hesitant, near=len(first) / (len(first) + len(second) + 2))
    if pause is None:
        return clips
    start, end = pause
    pause_ms = PAUSES_MS[(number + voice_index) % len(PAUSES_MS)]
    gap = np.zeros(int(pause_ms * RATE / 1000), np.float32)
    speech = np.concatenate([hesitant[:start], gap, hesitant[end:]])
    clips.append(write_clip(out, Clip(f"{slug}-paused", family, voice, number, f"{first}... {second}", "paused",
                                      pause_ms, LEAD_S + start / RATE, LEAD_S + len(speech) / RATE,
                                      f"{slug}-paused.wav"), place(speech, rng)))
    return clips
