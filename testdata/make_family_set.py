"""Generate the listening benchmark's family set: many voices, a fixed training / held-out split.

    python -m testdata.make_family_set [--split held_out|train] [--out DIR]

Every case is a *timeline*: a sound that lands while the agent is speaking (2 s of background into a
long reply, the sound, then 1.5 s). What it must do depends on its category:

* **command** (commands and short questions: "Stop.", "Wait.", "Why?", "What about tomorrow?", ...)
  and **query** (a full request) must cut the reply;
* **backchannel** ("Uh-huh.", "Okay.", "Sure.", ...) and **vocal** sounds (a laugh, a throat clearing,
  a hum, a groan, a sigh, a sneeze) must let it go on;
* **noise** (the synthetic events of ``noise_sources``: no voice) must let it go on.

Each spoken sound is rendered by a voice family (``testdata/voices.py``) and put through one or more
**conditions**: ``room`` (a background bed at a drawn SNR: clean, 20, 10 or 5 dB), ``talker`` (another
voice reading a text 10 dB below the user, over a bed at 20 dB SNR) and ``phone`` (the talker mix
band-limited to 300-3400 Hz, at 8 kHz, through G.711 μ-law or A-law; streamed as ``audio/pcmu`` or
``audio/pcma``). Which families are fitted on and which are held out is fixed in
``testdata/listening_split.json``; the background talkers are families of the other list's role
(see that file). Nothing generated goes into git: the WAV files and ``manifest.json`` go to
``~/.cache/bargein/listening-families/<split>``, deterministically from the seed.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from testdata.make_listening_set import Case, Expect, case_seed, scaled_over_bed, trimmed, write_wav
from testdata.noise_sources import BACKGROUNDS, NOISES, RATE, Audio, active_level_db, band
from testdata.voices import FAMILIES, Family

VERSION = 6
SPLIT_FILE = Path(__file__).with_name("listening_split.json")
CACHE = Path("~/.cache/bargein/listening-families").expanduser()
LEAD_S = 2.0
"""Background before the sound: the reply is playing and the session's noise floor has settled."""
TAIL_S = 1.5
TALKER_BELOW_DB = 10.0
TALKER_BED_SNR_DB = 20.0
TALKER_QUIET_S = 1.2
ROOM_SNRS: tuple[float | None, ...] = (None, 20.0, 10.0, 5.0)
PHONE_RATE = 8_000

COMMANDS = (
    "Stop.", "Stop it.", "Wait.", "Hold on.", "No.", "Pause.", "Enough.", "Be quiet.", "Cancel that.", "Why?",
    "What about tomorrow?", "Hang on.", "Wait a second.", "Stop talking.", "Go back.", "Repeat that.", "Louder.",
    "What?", "Sorry?", "Excuse me.", "Next.", "No, stop.",
)
"""Commands and short questions that must cut the agent short."""
QUERIES = (
    "What time is it in Tokyo right now?", "Set a timer for ten minutes.", "How do I boil an egg?",
    "Turn off the lights in the kitchen.", "Who wrote Pride and Prejudice?", "Remind me to call my mother at six.",
    "Could you speak a little slower please?", "Book a table for two at eight tonight.",
)
BACKCHANNELS = ("Uh-huh.", "Mm-hmm.", "Okay.", "Yeah.", "Sure.", "Right.", "I see.")
VOCALS = ("Ha ha ha!", "Ahem.", "Hmm.", "Ugh.", "Phew.", "Achoo!")
RECORDED_COMMANDS = ("Pause.", "No.", "Hello.", "Goodbye!", "One moment, please.", "Please try again.")
"""The recorded speaker's prompts that work as interruptions (the rest of its prompts are full queries)."""
ASK = "Tell me a story."
"""What the user asked before the agent's reply (for recorded speakers and noise cases, in the split's first voice)."""
TALKER_TEXT = (
    "In other news tonight, the city council met to discuss the new budget for public transport. "
    "Several members said that the plan would raise fares for the third year in a row, while others "
    "argued that the money was needed to repair the old bridges. The vote will take place next week. "
    "Meanwhile the weather service expects rain over the weekend, with strong winds along the coast."
)
"""What the background talker reads (a television in the room, or someone on another call)."""
NOISE_VARIANTS = {"train": range(0, 4), "held_out": range(10, 12)}
"""Noise sounds are not voices: the two splits draw different seeded variants."""


