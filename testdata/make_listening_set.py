"""Generate the labelled listening set: queries and noise, mixed over backgrounds, alone and over a reply.

    python -m testdata.make_listening_set [--out DIR] [--quick]

Nothing generated goes into git: audio and ``manifest.json`` are written to ``DIR`` (default
``~/.cache/bargein/listening-set``), as 24 kHz mono pcm16 WAV files, the Realtime wire rate.

* **queries**: questions and commands spoken by the project's TTS (Kokoro, bundled voice, three
  speaking rates), a few of them one word long, some in two parts with a pause in the middle shorter
  than the endpoint silence (a turn that goes on, which tempts speculation), and the five LibriVox
  clips of Debian's ``pocketsphinx-testdata``;
* **noise**: white and pink noise, keyboard-like click trains, cough-like bursts, beeps, music-like
  chords; **vocal** sounds in the TTS voice (a laugh, a throat clearing, a sneeze, a hum, a groan, a
  sigh), which the VAD takes for speech; and **backchannels** ("uh-huh", "mm-hmm", "yeah", "okay");
* every sound is mixed over a background bed (pink, white or a humming room) at a signal-to-noise
  ratio from :data:`SNRS` (``None``: clean, a -75 dBFS hiss), the sound's active level near -26 dBFS;
* **segments** are one sound alone (3 s of background, the sound, 1.2 s of background): a query
  must get a reply, noise and vocal sounds must not; a backchannel alone is ``either`` (it may
  answer a question the agent asked);
* **timelines** are sounds that land while the agent is speaking (3 s of background into the reply,
  the sound, then 1.5 s): noise, vocal sounds and backchannels must let the reply go on
  (``resume``), a query must ``cut`` it.

Deterministic: every case has its own seed, derived from the set's seed and the case name, and the
TTS is deterministic on CPU. The labels, the words of each query and the true start and end of each
sound (by frame energy on the clean sound) are in the manifest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import wave
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from testdata.noise_sources import BACKGROUNDS, NOISES, RATE, Audio, active_bounds, active_level_db

VERSION = 3
DEFAULT_DIR = Path("~/.cache/bargein/listening-set").expanduser()
LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
SNRS: tuple[float | None, ...] = (None, 20.0, 10.0, 5.0)
LEAD_S = 3.0
"""Background before each sound: a session has been listening a while (its noise floor has settled)."""
SEGMENT_TAIL_S = 1.2
TIMELINE_TAIL_S = 1.5
TARGET_LEVEL_DB = -26.0
CLEAN_HISS_DB = -75.0

QUERIES = (
    "What time is it in Tokyo right now?",
    "Set a timer for ten minutes.",
    "How do I boil an egg?",
    "Can you tell me a joke?",
    "What's the weather going to be like tomorrow?",
    "Turn off the lights in the kitchen.",
    "Who wrote Pride and Prejudice?",
    "Remind me to call my mother at six.",
    "How far is the moon from the earth?",
    "Play some relaxing music.",
    "What is the capital of Australia?",
    "Translate good morning into Spanish.",
    "How many ounces are in a pound?",
    "Add milk and eggs to my shopping list.",
    "Why is the sky blue?",
    "Stop.",
    "Wait, go back to the second step.",
    "Could you speak a little slower please?",
    "What's twelve times fifteen?",
    "Book a table for two at eight tonight.",
    "Tell me more about that.",
    "Which planet is the largest?",
    "Skip this song.",
    "What should I cook for dinner tonight?",
    "Next.",
    "Pause.",
    "Why?",
    "Louder.",
    "Go on.",
    "Repeat that.",
)
SPLIT_QUERIES = (
    ("Can you check my calendar for tomorrow", "and tell me when the first meeting starts?"),
    ("I was wondering", "how long it takes to fly to Paris."),
    ("Send a message to Anna", "saying I will be ten minutes late."),
    ("What is the difference", "between a virus and a bacterium?"),
    ("Find me a recipe", "that uses chicken and rice."),
    ("So the thing is", "my laptop will not turn on anymore."),
)
BACKCHANNELS = ("Uh-huh.", "Mm-hmm.", "Yeah.", "Okay.")
VOCALS = ("Ha ha ha!", "Ahem.", "Achoo!", "Hmm.", "Ugh.", "Phew.")
"""Non-speech vocal sounds (a laugh, a throat clearing, a sneeze, a hum, a groan, a sigh) in the TTS voice."""
SPEEDS = (1.0, 0.9, 1.12)

Label = Literal["query", "noise", "vocal", "backchannel"]
Expect = Literal["reply", "no_reply", "either", "resume", "cut"]


@dataclass(frozen=True)
class Case:
    """One labelled recording; ``file`` is relative to the set's folder."""

    id: str
    kind: Literal["segment", "timeline"]
    label: Label
    expect: Expect
    source: str
    snr_db: float | None
    background: str
    text: str | None
    event_start_s: float
    event_end_s: float
    duration_s: float
    file: str
    family: str = "kokoro-heart"
    """The voice family (``testdata/voices.py``); ``noise`` for sounds no voice made."""
    category: str = ""
    """command, query, backchannel, vocal or noise (the family set); empty in this set."""
    condition: str = ""
    """room (a bed at ``snr_db``), talker (another voice 10 dB down) or phone (talker through G.711)."""
    channel: str = "audio/pcm"
    """The wire format the case is streamed in: ``audio/pcm`` (24 kHz) or G.711 ``audio/pcmu``/``audio/pcma``."""
    ask: str | None = None
    """A turn the user spoke first (same voice, level, room and channel) that starts the reply, if any."""


