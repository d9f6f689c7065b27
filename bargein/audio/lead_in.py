"""Start a reply with its voice, not with the silence a synthesiser puts before every sentence.

Synthesisers pad each sentence with leading silence, and bargein's engines keep about 100 ms of it
(``lead_ms``) so that the clauses of a reply are separated as in speech. Before a reply's *first* clause
there is nothing to separate it from: that silence only delays the moment the user hears the answer.
:func:`trim_lead_in` cuts a reply's first chunk to a few milliseconds before its first sound.
"""

from __future__ import annotations

import numpy as np

from bargein.audio.crossfade import shift_words
from bargein.values import SpeechChunk

LEAD_IN_MS = 10.0
"""Silence kept before the first sound: enough that a quiet onset under the threshold is not clipped."""
SOUND_LEVEL = 3e-3
"""About -50 dBFS: the level a sample must pass to count as the start of the voice (a breath counts)."""


def trim_lead_in(chunk: SpeechChunk, *, keep_ms: float = LEAD_IN_MS, level: float = SOUND_LEVEL) -> SpeechChunk:
    """``chunk`` without its leading silence but ``keep_ms`` before the first sample above ``level``; its
    words move with the audio. A chunk with no sample above ``level`` is returned unchanged."""
    audio = np.asarray(chunk.audio, dtype=np.float32).reshape(-1)
    loud = np.flatnonzero(np.abs(audio) > level)
    if not len(loud):
        return chunk
    cut = max(int(loud[0]) - round(keep_ms * chunk.sample_rate / 1000.0), 0)
    if cut == 0:
        return chunk
    kept = audio[cut:]
    words = shift_words(chunk.words, -cut * 1000.0 / chunk.sample_rate, len(kept) * 1000.0 / chunk.sample_rate)
    return SpeechChunk(audio=kept, sample_rate=chunk.sample_rate, words=words)
