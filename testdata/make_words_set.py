"""Issue 43's sets: words that take the turn over a reply, and pauses after words that lead on.

    python -m testdata.make_words_set [--split issue43|train|fresh|third|fourth|fifth] [--part reply|pauses|both]
                                      [--out DIR]

The texts, voices and seeds of each split are in :mod:`testdata.words_splits`: ``issue43`` (the first held-out set,
described here), ``train`` (training families, studied), ``fresh`` (the second held-out set), ``third``, ``fourth``
and ``fifth`` (the third, fourth and fifth: the fifth in Piper's joe voice, :mod:`testdata.piper_voice`); each
held-out set reported once.

New sentences written for this set only (none is in any set the listening policy or the endpoint tiers were
fitted or shaped on: ``tests/bench/test_words_set.py`` checks), rendered by voices no fitting used:

* ``flite-slt``, ``festival-ked``, ``festival-slt-hts``: the held-out families of ``testdata/listening_split.json``
  (never fitted on; flite slt is also the endpoint set's held-out voice);
* ``espeak-classic``: Debian's ``espeak`` 1.48 (the original eSpeak, not eSpeak NG, which the fitting used), in its
  Scottish, northern English and West Midlands voices with drawn variant, rate and pitch.

Two parts, both deterministic from :data:`SEED`:

* **over a reply** (``over_reply/``, the family set's timeline cases, for ``bench/quality/turn_words.py``): a
  follow-up question, a one-word question, a correction (all must cut the reply) or a backchannel (must let it go
  on) landing 2 s into a live reply, after the user's own "Tell me a story.", each in one condition in turn: a room
  (clean, 20, 10 or 5 dB), a background talker 10 dB down, or that mix over a telephone line;
* **mid-sentence pauses** (``pauses/``, the endpoint set's clips): each sentence said whole, and with a pause of
  600 to 900 ms after a word that leads on ("I need a table for ... four people tonight"), at 16 kHz.

Nothing generated goes into git (``~/.cache/bargein/words-set``). Do not fit or tune on it: it is reported once.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np

from bargein.audio.resample import resample
from testdata.endpoint_clips import LEAD_S as CLIP_LEAD_S
from testdata.endpoint_clips import RATE as CLIP_RATE
from testdata.endpoint_clips import Clip, loud_bounds, place, write_clip
from testdata.endpoint_set import comma_pause
from testdata.make_family_set import ASK, PHONE_RATE, ROOM_SNRS, TALKER_BED_SNR_DB, talking, telephone
from testdata.make_family_set import place as place_over_reply
from testdata.make_listening_set import Case, case_seed, write_wav
from testdata.noise_sources import BACKGROUNDS, RATE, Audio
from testdata.piper_voice import joe
from testdata.voices import FAMILIES, Family, _run, _wav_to_24k, espeak
from testdata.words_splits import ISSUE_43, SPLITS, WordsSplit

SEED = ISSUE_43.seed
VERSION = 1
CACHE = Path("~/.cache/bargein/words-set").expanduser()

FOLLOW_UPS = ISSUE_43.over_reply["followup"]
"""Follow-up questions that lean on the reply, led by a conjunction or a preposition: must cut it."""
ONE_WORD = ISSUE_43.over_reply["oneword"]
"""One-word questions (none of the fitted sets' "Why?", "What?", "Sorry?"): must cut the reply."""
CORRECTIONS = ISSUE_43.over_reply["correction"]
"""Bare corrections (not the fitted sets' "No."): must cut the reply."""
BACKCHANNELS = ISSUE_43.over_reply["backchannel"]
"""Acknowledgements (none of the fitted sets' single "Uh-huh.", "Okay." ...): must let the reply go on."""
OVER_REPLY = ISSUE_43.over_reply
PAUSED = ISSUE_43.paused
"""Sentences with a hesitation (``|``) right after a word that leads on."""
PAUSES_MS = (600, 700, 800, 900)
VOICES = ISSUE_43.voices
TALKERS = ISSUE_43.talkers
"""The background talkers of the held-out families (training voices, as there: the talker is not the user)."""


def classic(text: str, rng: np.random.Generator) -> Audio:
    """Debian's ``espeak`` 1.48 in a drawn accent and variant (none of them the fitting's), rate and pitch."""
    accent = ("en-sc", "en-uk-north", "en-uk-wmids")[int(rng.integers(3))]
    variant = ("f5", "m4", "m5", "m7")[int(rng.integers(4))]
    command = ["espeak", "-v", f"{accent}+{variant}", "-s", str(int(rng.integers(140, 186))),
               "-p", str(int(rng.integers(30, 71))), "-w", "{out}", text]
    return _wav_to_24k(_run(command))


def classic_new(text: str, rng: np.random.Generator) -> Audio:
    """Debian's ``espeak`` 1.48 in accents and variants no other set used (the fresh held-out set's): American, RP
    and West Indian English, variants f1, f2, m2, m3."""
    accent = ("en-us", "en-uk-rp", "en-wi")[int(rng.integers(3))]
    variant = ("f1", "f2", "m2", "m3")[int(rng.integers(4))]
    command = ["espeak", "-v", f"{accent}+{variant}", "-s", str(int(rng.integers(140, 186))),
               "-p", str(int(rng.integers(30, 71))), "-w", "{out}", text]
    return _wav_to_24k(_run(command))


def classic_plain(text: str, rng: np.random.Generator) -> Audio:
    """Debian's ``espeak`` 1.48 in its plain English voices (the third held-out set's), variants no set drew."""
    accent = ("en", "en-gb")[int(rng.integers(2))]
    variant = ("f3", "f4", "m1", "m6")[int(rng.integers(4))]
    command = ["espeak", "-v", f"{accent}+{variant}", "-s", str(int(rng.integers(140, 186))),
               "-p", str(int(rng.integers(30, 71))), "-w", "{out}", text]
    return _wav_to_24k(_run(command))


NEW_NG_VARIANTS = ("m4", "m5", "m7", "f5", "klatt3", "klatt4")
"""eSpeak NG variants its training families (``espeak-us``, ``espeak-gb``) never drew."""
CLASSIC = Family("espeak-classic", "espeak-1.48", False, classic)
CLASSIC_NEW = Family("espeak-classic-new", "espeak-1.48", False, classic_new)
THIRD_FAMILIES = (Family("espeak-ng-nyc", "espeak-ng", False, espeak("en-us-nyc", NEW_NG_VARIANTS)),
                  Family("espeak-ng-lancaster", "espeak-ng", False, espeak("en-gb-x-gbclan", NEW_NG_VARIANTS)),
                  Family("espeak-ng-caribbean", "espeak-ng", False, espeak("en-029", NEW_NG_VARIANTS)),
                  Family("espeak-classic-plain", "espeak-1.48", False, classic_plain))
"""The third held-out set's voices: eSpeak NG in accents no set used, and eSpeak 1.48's plain English voices."""
NAMED_NG_VARIANTS = ("Andy", "Annie", "Steph", "Michael", "Linda", "Robert")
"""eSpeak NG's named variants, which no set drew."""


def classic_klatt(accent: str) -> Callable[[str, np.random.Generator], Audio]:
    """Debian's ``espeak`` 1.48 in ``accent`` with its Klatt variants (the fourth held-out set's; no set drew them)."""
    def say(text: str, rng: np.random.Generator) -> Audio:
        variant = ("klatt", "klatt2", "klatt3", "klatt4")[int(rng.integers(4))]
        command = ["espeak", "-v", f"{accent}+{variant}", "-s", str(int(rng.integers(140, 186))),
                   "-p", str(int(rng.integers(30, 71))), "-w", "{out}", text]
        return _wav_to_24k(_run(command))
    return say


FOURTH_FAMILIES = (Family("espeak-ng-scotland", "espeak-ng", False, espeak("en-gb-scotland", NAMED_NG_VARIANTS)),
                   Family("espeak-ng-wmids", "espeak-ng", False, espeak("en-gb-x-gbcwmd", NAMED_NG_VARIANTS)),
                   Family("espeak-classic-klatt-us", "espeak-1.48", False, classic_klatt("en-us")),
                   Family("espeak-classic-klatt-rp", "espeak-1.48", False, classic_klatt("en-uk-rp")))
"""The fourth held-out set's voices: eSpeak NG in accents and named variants no set used, eSpeak 1.48's Klatt ones."""


FIFTH_FAMILIES = (Family("piper-joe", "piper", False, joe()),)
"""The fifth held-out set's voice: Piper's neural en_US joe voice (a synthesiser and a speaker no set used)."""


def voice(name: str) -> Family:
    """A family of these sets by name."""
    ours = {f.name: f for f in (CLASSIC, CLASSIC_NEW, *THIRD_FAMILIES, *FOURTH_FAMILIES, *FIFTH_FAMILIES)}
    return ours.get(name) or FAMILIES[name]


def _key(split: WordsSplit, seed: int, voices: tuple[str, ...], limit: int | None) -> dict[str, object]:
    """What a stored part was made with (the first set's key as it was, so its cache stays valid)."""
    key: dict[str, object] = {"version": VERSION, "seed": seed, "voices": list(voices), "limit": limit}
    if split is not ISSUE_43:
        key["split"] = split.name
    return key


def _fresh(out: Path, key: dict[str, object]) -> list[dict[str, object]] | None:
    """The stored manifest's entries when it was made with ``key`` and its files are there."""
    manifest = out / "manifest.json"
    if not manifest.is_file():
        return None
    stored = json.loads(manifest.read_text())
    if stored.get("key") != key or not all((out / str(e["file"])).is_file() for e in stored["entries"]):
        return None
    return list(stored["entries"])


def _store(out: Path, key: dict[str, object], entries: list[dict[str, object]]) -> None:
    (out / "manifest.json").write_text(json.dumps({"key": key, "entries": entries}, indent=1))


def build_over_reply(out: Path | None = None, *, split: WordsSplit = ISSUE_43, voices: tuple[str, ...] | None = None,
                     seed: int | None = None, limit: int | None = None) -> list[Case]:
    """Write (or reuse) a split's over-reply cases; ``limit``: the first texts of each category only (tests)."""
    out = out or CACHE / split.folder / "over_reply"
    voices, seed = voices or split.voices, split.seed if seed is None else seed
    key = _key(split, seed, voices, limit)
    if (stored := _fresh(out, key)) is not None:
        return [Case(**e) for e in stored]  # type: ignore[arg-type]
    out.mkdir(parents=True, exist_ok=True)
    talkers = [talking(FAMILIES[n], np.random.default_rng(case_seed(seed, f"talker:{n}"))) for n in split.talkers]
    beds = sorted(BACKGROUNDS)
    cases: list[Case] = []
    for family in voices:
        say = voice(family).say
        ask = say(ASK, np.random.default_rng(case_seed(seed, f"{family}:ask")))
        for category, texts in split.over_reply.items():
            for index, text in enumerate(texts[:limit]):
                audio = say(text, np.random.default_rng(case_seed(seed, f"{family}:{text}")))
                condition = ("room", "talker", "phone")[(index + split.voices.index(family)) % 3]
                cases.append(_over_reply_case(out, f"{family}-{category}{index:02d}-{condition}", audio, ask,
                                              family=family, category=category, text=text, condition=condition,
                                              talkers=talkers, beds=beds, seed=seed))
    _store(out, key, [asdict(c) for c in cases])
    return cases


def _over_reply_case(out: Path, case_id: str, audio: Audio, ask: Audio, *, family: str, category: str, text: str,
                     condition: str, talkers: list[Audio], beds: list[str], seed: int) -> Case:
    """One timeline, as the family set makes them: the sound over a live reply, after the user's own request."""
    rng = np.random.default_rng(case_seed(seed, case_id))
    snr = TALKER_BED_SNR_DB if condition != "room" else ROOM_SNRS[int(rng.integers(len(ROOM_SNRS)))]
    bed = beds[int(rng.integers(len(beds)))]
    talker = talkers[int(rng.integers(len(talkers)))]
    mixed, start, end, level = place_over_reply(audio, rng, condition=condition, talker=talker, snr_db=snr, bed=bed)
    asked, *_ = place_over_reply(ask, np.random.default_rng(case_seed(seed, f"{case_id}:ask")), condition="room",
                                 talker=None, snr_db=snr, bed=bed, level_db=level)
    channel, rate = "audio/pcm", RATE
    if condition == "phone":
        channel, rate = ("audio/pcmu", "audio/pcma")[int(rng.integers(2))], PHONE_RATE
        mixed, asked = telephone(mixed, channel), telephone(asked, channel)
    write_wav(out / f"{case_id}.wav", mixed, rate=rate)
    write_wav(out / f"{case_id}-ask.wav", asked, rate=rate)
    expect = "resume" if category == "backchannel" else "cut"
    return Case(case_id, "timeline", "query" if expect == "cut" else "backchannel", expect, family, snr,
                "hiss" if snr is None else bed, text, round(start, 3), round(end, 3), round(len(mixed) / rate, 3),
                f"{case_id}.wav", family, category, condition, channel, f"{case_id}-ask.wav")


def build_pauses(out: Path | None = None, *, split: WordsSplit = ISSUE_43, voices: tuple[str, ...] | None = None,
                 seed: int | None = None, limit: int | None = None) -> list[Clip]:
    """Write (or reuse) a split's endpoint clips: every sentence whole and paused, in every voice."""
    out = out or CACHE / split.folder / "pauses"
    voices, seed = voices or split.voices, split.seed if seed is None else seed
    key = _key(split, seed, voices, limit)
    if (stored := _fresh(out, key)) is not None:
        return [Clip(**e) for e in stored]  # type: ignore[arg-type]
    out.mkdir(parents=True, exist_ok=True)
    clips: list[Clip] = []
    for family in voices:
        for number, sentence in enumerate(split.paused[:limit]):
            clips += _sentence_clips(out, family, number, sentence, seed)
    _store(out, key, [asdict(c) for c in clips])
    return clips


def _spoken(family: str, text: str, rng: np.random.Generator) -> Audio:
    """``text`` in ``family`` at the endpoint set's 16 kHz, its silence trimmed."""
    audio = resample(voice(family).say(text, rng), RATE, CLIP_RATE)
    start, end = loud_bounds(audio)
    return audio[start:end]


def _sentence_clips(out: Path, family: str, number: int, sentence: str, seed: int) -> list[Clip]:
    """The sentence whole, and with the pause (as the endpoint set makes it: the hesitation written as a comma,
    so the voice is level there, and the voice's own pause at the comma lengthened to the drawn one)."""
    first, second = (part.strip() for part in sentence.split("|"))
    rng = np.random.default_rng(case_seed(seed, f"pause:{family}:{number}"))
    draw = int(rng.integers(1 << 30))
    slug = f"{family}-{number:02d}"
    whole = _spoken(family, f"{first} {second}", np.random.default_rng(draw))
    clips = [write_clip(out, Clip(f"{slug}-complete", family, family, number, f"{first} {second}",  # type: ignore[arg-type]
                                  "complete", 0, 0.0, CLIP_LEAD_S + len(whole) / CLIP_RATE, f"{slug}-complete.wav"),
                        place(whole, rng))]
    hesitant = _spoken(family, f"{first}, {second}", np.random.default_rng(draw))
    pause = comma_pause(hesitant, near=len(first) / (len(first) + len(second) + 2))
    if pause is None:
        return clips
    pause_ms = PAUSES_MS[int(rng.integers(len(PAUSES_MS)))]
    speech = np.concatenate([hesitant[:pause[0]], np.zeros(int(pause_ms * CLIP_RATE / 1000), np.float32),
                             hesitant[pause[1]:]])
    clips.append(write_clip(out, Clip(f"{slug}-paused", family, family, number,  # type: ignore[arg-type]
                                      f"{first}... {second}", "paused", pause_ms, CLIP_LEAD_S + pause[0] / CLIP_RATE,
                                      CLIP_LEAD_S + len(speech) / CLIP_RATE, f"{slug}-paused.wav"), place(speech, rng)))
    return clips


def main() -> None:
    """Command line: build both parts and say what they hold."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=CACHE)
    parser.add_argument("--split", choices=sorted(SPLITS), default=ISSUE_43.name,
                        help="which set: issue43 (the first held-out set), train, fresh (the second held-out set), "
                        "third, fourth, fifth (the third, fourth and fifth)")
    parser.add_argument("--part", choices=("reply", "pauses", "both"), default="both")
    args = parser.parse_args()
    started = time.monotonic()
    split = SPLITS[args.split]
    folder = args.out / split.folder
    cases = build_over_reply(folder / "over_reply", split=split) if args.part != "pauses" else []
    clips = build_pauses(folder / "pauses", split=split) if args.part != "reply" else []
    paused = sum(c.kind == "paused" for c in clips)
    print(f"{split.name}: {len(cases)} cases over a reply, {len(clips)} endpoint clips ({paused} paused) in "
          f"{time.monotonic() - started:.0f} s ({folder})")


if __name__ == "__main__":
    main()
