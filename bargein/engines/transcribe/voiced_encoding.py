"""A clip's Whisper encoding in one vector: the encoder's frames averaged over the clip's voiced stretch.

Whisper base mishears a lone one-syllable Mandarin command (停) as some other character, and priming it
with the command turns 嗯 into 停 as well; yet its encoder, which has already run for the transcript,
tells the two apart. One encoder frame covers 20 ms (two 10 ms mel frames); the frames whose 20 ms of
audio lie within :data:`VOICED_WITHIN_DB` of the clip's loudest are the voiced stretch (the recognised
clip carries padding and endpoint silence either side), and their mean is the vector that
:mod:`bargein.session.core.listening.keyword` weighs. Pure numpy; no model call here.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

ENCODER_FRAME_SAMPLES = 320
"""16 kHz samples per encoder frame (20 ms)."""
VOICED_WITHIN_DB = 30.0
"""Frames this close to the loudest are the utterance; quieter ones are padding, breath or the room."""
DECIMALS = 4


def voiced_mean(encoded: npt.ArrayLike, clip: npt.NDArray[np.float32]) -> tuple[float, ...]:
    """The mean of ``encoded``'s frames (``[frames, width]`` or ``[1, frames, width]``) over ``clip``'s
    voiced 20 ms frames; ``()`` when the clip has no whole frame."""
    frames = np.asarray(encoded, dtype=np.float32)
    if frames.ndim == 3:
        frames = frames[0]
    whole = min(len(clip) // ENCODER_FRAME_SAMPLES, frames.shape[0])
    if whole == 0:
        return ()
    chunks = clip[:whole * ENCODER_FRAME_SAMPLES].astype(np.float64).reshape(whole, ENCODER_FRAME_SAMPLES)
    level_db = 10 * np.log10(np.mean(chunks**2, axis=1) + 1e-12)
    voiced = level_db >= level_db.max() - VOICED_WITHIN_DB
    mean = frames[:whole][voiced].mean(axis=0)
    return tuple(round(float(value), DECIMALS) for value in mean)
