"""Fallback speech from the ``flite`` program (Debian package ``flite``), resampled to 24 kHz.

Flite is small, fast and needs no weights from Python packages, so it keeps a server talking when the
Kokoro package is missing. It sounds robotic; it is the fallback, not the default. Each sentence is one
``flite`` process writing a WAV to its stdout; cancellation kills the running process.
"""

from __future__ import annotations

import asyncio
import io
import re
import shutil
import subprocess
import tempfile
import wave
import weakref
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import soxr

from bargein.engines.base import SpeechSynthesizer, TTSCapabilities
from bargein.engines.speak.subprocess_run import run_until_cancelled
from bargein.engines.stage_calls import serving_started, waiting_in_queue
from bargein.values import CancelToken, Float32Audio, SpeechChunk, WordTiming

SAMPLE_RATE = 24_000
_SENTENCE = re.compile(r"(?<=[.!?…])[\"')\]]*\s+(?=\S)")
_SILENCE = 10 ** (-40 / 20)  # -40 dBFS: below this, flite's output is its own padding

FLITE_VOICES: dict[str, tuple[str, ...]] = {
    # OpenAI Realtime voice names -> flite voices in order of preference (by gender).
    "alloy": ("slt",), "coral": ("slt",), "marin": ("slt",), "sage": ("slt",), "shimmer": ("slt",),
    "ash": ("rms", "awb"), "echo": ("rms", "awb"), "verse": ("awb", "rms"), "cedar": ("rms", "awb"),
    "ballad": ("awb", "rms"), "fable": ("awb", "rms"),
}