def talking(family: Family, rng: np.random.Generator) -> Audio:
    """The background talker: :data:`TALKER_TEXT` phrase by phrase, with pauses of 0.6-1.4 s between.

    A talker without pauses (a television) keeps the VAD in speech for good, so no turn ever ends;
    bargein has no defence against that yet (it would take a level gate before the VAD), and the
    benchmark measures what the classifier makes of a room with someone else talking in it.
    """
    phrases = [p.strip() for p in re.split(r"(?<=[,.])\s+", TALKER_TEXT) if p.strip()]
    parts: list[Audio] = []
    for phrase in phrases:
        parts.append(trimmed(family.say(phrase, rng)))
        parts.append(np.zeros(round(RATE * rng.uniform(0.6, 1.4)), np.float32))
    return np.concatenate(parts)


def split_families(split: str) -> tuple[list[str], list[str]]:
    """The user families and the background talkers of ``split`` (``train`` or ``held_out``)."""
    table = json.loads(SPLIT_FILE.read_text())
    return list(table[split]), list(table["background_talkers"][split])


def texts_for(family: Family) -> dict[str, tuple[str, ...]]:
    """Category -> the texts this family speaks."""
    if family.texts is None:
        return {"command": COMMANDS, "query": QUERIES, "backchannel": BACKCHANNELS, "vocal": VOCALS}
    own = sorted(family.texts())
    commands = tuple(t for t in own if t in RECORDED_COMMANDS)
    return {"command": commands, "query": tuple(t for t in own if t not in commands and t != "Tomorrow.")}


def conditions_for(category: str, split: str, index: int) -> tuple[str, ...]:
    """Held-out commands, backchannels, vocal sounds and noise get every condition; full queries (long, and
    rarely missed) and every training sound one each, in turn: the recogniser's CPU time is the budget."""
    every: tuple[str, ...] = ("room", "talker", "phone")
    if split == "held_out":
        return every if category != "query" else (every[index % len(every)],)
    if category == "query" and index % 2:
        every = ("room", "talker")
    return (every[index % len(every)],)


def telephone(audio: Audio, codec: str) -> Audio:
    """300-3400 Hz, 8 kHz, through G.711 (``audio/pcmu`` or ``audio/pcma``): float32 at 8 kHz."""
    from bargein.audio.codecs import AudioFormat, float_to_int16, int16_to_float
    from bargein.audio.resample import resample

    narrow = resample(band(audio, 300.0, 3400.0), RATE, PHONE_RATE)
    wire = AudioFormat(codec, PHONE_RATE)  # type: ignore[arg-type]
    return int16_to_float(wire.decode(wire.encode(float_to_int16(narrow))))


def place(sound: Audio, rng: np.random.Generator, *, condition: str, talker: Audio | None,
          snr_db: float | None, bed: str, level_db: float | None = None) -> tuple[Audio, float, float, float]:
    """The sound at a drawn level near -26 dBFS (or ``level_db``) after ``LEAD_S`` of background: the mix,
    the sound's true start and end (s), and its level (dBFS)."""
    fg, out, level, start, end = scaled_over_bed(sound, bed, snr_db, rng, lead_s=LEAD_S, tail_s=TAIL_S,
                                                 level_db=level_db)
    lead, total = round(LEAD_S * RATE), len(out)
    if condition in ("talker", "phone") and talker is not None:
        offset = int(rng.integers(0, max(1, len(talker) - total)))
        voice = np.resize(talker[offset:], total).astype(np.float64)
        # the talker pauses before the case ends, so the VAD can close the turn within the case
        quiet = total - round(TALKER_QUIET_S * RATE)
        voice[quiet:] = 0.0
        voice[quiet - 1200:quiet] *= np.linspace(1.0, 0.0, 1200)
        out += voice * 10 ** ((level - TALKER_BELOW_DB - active_level_db(talker)) / 20)
    out[lead:lead + len(fg)] += fg
    peak = float(np.max(np.abs(out)))
    if peak > 0.95:
        out *= 0.95 / peak
    return out.astype(np.float32), LEAD_S + start, LEAD_S + end, level


def stored_cases(manifest: Path, key: dict[str, Any]) -> list[Case] | None:
    """The cases ``manifest`` lists, when it was written for ``key`` and all their files are there."""
    if manifest.is_file():
        stored = json.loads(manifest.read_text())
        if stored.get("key") == key and all((manifest.parent / c["file"]).is_file() for c in stored["cases"]):
            return [Case(**c) for c in stored["cases"]]
    return None


