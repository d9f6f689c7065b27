"""Which of a segment's words the user said: the loud ones.

Another talker in the room (a television, someone on another call) is heard by the VAD and the
recogniser alike, and when it overlaps the user the transcript holds both: "Sure." over a newsreader
comes back as "Sure, the council met on Tuesday." The user is nearer the microphone than the room, so
the recogniser's word timings and the segment's frame levels tell the two apart: a word whose level is
well under the segment's loudest word is the room's. The listening decision then reads the user's words
(here "Sure": a backchannel), and the level of those words above the noise floor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bargein.session.core.listening.thresholds import ROOM_WORD_BELOW_LOUDEST_DB
from bargein.values import WordTiming


@dataclass(frozen=True)
class UserWords:
    """The loud words of a segment, their level, and how many words were left to the room."""

    text: str
    level_db: float
    """Mean power of the user's words, dBFS (``-100`` when no word could be placed)."""
    room_words: int


def word_level_db(levels_db: Sequence[float], frame_ms: float, offset_ms: float, word: WordTiming) -> float | None:
    """Mean power (dBFS) of the frames a word spans; ``None`` if it lies outside the recorded frames.

    ``offset_ms`` is where the segment's first frame lies in the recognised clip (the prefix padding). A word
    the alignment gave no duration has the level of the frame it lies in; one with a timing that is not a
    finite number is unplaced.
    """
    if frame_ms <= 0 or not (math.isfinite(word.start_ms) and math.isfinite(word.end_ms)):
        return None
    first = max(0, int((word.start_ms - offset_ms) // frame_ms))
    # at least the frame the word starts in: a zero-length word on a frame edge spanned none and was unplaced
    # (dropped from the user's words and counted as the room's), a hair past the edge it was placed
    end = max(math.ceil((word.end_ms - offset_ms) / frame_ms), int((word.start_ms - offset_ms) // frame_ms) + 1)
    last = min(len(levels_db), end)
    if last <= first:
        return None
    power = sum(10 ** (db / 10) for db in levels_db[first:last]) / (last - first)
    return 10 * math.log10(max(power, 1e-10))


def user_words(levels_db: Sequence[float], frame_ms: float, offset_ms: float,
               words: Sequence[WordTiming]) -> UserWords | None:
    """The user's words of a transcript with word timings (``None`` when no word could be placed)."""
    placed = [(w, level) for w in words if (level := word_level_db(levels_db, frame_ms, offset_ms, w)) is not None]
    if not placed:
        return None
    loudest = max(level for _, level in placed)
    mine = [(w, level) for w, level in placed if level >= loudest - ROOM_WORD_BELOW_LOUDEST_DB]
    power = sum(10 ** (level / 10) for _, level in mine) / len(mine)
    text = " ".join(w.word.strip() for w, _ in mine)
    return UserWords(text, 10 * math.log10(max(power, 1e-10)), len(words) - len(mine))
