"""Join the speech chunks of one reply with a short overlap-crossfade, so no click is heard at the seams.

Each chunk of a reply is synthesised on its own, so two neighbours rarely meet at the same level: a DC
offset, a phase jump or a cut in the middle of a noise burst all make a step, and a step is a click. The
:class:`Crossfader` overlaps the last few milliseconds of one chunk with the first few of the next and
fades one into the other. Only that overlap is held back from each chunk, so it adds at most the overlap
(8 ms by default) of latency, and :meth:`Crossfader.flush` releases the last tail at the end of the reply.

Every overlap shortens the reply by its length. Chunk k is emitted starting exactly where its own first
sample lies in the joined reply (the seam before it is faded into its start, the seam after it is held
back), so its word timings keep their offsets; they are only shifted by any unfaded remainder of a tail
prepended to it and clamped to the emitted length, which loses at most the overlap at the very end.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Literal

import numpy as np

from bargein.values import Float32Audio, SpeechChunk, WordTiming

FadeShape = Literal["linear", "cosine", "equal_power"]

DEFAULT_OVERLAP_MS = 8.0


def fade_curves(length: int, shape: FadeShape = "cosine") -> tuple[Float32Audio, Float32Audio]:
    """Fade-out and fade-in gains of ``length`` samples.

    ``linear`` and ``cosine`` (raised cosine) gains sum to one, which keeps the level of correlated
    material (the usual case: silence or the same vowel on both sides); ``cosine`` also starts and ends
    with zero slope, so the seam has no corner. ``equal_power`` keeps the power of uncorrelated material.
    """
    if length <= 0:
        empty = np.zeros(0, np.float32)
        return empty, empty
    # Sample centres, so neither curve reaches exactly 0 or 1 inside the overlap and both are symmetric.
    t = (np.arange(length, dtype=np.float64) + 0.5) / length
    if shape == "linear":
        fade_in = t
        fade_out = 1.0 - t
    elif shape == "cosine":
        fade_in = 0.5 - 0.5 * np.cos(np.pi * t)
        fade_out = 1.0 - fade_in
    elif shape == "equal_power":
        fade_in = np.sin(0.5 * np.pi * t)
        fade_out = np.cos(0.5 * np.pi * t)
    else:
        raise ValueError(f"unknown fade shape {shape!r}")
    return fade_out.astype(np.float32), fade_in.astype(np.float32)


class Crossfader:
    """Streams the chunks of one reply, overlap-crossfading each seam.

    Feed chunks in order with :meth:`push`; each call returns the audio that is final (everything but
    the held-back tail), possibly empty. Call :meth:`flush` once at the end for the last tail. One
    crossfader serves one reply: a cancelled reply is simply dropped (there is nothing to flush).

    The overlap at a seam is the held tail, shortened when either side is shorter than it; a chunk
    shorter than the overlap is faded in completely and becomes part of the next tail (its words are
    then clamped to the empty emitted audio: synthesised chunks are never that short).
    """

    def __init__(self, sample_rate: int, *, overlap_ms: float = DEFAULT_OVERLAP_MS,
                 shape: FadeShape = "cosine") -> None:
        if sample_rate <= 0:
            raise ValueError("sample_rate must be positive")
        if overlap_ms < 0:
            raise ValueError("overlap_ms must not be negative")
        self.sample_rate = sample_rate
        self.overlap = round(overlap_ms * sample_rate / 1000.0)
        self.shape: FadeShape = shape
        self._tail = np.zeros(0, np.float32)
        self.samples_in = 0
        """Samples pushed so far."""
        self.samples_out = 0
        """Samples returned so far (pushes and flush)."""

    @property
    def held(self) -> int:
        """Samples held back, waiting for the next chunk or :meth:`flush`."""
        return len(self._tail)

    def push(self, chunk: SpeechChunk) -> SpeechChunk:
        """Add the next chunk; return the audio now final, with its words relative to that audio."""
        if chunk.sample_rate != self.sample_rate:
            raise ValueError(f"chunk at {chunk.sample_rate} Hz fed to a {self.sample_rate} Hz crossfader")
        audio = np.asarray(chunk.audio, dtype=np.float32).reshape(-1)
        self.samples_in += len(audio)
        tail = self._tail
        # The seam overlaps the held tail's end with the chunk's start; a short chunk shortens it.
        seam = min(len(tail), len(audio))
        lead = tail[: len(tail) - seam]  # the part of the old tail that is not faded
        faded = self._mix(tail[len(tail) - seam:], audio[:seam])
        joined = np.concatenate((lead, faded, audio[seam:])).astype(np.float32, copy=False)
        # Hold back the new tail from the joined audio, not only from this chunk, so a chunk shorter
        # than the overlap is still faded into the next one instead of leaving an unfaded seam.
        keep = min(self.overlap, len(joined))
        out = joined[: len(joined) - keep]
        self._tail = joined[len(joined) - keep:].copy()
        self.samples_out += len(out)
        # The chunk's sample 0 sits after ``lead`` in the emitted audio.
        words = shift_words(chunk.words, len(lead) * 1000.0 / self.sample_rate,
                             len(out) * 1000.0 / self.sample_rate)
        return SpeechChunk(audio=out, sample_rate=self.sample_rate, words=words)

    def flush(self) -> SpeechChunk:
        """The held tail (ends the reply); the crossfader can then start a new reply."""
        out, self._tail = self._tail, np.zeros(0, np.float32)
        self.samples_out += len(out)
        return SpeechChunk(audio=out, sample_rate=self.sample_rate)

    def _mix(self, old: Float32Audio, new: Float32Audio) -> Float32Audio:
        fade_out, fade_in = fade_curves(len(old), self.shape)
        return (old * fade_out + new * fade_in).astype(np.float32)


def shift_words(words: Iterable[WordTiming], offset_ms: float, limit_ms: float) -> tuple[WordTiming, ...]:
    """Move words by ``offset_ms`` and clamp them to ``[0, limit_ms]``.

    Clamping loses at most one overlap at the very end of a chunk, where synthesisers leave silence.
    """
    shifted = []
    for w in words:
        start = min(max(w.start_ms + offset_ms, 0.0), limit_ms)
        end = min(max(w.end_ms + offset_ms, start), limit_ms)
        shifted.append(replace(w, start_ms=start, end_ms=end))
    return tuple(shifted)


def crossfade_all(chunks: Iterable[Float32Audio], sample_rate: int, *,
                  overlap_ms: float = DEFAULT_OVERLAP_MS, shape: FadeShape = "cosine") -> Float32Audio:
    """One-shot join of a whole reply: each chunk overlaps what came before by the overlap, or less
    when either side is shorter. The streaming :class:`Crossfader` produces the same samples."""
    parts = [np.asarray(c, dtype=np.float32).reshape(-1) for c in chunks]
    overlap = round(overlap_ms * sample_rate / 1000.0)
    out = np.zeros(sum(len(p) for p in parts), np.float32)
    end = 0  # samples of ``out`` written so far
    for part in parts:
        seam = min(overlap, end, len(part))
        fade_out, fade_in = fade_curves(seam, shape)
        out[end - seam:end] = out[end - seam:end] * fade_out + part[:seam] * fade_in
        out[end:end + len(part) - seam] = part[seam:]
        end += len(part) - seam
    return out[:end]