def empty_folder(out: Path) -> None:
    """Make ``out`` and clear the recordings of an earlier build from it."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.wav"):
        stale.unlink()


def build(split: str = "held_out", *, seed: int = 7, out: Path | None = None, verbose: bool = False) -> list[Case]:
    """Write the split's set (reused when the manifest says it is the same) and return its cases."""
    out = out or CACHE / split
    manifest = out / "manifest.json"
    users, talkers = split_families(split)
    key = {"version": VERSION, "seed": seed, "split": split, "users": users, "talkers": talkers}
    stored = stored_cases(manifest, key)
    if stored is not None:
        return stored
    empty_folder(out)
    started = time.monotonic()
    talker_audio = [talking(FAMILIES[name], np.random.default_rng(case_seed(seed, f"talker:{name}")))
                    for name in talkers]
    asks = {name: FAMILIES[name].say(ASK, np.random.default_rng(case_seed(seed, f"{name}:ask")))
            for name in users if FAMILIES[name].texts is None}
    beds = sorted(BACKGROUNDS)
    cases: list[Case] = []

    def add(name: str, audio: Audio, *, family: str, category: str, text: str | None, index: int) -> None:
        expect: Expect = "cut" if category in ("command", "query") else "resume"
        for condition in conditions_for(category, split, index):
            case_id = f"{family}-{name}-{condition}"
            rng = np.random.default_rng(case_seed(seed, case_id))
            snr = TALKER_BED_SNR_DB if condition != "room" else ROOM_SNRS[int(rng.integers(len(ROOM_SNRS)))]
            bed = beds[int(rng.integers(len(beds)))]
            talker = talker_audio[int(rng.integers(len(talker_audio)))] if talker_audio else None
            mixed, start, end, level = place(audio, rng, condition=condition, talker=talker, snr_db=snr, bed=bed)
            # the user's own request before it, in the same voice, level, room and channel (while the
            # background talker is still silent): the reply it starts is the one the sound lands on, and
            # the session has heard how loud the user is
            ask_rng = np.random.default_rng(case_seed(seed, f"{case_id}:ask"))
            asked, *_ = place(asks[family if family in asks else users[0]], ask_rng, condition="room",
                              talker=None, snr_db=snr, bed=bed, level_db=level)
            channel = "audio/pcm"
            if condition == "phone":
                channel = ("audio/pcmu", "audio/pcma")[int(rng.integers(2))]
                mixed, asked = telephone(mixed, channel), telephone(asked, channel)
            rate = PHONE_RATE if condition == "phone" else RATE
            write_wav(out / f"{case_id}.wav", mixed, rate=rate)
            write_wav(out / f"{case_id}-ask.wav", asked, rate=rate)
            cases.append(Case(case_id, "timeline", "query" if expect == "cut" else category,  # type: ignore[arg-type]
                              expect, family, snr, "hiss" if snr is None else bed, text, round(start, 3),
                              round(end, 3), round(len(mixed) / (PHONE_RATE if condition == "phone" else RATE), 3),
                              f"{case_id}.wav", family, category, condition, channel, f"{case_id}-ask.wav"))

    for family_name in users:
        family = FAMILIES[family_name]
        for category, texts in texts_for(family).items():
            for index, text in enumerate(texts):
                audio = family.say(text, np.random.default_rng(case_seed(seed, f"{family_name}:{text}")))
                add(f"{category}{index:02d}", audio, family=family_name, category=category, text=text, index=index)
        if verbose:
            print(f"  {family_name}: {time.monotonic() - started:.0f} s", flush=True)
    for kind, make in NOISES.items():
        for variant in NOISE_VARIANTS[split]:
            rng = np.random.default_rng(case_seed(seed, f"noise:{kind}{variant}"))
            sound = make(rng, float(rng.uniform(0.6, 2.0)))
            add(f"{kind}{variant}", sound, family="noise", category="noise", text=None, index=variant)
    manifest.write_text(json.dumps({"key": key, "cases": [asdict(c) for c in cases]}, indent=1))
    return cases


def main() -> None:
    """Command line: build a split's set and print what it holds."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", choices=("held_out", "train"), default="held_out")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    started = time.monotonic()
    cases = build(args.split, seed=args.seed, out=args.out, verbose=True)
    counts: dict[str, int] = {}
    for case in cases:
        counts[f"{case.category}/{case.condition}"] = counts.get(f"{case.category}/{case.condition}", 0) + 1
    print(f"{len(cases)} cases ({args.split}) in {time.monotonic() - started:.0f} s: {counts}")


if __name__ == "__main__":
    main()
