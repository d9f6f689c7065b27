"""The byte arithmetic of resuming a paused reply from its cut point, and the clocks it restarts with.

The client dropped what it had not played when it saw ``speech_started``; a resumed reply re-sends its audio from
exactly the sample where playback stopped (:func:`resumption`), and its playback estimate and pacer start again
there (:func:`restarted_clocks`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from bargein.audio.codecs import AudioFormat
from bargein.session.core.vocabulary import AudioPiece
from bargein.session.playback import Pacer, PlaybackEstimate
from bargein.values import WordTiming

RESEND_PIECE_MS = 200.0
"""A resumed reply re-sends its audio after the cut point in pieces of this length."""


@dataclass(frozen=True)
class Resumption:
    """How a paused reply continues: the exact cut and the audio after it, re-cut into pieces."""

    cut_ms: float
    """The cut point rounded to a whole sample of what was actually forwarded."""
    cut_byte: int
    pieces: list[AudioPiece]
    kept_words: list[WordTiming]
    """The item's words before the cut (the item keeps only these)."""


def resumption(forwarded: bytes, cut_ms: float, fmt: AudioFormat, words: Sequence[WordTiming]) -> Resumption:
    """Cut forwarded audio at ``cut_ms`` (a whole sample, never past what was sent) and re-piece the tail.

    The client dropped what it had not played when it saw ``speech_started``, so the reply restarts at
    exactly the sample where playback stopped: no sample is lost and none is played twice. Word timings
    of the tail move with it, relative to each piece.
    """
    cut_byte = min(len(forwarded), round(cut_ms * fmt.rate / 1000) * fmt.bytes_per_sample)
    cut_ms = 1000.0 * cut_byte / fmt.bytes_per_sample / fmt.rate
    tail = forwarded[cut_byte:]
    tail_words = [WordTiming(w.word, w.start_ms - cut_ms, w.end_ms - cut_ms) for w in words if w.start_ms >= cut_ms]
    step = round(fmt.rate * RESEND_PIECE_MS / 1000) * fmt.bytes_per_sample
    pieces = []
    for offset in range(0, len(tail), step):
        piece = tail[offset:offset + step]
        start_ms = 1000.0 * offset / fmt.bytes_per_sample / fmt.rate
        duration_ms = 1000.0 * len(piece) / fmt.bytes_per_sample / fmt.rate
        piece_words = [WordTiming(w.word, w.start_ms - start_ms, w.end_ms - start_ms) for w in tail_words
                       if start_ms <= w.start_ms < start_ms + duration_ms]
        pieces.append(AudioPiece(bytes(piece), duration_ms, piece_words))
    return Resumption(cut_ms, cut_byte, pieces, [w for w in words if w.start_ms < cut_ms])


def restarted_clocks(cut_ms: float, lead_ms: float) -> tuple[PlaybackEstimate, Pacer]:
    """A playback estimate and a pacer for a reply that resumes at ``cut_ms`` now."""
    started = time.monotonic() - cut_ms / 1000.0
    return PlaybackEstimate(sent_ms=cut_ms, first_sent_wall_s=started), Pacer(lead_ms, started_s=started)