@dataclass(frozen=True)
class Sound:
    """A clean sound before mixing: audio at 24 kHz, what it is, and its words if it is speech."""

    name: str
    source: str
    label: Label
    audio: Audio
    text: str | None = None


def case_seed(seed: int, name: str) -> int:
    """A stable per-case seed (Python's ``hash`` is salted per process, so sha256 instead)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little")


def mix(sound: Audio, background: str, snr_db: float | None, rng: np.random.Generator, *,
        lead_s: float, tail_s: float) -> tuple[Audio, float, float]:
    """``sound`` at a random level near -26 dBFS, placed after ``lead_s`` of background, ``snr_db`` above it.

    Returns the mix and the sound's true start and end (s) in it.
    """
    fg, out, _, start, end = scaled_over_bed(sound, background, snr_db, rng, lead_s=lead_s, tail_s=tail_s)
    lead = round(lead_s * RATE)
    out[lead:lead + len(fg)] += fg
    peak = float(np.max(np.abs(out)))
    if peak > 0.95:  # a loud mix is scaled whole, so its SNR stays what the label says
        out *= 0.95 / peak
    return out.astype(np.float32), lead_s + start, lead_s + end


MixParts = tuple[Audio, "np.ndarray[Any, np.dtype[np.float64]]", float, float, float]


def scaled_over_bed(sound: Audio, background: str, snr_db: float | None, rng: np.random.Generator, *,
                    lead_s: float, tail_s: float, level_db: float | None = None) -> MixParts:
    """The sound at a drawn level near -26 dBFS, and a bed ``snr_db`` under it (a faint hiss when ``None``)
    as long as ``lead_s`` + the sound + ``tail_s``: (sound, bed, level dBFS, true start s, true end s).
    ``level_db`` sets the level instead (the draw is made all the same, so the rest of the mix stays put)."""
    level = TARGET_LEVEL_DB + rng.uniform(-4.0, 4.0)
    level = level if level_db is None else level_db
    fg = sound * 10 ** ((level - active_level_db(sound)) / 20)
    start, end = active_bounds(sound)
    total = round(lead_s * RATE) + len(fg) + round(tail_s * RATE)
    if snr_db is None:
        bed = rng.standard_normal(total) * 10 ** (CLEAN_HISS_DB / 20)
    else:
        bed = BACKGROUNDS[background](rng, total / RATE)[:total].astype(np.float64)
        bed = bed * 10 ** ((level - snr_db - 20 * np.log10(np.std(bed) + 1e-12)) / 20)
    return fg, bed.astype(np.float64), float(level), start, end


class Voice:
    """The project's TTS (Kokoro), speaking whole utterances at a chosen rate, at 24 kHz, reproducibly.

    Kokoro's vocoder adds a random noise component; the synthesizer keeps one generator per worker
    thread, so with its single worker, seeding that generator before each utterance makes the
    utterance the same on every run.
    """

    def __init__(self, seed: int = 7) -> None:
        from bargein.engines.speak.kokoro_tts import load_kokoro

        self.tts = load_kokoro(workers=1)
        self.seed = seed

    def _seed_worker(self, seed: int) -> None:
        def install() -> None:
            self.tts._local.rng = np.random.default_rng(seed)

        self.tts._pool.submit(install).result()

    def say(self, text: str, speed: float = 1.0) -> Audio:
        """``text`` spoken at ``speed``; blocking."""
        import asyncio

        from bargein.values import CancelToken

        async def render() -> Audio:
            self.tts.speed = speed
            self._seed_worker(case_seed(self.seed, f"{text}@{speed}"))
            chunks = [chunk async for chunk in self.tts.synthesize(text, voice=None, cancel=CancelToken())]
            return np.concatenate([c.audio for c in chunks]).astype(np.float32)

        return asyncio.run(render())


def librivox() -> list[tuple[str, Audio, str]]:
    """The five LibriVox clips at 24 kHz with their reference words."""
    from bargein.audio.resample import resample

    references = {}
    for line in (LIBRIVOX / "transcription").read_text().splitlines():
        words, _, name = line.rpartition("(")
        references[name.strip(") ")] = words.replace("<s>", "").replace("</s>", "").strip()
    clips = []
    for path in sorted(LIBRIVOX.glob("*.wav")):
        with wave.open(str(path)) as handle:
            rate = handle.getframerate()
            samples = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
        audio = resample(samples.astype(np.float32) / 32768.0, rate, RATE)
        clips.append((path.stem.rsplit("-", 1)[-1], audio, references.get(path.stem, "")))
    return clips


def speech_sounds(voice: Voice, *, quick: bool) -> list[Sound]:
    """The queries: TTS questions and commands (some in two parts) and the LibriVox clips."""
    sounds = []
    singles = QUERIES[::3] if quick else QUERIES
    for index, text in enumerate(singles):
        sounds.append(Sound(f"tts{index:02d}", "tts", "query", voice.say(text, SPEEDS[index % 3]), text))
    splits = SPLIT_QUERIES[::2] if quick else SPLIT_QUERIES
    for index, (first, second) in enumerate(splits):
        gap = np.zeros(round(RATE * (0.25 + 0.05 * (index % 4))), np.float32)  # a pause shorter than the endpoint
        audio = np.concatenate([trimmed(voice.say(first)), gap, trimmed(voice.say(second))])
        sounds.append(Sound(f"split{index}", "tts-split", "query", audio, f"{first} {second}"))
    for name, audio, words in librivox()[: 2 if quick else 5]:
        sounds.append(Sound(f"libri{name}", "librivox", "query", audio, words))
    return sounds


def trimmed(audio: Audio) -> Audio:
    """Speech without its leading and trailing silence (so a pause put between two parts is the pause)."""
    start, end = active_bounds(audio)
    return audio[round(start * RATE):round(end * RATE)]


def noise_sounds(voice: Voice, seed: int, *, quick: bool) -> list[Sound]:
    """The non-speech events (two variants of each, one when quick) and the TTS backchannels."""
    sounds = []
    for kind, make in NOISES.items():
        for variant in range(1 if quick else 2):
            rng = np.random.default_rng(case_seed(seed, f"{kind}{variant}"))
            seconds = float(rng.uniform(0.6, 2.0))
            sounds.append(Sound(f"{kind}{variant}", kind, "noise", make(rng, seconds)))
    for text in VOCALS[::2] if quick else VOCALS:
        sounds.append(Sound(_slug(text), "vocal", "vocal", voice.say(text), text))
    for text in BACKCHANNELS:
        sounds.append(Sound(_slug(text), "backchannel", "backchannel", voice.say(text), text))
    return sounds


def _slug(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalpha())


def build(out: Path, *, seed: int = 7, quick: bool = False) -> list[Case]:
    """Write the set to ``out`` (reusing it when the manifest says it is the same set) and return its cases."""
    manifest = out / "manifest.json"
    key = {"version": VERSION, "seed": seed, "quick": quick}
    if manifest.is_file():
        stored = json.loads(manifest.read_text())
        if stored.get("key") == key and all((out / c["file"]).is_file() for c in stored["cases"]):
            return [Case(**c) for c in stored["cases"]]
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("seg-*.wav"), *out.glob("tim-*.wav")]:  # an older set's files
        stale.unlink()
    voice = Voice(seed)
    speech = speech_sounds(voice, quick=quick)
    noise = noise_sounds(voice, seed, quick=quick)
    backgrounds = sorted(BACKGROUNDS)
    cases: list[Case] = []

    def add(sound: Sound, kind: Literal["segment", "timeline"], expect: Expect, snr: float | None,
            index: int) -> None:
        name = f"{kind[:3]}-{sound.name}-{'clean' if snr is None else f'{snr:.0f}db'}"
        rng = np.random.default_rng(case_seed(seed, name))
        background = backgrounds[index % len(backgrounds)]
        tail = SEGMENT_TAIL_S if kind == "segment" else TIMELINE_TAIL_S
        audio, start, end = mix(sound.audio, background, snr, rng, lead_s=LEAD_S, tail_s=tail)
        write_wav(out / f"{name}.wav", audio)
        cases.append(Case(name, kind, sound.label, expect, sound.source, snr,
                          "hiss" if snr is None else background, sound.text, round(start, 3), round(end, 3),
                          round(len(audio) / RATE, 3), f"{name}.wav"))

    snrs = SNRS[:2] if quick else SNRS
    for index, sound in enumerate(speech):
        for snr in snrs:
            add(sound, "segment", "reply", snr, index)
    for index, sound in enumerate(noise):
        for snr in snrs:
            add(sound, "segment", "either" if sound.label == "backchannel" else "no_reply", snr, index)
    timeline_snrs = snrs[:3]
    for index, sound in enumerate(noise):
        for snr in timeline_snrs:
            add(sound, "timeline", "resume", snr, index)
    step = 2 if quick else 3
    by_source = {source: [s for s in speech if s.source == source] for source in ("tts", "tts-split", "librivox")}
    interrupting = by_source["tts"][::step] + by_source["tts-split"][:1] + by_source["librivox"][::step]
    for index, sound in enumerate(interrupting):
        for snr in (None, 10.0):
            add(sound, "timeline", "cut", snr, index)
    manifest.write_text(json.dumps({"key": key, "rate": RATE, "cases": [asdict(c) for c in cases]}, indent=1))
    return cases


def write_wav(path: Path, audio: Audio, *, rate: int = RATE) -> None:
    """Mono pcm16 (24 kHz unless told)."""
    pcm = np.clip(np.round(audio * 32767.0), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(rate)
        handle.writeframes(pcm.tobytes())


def read_wav(path: Path) -> bytes:
    """The pcm16 bytes of a set file (already the wire format)."""
    with wave.open(str(path)) as handle:
        return bytes(handle.readframes(handle.getnframes()))


def summary(cases: list[Case]) -> dict[str, Any]:
    """Counts by kind and label, for the command line."""
    counts: dict[str, int] = {}
    for case in cases:
        key = f"{case.kind}/{case.label}"
        counts[key] = counts.get(key, 0) + 1
    return counts


def main() -> None:
    """Command line: build the set and print what it holds."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help=f"folder for the set (default {DEFAULT_DIR}, or DEFAULT_DIR-quick)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="a smaller subset")
    args = parser.parse_args()
    out = args.out or default_dir(quick=args.quick)
    cases = build(out, seed=args.seed, quick=args.quick)
    print(f"{len(cases)} cases in {out}: {summary(cases)}")


def default_dir(*, quick: bool) -> Path:
    """Where the full and the quick set live by default."""
    return DEFAULT_DIR.with_name(DEFAULT_DIR.name + "-quick") if quick else DEFAULT_DIR


if __name__ == "__main__":
    main()
