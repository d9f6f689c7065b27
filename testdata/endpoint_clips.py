"""The clips of the endpoint set (testdata/endpoint_set.py): what a clip is, how it is placed and stored,
and which clips are held out of every fit.

Shared by the synthetic sentences (endpoint_set.py) and the real recordings (endpoint_real.py).
"""

from __future__ import annotations

import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from bargein.audio.resample import resample

Audio = npt.NDArray[np.float32]
RATE = 16_000
LEAD_S = 0.5
TAIL_S = 2.5
HISS_DB = -65.0
PAUSES_MS = (600, 900, 1200)
Family = Literal["kokoro", "flite", "espeak", "librivox"]


@dataclass(frozen=True)
class Clip:
    """One recording of the set; ``file`` is relative to the set's folder."""

    id: str
    family: Family
    voice: str
    sentence: int
    text: str
    kind: Literal["complete", "paused"]
    pause_ms: int
    """Silence inserted at the hesitation point (0 for a complete clip)."""
    pause_start_s: float
    """Where that silence starts (the end of the first part); 0 for a complete clip."""
    speech_end_s: float
    """Where the last word really ends."""
    file: str


HELD_OUT_VOICES = frozenset({"slt"})
"""Synthetic voices no endpoint threshold is fitted on (with the whole ``librivox`` family)."""


def held_out(clip: Clip) -> bool:
    """True for the clips no threshold is fitted on."""
    return clip.family == "librivox" or clip.voice in HELD_OUT_VOICES


def frame_db(audio: Audio, frame: int = RATE // 100) -> npt.NDArray[np.float64]:
    """Each 10 ms frame's power in dB."""
    count = len(audio) // frame
    power = np.mean(np.square(audio[:count * frame].reshape(count, frame), dtype=np.float64), axis=1)
    return np.asarray(10 * np.log10(power + 1e-12), dtype=np.float64)


def loud_bounds(audio: Audio, floor_db: float = 40.0) -> tuple[int, int]:
    """Sample bounds of the frames within ``floor_db`` of the loudest: the speech, its silence trimmed."""
    db = frame_db(audio)
    loud = np.flatnonzero(db >= db.max() - floor_db)
    frame = RATE // 100
    return int(loud[0] * frame), int((loud[-1] + 1) * frame)


def place(speech: Audio, rng: np.random.Generator) -> Audio:
    """Speech with the set's lead and tail of silence and its faint hiss."""
    lead = np.zeros(int(LEAD_S * RATE), np.float32)
    tail = np.zeros(int(TAIL_S * RATE), np.float32)
    audio = np.concatenate([lead, speech, tail])
    hiss = rng.standard_normal(len(audio)).astype(np.float32) * np.float32(10 ** (HISS_DB / 20))
    return (audio + hiss).astype(np.float32)


def write_clip(out: Path, clip: Clip, audio: Audio) -> Clip:
    """Write a clip's audio as 16-bit WAV into the set's folder; the clip back."""
    pcm = (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2")
    with wave.open(str(out / clip.file), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(RATE)
        handle.writeframes(pcm.tobytes())
    return clip


def wav_samples(path: Path) -> Audio:
    """A WAV file's samples as float32 at the set's rate."""
    with wave.open(str(path)) as handle:
        rate = handle.getframerate()
        pcm = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
    return resample(pcm.astype(np.float32) / 32768.0, rate, RATE)


def load(out: Path, clip: Clip) -> Audio:
    """A clip's samples, float32 at 16 kHz."""
    return wav_samples(out / clip.file)
