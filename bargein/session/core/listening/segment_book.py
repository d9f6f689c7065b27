"""The segments of one session, from their onset until the classifier's verdict, and what the session
learns from them: the noise floor and how loud the user's own voice is.

The machine owns one :class:`SegmentBook`; every VAD frame goes in, and a committed segment comes out
judged by :func:`~bargein.session.core.listening.classifier.classify`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

from bargein.session.core.listening.classifier import ListenDecision, classify
from bargein.session.core.listening.early_cut import cuts_early, stretch_just_ended
from bargein.session.core.listening.over_reply import loud_stretch, reference_loud_level_db
from bargein.session.core.listening.own_voice import mixed_with_room
from bargein.session.core.listening.segment_stats import NoiseFloor, SegmentStats
from bargein.session.core.listening.thresholds import SPAN_MARGIN_MS, USER_LEVEL_RATE
from bargein.values import Transcript

MAX_OPEN_SEGMENTS = 32
"""Segments whose statistics are kept while they wait for their transcript (older ones are forgotten)."""


@dataclass
class Segment:
    """What the classifier will need about one segment: its frames and the background when it began."""

    stats: SegmentStats
    floor_db: float
    during_reply: bool = False
    """Whether a reply was live when the segment began."""


class SegmentBook:
    """The segments of one session, from onset until their verdict, and the session's noise floor."""

    def __init__(self) -> None:
        self.noise_floor = NoiseFloor()
        self._segments: dict[str, Segment] = {}
        self.user_level_db: float | None = None
        """How loud the user's own turns were (those answered while the agent was silent): a voice well
        under it while the agent speaks is the room's (a television, another talker)."""
        self.user_loud_level_db: float | None = None
        """The same turns' loud stretches
        (:func:`~bargein.session.core.listening.over_reply.reference_loud_level_db`): the measure a segment's
        loud stretch is held against, like with like (a loud stretch reads louder than the whole of the same
        speech, so against :attr:`user_level_db` a talker 10 dB under the user passed for a voice at the user's
        level)."""

    def begin(self, item_id: str, *, threshold: float, during_reply: bool, offset_ms: float = 0.0) -> None:
        """Speech began: a new segment, judged against the background as it was before it.

        ``offset_ms``: where the segment's onset lies in the clip that will be recognised (the padding).
        """
        self._segments[item_id] = Segment(SegmentStats(threshold=threshold, offset_ms=offset_ms),
                                          self.noise_floor.level_db, during_reply)
        while len(self._segments) > MAX_OPEN_SEGMENTS:
            self._segments.pop(next(iter(self._segments)))

    def frame(self, item_id: str | None, probability: float, energy_db: float, frame_ms: float) -> None:
        """One VAD frame: into the speaking segment (if any), then into the noise floor."""
        if item_id is not None and (segment := self._segments.get(item_id)) is not None:
            segment.stats.add(probability, energy_db, frame_ms)
        self.noise_floor.observe(probability, energy_db)

    def get(self, item_id: str) -> Segment | None:
        """The segment, while it is known."""
        return self._segments.get(item_id)

    @overload
    def judge(self, item_id: str, transcript: Transcript | None, *, during_reply: bool,
              primed: Transcript | None = None) -> ListenDecision: ...

    @overload
    def judge(self, item_id: str, transcript: Transcript | None, *, during_reply: bool,
              primed: Transcript | None = None, primed_pending: bool) -> ListenDecision | None: ...

    def judge(self, item_id: str, transcript: Transcript | None, *, during_reply: bool,
              primed: Transcript | None = None, primed_pending: bool = False) -> ListenDecision | None:
        """Classify a committed segment with its transcript (and ``primed``, its loud stretch recognised
        with the listening vocabulary); the segment is then forgotten. With ``primed_pending`` (the primed
        recognition still runs) only a command the plain transcript cuts on is decided; else ``None``: wait."""
        if primed_pending:
            waiting = self._segments.get(item_id)
            if waiting is None:
                return None
            early = classify(waiting.stats, transcript, during_reply=during_reply or waiting.during_reply,
                             noise_floor_db=waiting.floor_db, user_level_db=self.user_level_db,
                             user_loud_level_db=self.user_loud_level_db)
            if early.decision != "query" or not early.features.get("command") or mixed_with_room(early.features):
                return None  # in a segment mixed with the room the command may be the room's: the primed one decides
            self._segments.pop(item_id, None)
            return early
        segment = self._segments.pop(item_id, None) or Segment(SegmentStats(), self.noise_floor.level_db)
        during_reply = during_reply or segment.during_reply  # a reply the segment cut early still counts
        verdict = classify(segment.stats, transcript, during_reply=during_reply, noise_floor_db=segment.floor_db,
                           user_level_db=self.user_level_db, user_loud_level_db=self.user_loud_level_db, primed=primed)
        level = verdict.features.get("user_level_db")
        if not during_reply and verdict.decision == "query" and level is not None:  # a turn the user spoke alone
            stats = segment.stats
            loud = reference_loud_level_db(stats.levels_db, stats.probabilities, stats.threshold)
            if loud is not None:
                self.user_level_db = _towards(self.user_level_db, level)
                self.user_loud_level_db = _towards(self.user_loud_level_db, loud)
        return verdict

    def guess(self, item_id: str, transcript: Transcript | None, *, during_reply: bool,
              primed: Transcript | None = None) -> ListenDecision | None:
        """Classify a segment still being decided on a speculative transcript (``None``: unknown)."""
        segment = self._segments.get(item_id)
        if segment is None:
            return None
        return classify(segment.stats, transcript, during_reply=during_reply, noise_floor_db=segment.floor_db,
                        user_level_db=self.user_level_db, user_loud_level_db=self.user_loud_level_db, primed=primed)

    def spots_command(self, item_id: str, transcript: Transcript | None, primed: Transcript | None = None) -> bool:
        """Whether a speculative transcript of a segment over a reply (with ``primed``, its loud stretch so far
        recognised primed) cuts the reply before the endpoint
        (:func:`~bargein.session.core.listening.early_cut.cuts_early`)."""
        verdict = self.guess(item_id, transcript, during_reply=True, primed=primed)
        segment = self._segments.get(item_id)
        return verdict is not None and segment is not None and cuts_early(verdict.features, verdict.reasons,
                                                                          segment.stats.levels_db,
                                                                          self.user_loud_level_db)

    def listen_span(self, item_id: str, onset_ms: float) -> tuple[float, float] | None:
        """For a segment heard over a reply: the stream time of its loud stretch (the user's own voice, see
        :func:`~bargein.session.core.listening.over_reply.loud_stretch`) with a margin; ``None`` for other segments."""
        segment = self._segments.get(item_id)
        if segment is None or not segment.during_reply or not segment.stats.levels_db:
            return None
        frame_ms = segment.stats.frame_ms
        first, last = loud_stretch(segment.stats.levels_db, frame_ms) or (0, len(segment.stats.levels_db))
        return (max(0.0, onset_ms + first * frame_ms - SPAN_MARGIN_MS), onset_ms + last * frame_ms + SPAN_MARGIN_MS)

    def voice_faded(self, item_id: str, onset_ms: float) -> tuple[float, float] | None:
        """For a segment over a reply: the span of its loud stretch (as :meth:`listen_span`) once, when that
        stretch ended though the segment goes on (:func:`~bargein.session.core.listening.early_cut.stretch_just_ended`:
        the room's quieter talker still speaks, the user's "Stop." is over); ``None`` at every other frame."""
        segment = self._segments.get(item_id)
        if segment is None or not segment.during_reply or not stretch_just_ended(segment.stats.levels_db,
                                                                                   segment.stats.frame_ms):
            return None
        return self.listen_span(item_id, onset_ms)

    def forget(self, item_id: str) -> None:
        """A segment that will never be judged (the buffer was cleared)."""
        self._segments.pop(item_id, None)


def _towards(reference: float | None, level: float) -> float:
    """The user's reference level after one more answered turn at ``level`` (:data:`USER_LEVEL_RATE`)."""
    return level if reference is None else reference + USER_LEVEL_RATE * (level - reference)
