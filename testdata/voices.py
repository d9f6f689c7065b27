"""Voice families for the listening benchmark: synthesisers and recorded speech beyond Kokoro.

A *family* is one speaker of one engine (or one recorded speaker): the unit the training / held-out
split is made of, so that a classifier fitted on some families is measured on speakers and engines it
never saw. Every family turns a text into float32 audio at 24 kHz, deterministically: the speaking
rate and pitch of each utterance are drawn from a generator seeded by the caller.

* ``kokoro-heart``: the project's TTS (the ``hibari-tts`` package, bundled voice);
* ``espeak-*``: eSpeak NG (Debian ``espeak-ng``), formant synthesis, several accents and variants;
* ``flite-*``: Flite (Debian ``flite``), the kal, awb, rms and slt voices;
* ``festival-*``: Festival (Debian ``festival``, ``festvox-kallpc16k``, ``festvox-kdlpc16k``,
  ``festvox-us-slt-hts``): two diphone voices and one HTS (statistical) voice;
* ``asterisk-allison``: *recorded* human speech, the English prompts of Debian's
  ``asterisk-core-sounds-en-wav`` (one speaker, telephone-grade 8 kHz recordings): only the texts that
  exist as recordings (see :data:`RECORDED`);
* ``librivox``: *recorded* read speech, the five clips of Debian's ``pocketsphinx-testdata``.
"""

from __future__ import annotations

import functools
import io
import shutil
import subprocess
import tempfile
import wave
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from testdata.noise_sources import RATE, Audio

ASTERISK = Path("/usr/share/asterisk/sounds/en")
RECORDED: dict[str, str] = {
    # text -> recording in asterisk-core-sounds-en-wav (its core-sounds-en.txt gives the words)
    "Pause.": "dictate/pause.wav",
    "No.": "vm-no.wav",
    "Hello.": "hello.wav",
    "Goodbye!": "goodbye.wav",
    "One moment, please.": "one-moment-please.wav",
    "Please try again.": "please-try-again.wav",
    "Tomorrow.": "digits/tomorrow.wav",
    "Press 5 to repeat the current message.": "vm-repeat.wav",
    "Please hold while I try that extension.": "transfer.wav",
    "Please leave your message after the tone.": "vm-intro.wav",
    "All circuits are busy now.": "all-circuits-busy-now.wav",
    "To leave a message, please enter a mailbox number.": "vm-whichbox.wav",
    "Please enter your password followed by the pound key.": "agent-pass.wav",
}
"""What the recorded speaker says, by file (full queries and a few one-word interruptions)."""


def _wav_to_24k(data: bytes) -> Audio:
    """A mono pcm16 WAV (bytes) as float32 at 24 kHz."""
    from bargein.audio.resample import resample

    with wave.open(io.BytesIO(data)) as handle:
        rate, width, channels = handle.getframerate(), handle.getsampwidth(), handle.getnchannels()
        raw = handle.readframes(handle.getnframes())
    if width != 2:
        raise ValueError(f"expected pcm16, got {width * 8}-bit audio")
    samples = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    if channels > 1:
        samples = samples.reshape(-1, channels).mean(axis=1)
    return resample(samples, rate, RATE) if rate != RATE else samples


def _run(command: list[str], text: str | None = None) -> bytes:
    """Run a synthesiser that writes a WAV to the path in place of ``{out}`` (a pipe would get no length)."""
    if shutil.which(command[0]) is None:
        raise FileNotFoundError(f"{command[0]} is not installed (scripts/setup.sh test installs it)")
    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder) / "say.wav")
        subprocess.run([out if part == "{out}" else part for part in command],
                       input=text.encode() if text is not None else None, capture_output=True, check=True, timeout=60)
        return Path(out).read_bytes()


@dataclass(frozen=True)
class Family:
    """One speaker of one engine: ``say(text, rng)`` renders an utterance with a drawn rate and pitch."""

    name: str
    engine: str
    recorded: bool
    say: Callable[[str, np.random.Generator], Audio]
    texts: Callable[[], frozenset[str]] | None = None
    """For recorded speech, the only texts it has; ``None``: any text."""


