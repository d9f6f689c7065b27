"""Real speech for tests: the LibriVox clips of Debian's pocketsphinx-testdata."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from bargein.audio.codecs import float_to_int16
from bargein.audio.resample import resample

LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")


def librivox_clip(number: str) -> npt.NDArray[np.float32]:
    """Clip ``sense_and_sensibility_01_austen_64kb-<number>.wav`` as float32 at 16 kHz (skips if absent)."""
    path = LIBRIVOX / f"sense_and_sensibility_01_austen_64kb-{number}.wav"
    if not path.is_file():
        pytest.fail(f"{path} is missing: install Debian's pocketsphinx-testdata (the test set-up does)")
    with wave.open(str(path)) as handle:
        rate = handle.getframerate()
        samples = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
    return resample(samples.astype(np.float32) / 32768.0, rate, 16_000)


def librivox_reference(number: str) -> str:
    """The reference transcript of a clip."""
    for line in (LIBRIVOX / "transcription").read_text().splitlines():
        if f"-{number})" in line:
            return line.split("<s>")[1].split("</s>")[0].strip()
    raise KeyError(number)


def pcm16_24k(audio16k: npt.NDArray[np.float32], *, silence_after_s: float = 0.0) -> bytes:
    """A 16 kHz clip as the wire format (pcm16 24 kHz), with trailing silence."""
    audio = resample(audio16k, 16_000, 24_000)
    audio = np.concatenate([audio, np.zeros(int(silence_after_s * 24_000), np.float32)])
    return float_to_int16(audio).tobytes()


def chunks_20ms(pcm: bytes) -> list[bytes]:
    """The stream cut into 20 ms appends (960 bytes at 24 kHz pcm16)."""
    step = 960
    return [pcm[i:i + step] for i in range(0, len(pcm), step)]
