"""A recording cut into segments offline, as a session's server_vad would cut it: Silero per 32 ms frame,
0.5 on, 0.35 off, 500 ms of silence ending a segment, 300 ms of prefix padding; each frame's level and the
background level before a segment.

What ``bench.quality.over_reply_probe`` and ``training.command_encodings`` both hear their cases through.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bargein.engines.listen.silero_vad import CONTEXT_SAMPLES, FRAME_SAMPLES, STATE_SHAPE, SileroModel

RATE = 16_000
FRAME_MS = 32.0
PADDING_MS = 300.0
SILENCE_MS = 500.0


def load_wav(path: Path) -> npt.NDArray[np.float32]:
    """A mono pcm16 WAV at 16 kHz (resampled)."""
    import soxr

    with wave.open(str(path)) as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768
    return np.asarray(soxr.resample(pcm, rate, RATE), dtype=np.float32)


def vad_frames(model: SileroModel, audio: npt.NDArray[np.float32]) -> tuple[list[float], list[float]]:
    """Speech probability and level (dBFS) of each 32 ms frame."""
    state = np.zeros((STATE_SHAPE[0], 1, STATE_SHAPE[1]), np.float32)
    context = np.zeros((1, CONTEXT_SAMPLES), np.float32)
    probabilities, levels = [], []
    for start in range(0, len(audio) - FRAME_SAMPLES + 1, FRAME_SAMPLES):
        frame = audio[start:start + FRAME_SAMPLES][None, :]
        p, state = model.step(frame, context, state)
        context = frame[:, -CONTEXT_SAMPLES:]
        probabilities.append(float(p[0]))
        levels.append(10 * float(np.log10(max(float(np.mean(frame ** 2)), 1e-10))))
    return probabilities, levels


def segments(probabilities: list[float]) -> list[tuple[int, int]]:
    """(first, last+1) frames of each segment, as server_vad finds them (0.5 on, 0.35 off, 500 ms)."""
    found, onset, silent = [], None, 0
    for i, p in enumerate(probabilities):
        if onset is None:
            if p >= 0.5:
                onset, silent = i, 0
            continue
        silent = silent + 1 if p < 0.35 else 0
        if silent * FRAME_MS >= SILENCE_MS:
            found.append((onset, i - silent + 1))
            onset = None
    if onset is not None:
        found.append((onset, len(probabilities)))
    return found


def floor_db(probabilities: list[float], levels: list[float], before: int) -> float:
    """The background level before frame ``before`` (frames the VAD calls silence)."""
    quiet = [lv for p, lv in zip(probabilities[:before], levels[:before], strict=True) if p < 0.2]
    return float(np.mean(quiet)) if quiet else -70.0
