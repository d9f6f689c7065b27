"""The user's own voice against the room's, frame by frame: what of a segment heard over a reply is the user.

A session knows how loud its user is (the turns it answered while the agent was silent,
``SegmentBook.user_level_db``): the user is nearer the microphone than a television or a second talker,
which sit 10 dB or more under them. Two measures of a segment follow from its frames (their levels and
the VAD's speech probabilities), both pure:

* :func:`room_speech_ms`: how much of the segment's speech lies well under the user's level. When a
  background talker's phrase runs into the user's "okay", the VAD makes one segment of both and the
  whole-segment recognition writes the talker's words ("Why London are ... Okay"); such a segment is
  *mixed with the room*, and the recognition of its loud stretch alone (the primed one,
  :mod:`bargein.session.core.listening.over_reply`) is the user's;
* :func:`loud_speech_probability`: the VAD's mean speech probability over the segment's loud stretch.
  When the loudest thing in a mixed segment is a tone, a chord or a burst at the user's level with a
  talker under it, the VAD holds the segment open on the talker while the loud stretch itself is not speech.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bargein.session.core.listening.over_reply import loud_stretch
from bargein.session.core.listening.thresholds import (
    ALONE_ROOM_MS,
    LONGEST_ASIDE_MS,
    LOUD_SPEECH_PROBABILITY,
    MIXED_ROOM_MS,
    QUIETER_THAN_USER_DB,
)


def room_speech_ms(levels_db: Sequence[float], probabilities: Sequence[float], frame_ms: float, threshold: float,
                   user_level_db: float) -> float:
    """Milliseconds of speech (frames the VAD scores at ``threshold`` or more) more than
    :data:`QUIETER_THAN_USER_DB` under the user's level."""
    line = user_level_db - QUIETER_THAN_USER_DB
    return frame_ms * sum(1 for level, p in zip(levels_db, probabilities, strict=False)
                          if p >= threshold and level < line)


def loud_speech_probability(levels_db: Sequence[float], probabilities: Sequence[float],
                            frame_ms: float) -> float | None:
    """The mean speech probability over the loud stretch (the whole segment when it is all loud); ``None``
    without frames."""
    count = min(len(levels_db), len(probabilities))
    if count == 0:
        return None
    first, last = loud_stretch(levels_db[:count], frame_ms) or (0, count)
    span = probabilities[first:last]
    return sum(span) / len(span) if span else None


def own_voice_fields(levels_db: Sequence[float], probabilities: Sequence[float], frame_ms: float, threshold: float,
                     user_level_db: float | None) -> dict[str, Any]:
    """The decision fields of this module for one segment: ``loud_probability`` and, once the user's level is
    known, ``room_speech_ms``."""
    fields: dict[str, Any] = {}
    loud = loud_speech_probability(levels_db, probabilities, frame_ms)
    if loud is not None:
        fields["loud_probability"] = round(loud, 3)
    if user_level_db is not None and levels_db:
        fields["room_speech_ms"] = round(room_speech_ms(levels_db, probabilities, frame_ms, threshold,
                                                        user_level_db), 1)
    return fields


def mixed_with_room(features: Mapping[str, Any]) -> bool:
    """Whether a segment's decision fields say it holds :data:`MIXED_ROOM_MS` of the room's speech."""
    room = features.get("room_speech_ms")
    return room is not None and float(room) >= MIXED_ROOM_MS


def user_alone(features: Mapping[str, Any]) -> bool:
    """Whether a segment's decision fields say it holds no more of the room's speech than the user alone makes
    (:data:`ALONE_ROOM_MS`); False before the user's level is known (no ``room_speech_ms``)."""
    room = features.get("room_speech_ms")
    return room is not None and float(room) <= ALONE_ROOM_MS


def spoke_at_length(features: Mapping[str, Any]) -> bool:
    """Whether the segment holds :data:`LONGEST_ASIDE_MS` of speech at the user's own level: then its loud
    stretch is not all the user said, and that stretch's recognition cannot show it was only an aside.
    False until the user's level is known (no ``room_speech_ms``): the room's speech cannot be told apart."""
    speech, room = features.get("speech_ms"), features.get("room_speech_ms")
    if speech is None or room is None:
        return False
    return float(speech) - float(room) >= LONGEST_ASIDE_MS


def loud_stretch_not_speech(features: Mapping[str, Any]) -> bool:
    """Whether the segment is mixed with the room and its loudest stretch is no voice
    (:data:`LOUD_SPEECH_PROBABILITY`)."""
    loud = features.get("loud_probability")
    return loud is not None and float(loud) < LOUD_SPEECH_PROBABILITY and mixed_with_room(features)