class FliteNotFound(RuntimeError):
    """The ``flite`` program is not installed; the message names the fix."""


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``, each spoken by one flite process (so the first is heard early)."""
    return [s.strip() for s in _SENTENCE.split(text.strip()) if s.strip()]


def decode_wav(data: bytes) -> tuple[Float32Audio, int]:
    """Mono 16-bit WAV bytes to float32 samples and their rate."""
    with wave.open(io.BytesIO(data), "rb") as wav:
        if wav.getsampwidth() != 2:
            raise ValueError(f"flite wrote {8 * wav.getsampwidth()}-bit audio; expected 16-bit")
        rate, channels = wav.getframerate(), wav.getnchannels()
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    audio = pcm.reshape(-1, channels).mean(axis=1) if channels > 1 else pcm
    return (audio.astype(np.float32) / 32768.0), rate


def proportional_words(text: str, audio: Float32Audio, sample_rate: int) -> tuple[WordTiming, ...]:
    """Words spread over the sounding part of ``audio`` in proportion to their characters."""
    words = text.split()
    loud = np.flatnonzero(np.abs(audio) > _SILENCE)
    if not words:
        return ()
    start = float(loud[0]) if len(loud) else 0.0
    end = float(loud[-1] + 1) if len(loud) else float(len(audio))
    total = sum(len(w) for w in words)
    timings = []
    done = 0
    for w in words:
        a = start + (end - start) * done / total
        done += len(w)
        b = start + (end - start) * done / total
        timings.append(WordTiming(w, a * 1000.0 / sample_rate, b * 1000.0 / sample_rate))
    return tuple(timings)


class FliteSynthesizer(SpeechSynthesizer):
    """:class:`~bargein.engines.base.SpeechSynthesizer` on the flite binary: 24 kHz mono, one chunk per
    sentence, word timings proportional to characters within each chunk (flite's own segment timings
    are not read back), leading silence trimmed to ``lead_ms``.

    At most ``max_processes`` flite processes run at once (per event loop), so a burst of sessions
    cannot fork without bound; the waiting ones queue, and say so to the caller's deadline
    (:func:`~bargein.engines.stage_calls.waiting_in_queue`, then
    :func:`~bargein.engines.stage_calls.serving_started` once a slot is theirs), so the wait for a slot is
    not taken for a flite that does not answer.
    """

    sample_rate = SAMPLE_RATE
    voice_spellings = tuple(FLITE_VOICES)
    """Names other than its voices' own that :meth:`resolve_voice` maps (told to a worker's clients)."""

    def __init__(self, *, binary: str = "flite", default_voice: str = "slt", max_processes: int = 2,
                 lead_ms: float = 100.0) -> None:
        path = shutil.which(binary)
        if path is None:
            raise FliteNotFound(f"{binary!r} is not on PATH; fix: apt-get install flite")
        self.binary = path
        listing = subprocess.run([path, "-lv"], capture_output=True, text=True, timeout=10, check=False)
        self.voices: tuple[str, ...] = tuple(listing.stdout.split(":", 1)[-1].split())
        if not self.voices:
            raise FliteNotFound(f"{path} -lv lists no voices; fix: apt-get install --reinstall flite")
        self.default_voice = default_voice if default_voice in self.voices else self.voices[0]
        self.max_processes = max_processes
        self.lead_samples = round(lead_ms * SAMPLE_RATE / 1000)
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary())

    @property
    def description(self) -> str:
        """One line for the start-up banner."""
        return f"flite ({self.binary}), voices {', '.join(self.voices)}, default {self.default_voice}"

    @property
    def capabilities(self) -> TTSCapabilities:
        """Its voices, the default an unknown name falls back to, and the other spellings it maps."""
        return TTSCapabilities(voices=tuple(self.voices), default_voice=self.default_voice,
                               voice_spellings=tuple(self.voice_spellings))

    def resolve_voice(self, voice: str | None) -> str:
        """A flite voice for a requested name (flite names and Realtime names); else the default."""
        key = (voice or "").strip().lower()
        if key in self.voices:
            return key
        return next((v for v in FLITE_VOICES.get(key, ()) if v in self.voices), self.default_voice)

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        """Speak ``text`` sentence by sentence; stop within one chunk of ``cancel``."""
        name = self.resolve_voice(voice)
        for sentence in split_sentences(text):
            if cancel.cancelled:
                return
            wav = await self._run(sentence, name, cancel, speed)
            if wav is None or cancel.cancelled:
                return
            audio, rate = decode_wav(wav)
            if rate != SAMPLE_RATE:
                audio = soxr.resample(audio, rate, SAMPLE_RATE, quality="HQ").astype(np.float32)
            # Resampling can overshoot by a hair near full scale.
            audio = np.clip(audio, -1.0, 1.0)
            # Flite pads about 250 ms of silence in front of every sentence: keep ``lead_ms`` of it, so
            # first audio comes early and sentences are not separated by long gaps.
            loud = np.flatnonzero(np.abs(audio) > _SILENCE)
            audio = audio[max(int(loud[0]) - self.lead_samples, 0) if len(loud) else 0:]
            yield SpeechChunk(audio=audio, sample_rate=SAMPLE_RATE,
                              words=proportional_words(sentence, audio, SAMPLE_RATE))

    async def _run(self, sentence: str, voice: str, cancel: CancelToken, speed: float = 1.0) -> bytes | None:
        """One flite process's WAV output, or None if cancelled first (the process is then killed)."""
        loop = asyncio.get_running_loop()
        slots = self._slots.setdefault(loop, asyncio.Semaphore(self.max_processes))
        if slots.locked():
            waiting_in_queue()
        async with slots:
            serving_started()
            if cancel.cancelled:
                return None
            # "-t" takes the next argument as the text even when it starts with a dash. The WAV goes to a
            # file, not /dev/stdout: under uvloop a child's stdout is a socket, which flite cannot open.
            with tempfile.TemporaryDirectory(prefix="bargein-flite-") as folder:
                wav = Path(folder) / "out.wav"
                return await run_until_cancelled(
                    [self.binary, "-voice", voice, "--setf", f"duration_stretch={1.0 / speed:.3f}",
                     "-t", sentence, "-o", str(wav)], cancel, name="flite", output=wav)