def espeak(voice: str, variants: tuple[str, ...]) -> Callable[[str, np.random.Generator], Audio]:
    """eSpeak NG with a drawn variant (speaker), rate (words a minute) and pitch."""
    def say(text: str, rng: np.random.Generator) -> Audio:
        variant = variants[int(rng.integers(len(variants)))]
        command = ["espeak-ng", "-v", f"{voice}+{variant}", "-s", str(int(rng.integers(140, 196))),
                   "-p", str(int(rng.integers(30, 71))), "-w", "{out}", text]
        return _wav_to_24k(_run(command))
    return say


def flite(voice: str) -> Callable[[str, np.random.Generator], Audio]:
    """Flite with a drawn duration stretch and mean pitch shift."""
    def say(text: str, rng: np.random.Generator) -> Audio:
        stretch = float(rng.uniform(0.85, 1.2))
        command = ["flite", "-voice", voice, "--setf", f"duration_stretch={stretch:.2f}", "-t", text, "-o", "{out}"]
        return _wav_to_24k(_run(command))
    return say


def festival(voice: str) -> Callable[[str, np.random.Generator], Audio]:
    """Festival's ``text2wave`` with a drawn duration stretch."""
    def say(text: str, rng: np.random.Generator) -> Audio:
        stretch = float(rng.uniform(0.85, 1.2))
        command = ["text2wave", "-eval", f"({voice})", "-eval", f"(Parameter.set 'Duration_Stretch {stretch:.2f})",
                   "-o", "{out}"]
        return _wav_to_24k(_run(command, text))
    return say


def kokoro() -> Callable[[str, np.random.Generator], Audio]:
    """The project's TTS at a drawn speed (loaded on first use: it takes a few seconds)."""
    voice: list[object] = []

    def say(text: str, rng: np.random.Generator) -> Audio:
        from testdata.make_listening_set import Voice

        if not voice:
            voice.append(Voice())
        speaker = voice[0]
        assert isinstance(speaker, Voice)
        return speaker.say(text, float(rng.choice([0.9, 1.0, 1.12])))
    return say


def asterisk(text: str, rng: np.random.Generator) -> Audio:
    """The recorded prompt that says ``text``."""
    return asterisk_prompt(RECORDED[text])


def asterisk_prompt(name: str) -> Audio:
    """The Asterisk prompt recording ``name`` (a path under :data:`ASTERISK`) at 24 kHz."""
    return _wav_to_24k((ASTERISK / name).read_bytes())


LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")


@functools.cache
def librivox() -> dict[str, Audio]:
    """The five LibriVox clips of ``pocketsphinx-testdata`` at 24 kHz, by their reference words."""
    references = {}
    for line in (LIBRIVOX / "transcription").read_text().splitlines():
        words, _, name = line.rpartition("(")
        references[name.strip(") ")] = words.replace("<s>", "").replace("</s>", "").strip()
    return {references[path.stem]: _wav_to_24k(path.read_bytes()) for path in sorted(LIBRIVOX.glob("*.wav"))
            if path.stem in references}


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("kokoro-heart", "kokoro", False, kokoro()),
    Family("espeak-us", "espeak-ng", False, espeak("en-us", ("m1", "m3", "f2", "f4", "klatt2"))),
    Family("espeak-gb", "espeak-ng", False, espeak("en-gb-x-rp", ("m2", "m6", "f1", "f3", "klatt"))),
    Family("flite-kal", "flite", False, flite("kal16")),
    Family("flite-awb", "flite", False, flite("awb")),
    Family("flite-rms", "flite", False, flite("rms")),
    Family("festival-kal", "festival", False, festival("voice_kal_diphone")),
    Family("flite-slt", "flite", False, flite("slt")),
    Family("festival-ked", "festival", False, festival("voice_ked_diphone")),
    Family("festival-slt-hts", "festival", False, festival("voice_cmu_us_slt_arctic_hts")),
    Family("asterisk-allison", "recorded", True, asterisk, lambda: frozenset(RECORDED)),
    Family("librivox", "recorded", True, lambda text, rng: librivox()[text], lambda: frozenset(librivox())),
)}
"""Every family; which are fitted on and which are held out is in ``listening_split.json``."""
