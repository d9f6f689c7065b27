"""Cutting a paused reply before the endpoint: when the user's own voice ended, and whether a command heard
before the endpoint is the user's. Pure functions over a segment's frame levels, for the segment book."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bargein.session.core.listening.over_reply import loud_level_db, loud_stretch
from bargein.session.core.listening.own_voice import mixed_with_room
from bargein.session.core.listening.thresholds import EARLY_CUT_BELOW_USER_DB, FADE_FRAMES, FADE_MAX_FRAMES


def stretch_just_ended(levels_db: Sequence[float], frame_ms: float) -> bool:
    """Whether the segment's loud stretch (:func:`~bargein.session.core.listening.over_reply.loud_stretch`) ended
    exactly :data:`FADE_FRAMES` frames ago though the segment goes on: true once per such end."""
    if not FADE_FRAMES < len(levels_db) <= FADE_MAX_FRAMES:
        return False  # (a longer segment is the room's talk, not a command: not looked at every frame)
    stretch = loud_stretch(levels_db, frame_ms)
    return stretch is not None and stretch[1] == len(levels_db) - FADE_FRAMES


def as_loud_as_the_user(levels_db: Sequence[float], user_loud_level_db: float | None) -> bool:
    """Whether a segment's loud stretch is within :data:`EARLY_CUT_BELOW_USER_DB` of the loud stretches of the
    user's own turns (true while the session has not heard the user alone yet): on a part of a segment, the
    room's talker may say "why" or "next" first."""
    return user_loud_level_db is None or user_loud_level_db - loud_level_db(levels_db) <= EARLY_CUT_BELOW_USER_DB


def cuts_early(features: Mapping[str, Any], reasons: Sequence[str], levels_db: Sequence[float],
               user_loud_level_db: float | None) -> bool:
    """Whether a verdict on a segment's speculative transcripts cuts the paused reply before the endpoint: a
    command or question word clearly above the room, by the rules of :mod:`bargein.session.core.listening.decide` on
    either recognition, as the endpoint's verdict would find on the same two transcripts (never the fitted
    model's guess), in a segment :func:`as_loud_as_the_user`. In a segment mixed with the room only the primed
    recognition's command counts (the reasons say "primed:"): the whole segment's command may be the room's."""
    return (bool(features.get("command")) and (not mixed_with_room(features) or reasons[0].startswith("primed: "))
            and as_loud_as_the_user(levels_db, user_loud_level_db))
