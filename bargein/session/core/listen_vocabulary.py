"""The duplex machine's vocabulary for listening: what recognition reports and what the listening decision does.

Part of :mod:`bargein.session.core.vocabulary` (which re-exports every name here), kept apart so each
module stays small.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bargein.session.core.listening.classifier import ListenDecision
from bargein.values import Transcript


@dataclass(frozen=True)
class SegmentClassified:
    """What a committed segment was; with ``verdict`` the machine also reports its decision."""

    item_id: str
    decision: Literal["query", "noise"]
    verdict: ListenDecision | None = None


@dataclass(frozen=True)
class SegmentTranscribed:
    """A committed segment's recognition finished (``None``: it failed); the machine classifies it."""

    item_id: str
    transcript: Transcript | None
    primed: Transcript | None = None
    """The user's loud stretch recognised a second time, primed with the listening vocabulary (asked for by
    :class:`~bargein.session.core.vocabulary.CommitBuffer`'s ``listen_span``; ``None``: not asked or failed)."""
    primed_pending: bool = False
    """The primed recognition is still running: the segment is decided now only if the plain transcript cuts
    by rule (a command), else at the second ``SegmentTranscribed``, which carries ``primed``."""


@dataclass(frozen=True)
class GuessTranscribed:
    """Speculative recognition of a turn (started at :class:`SilenceBegan`) finished. Over a reply it comes
    twice: first the plain recognition alone, then again with ``primed``, the loud stretch's (at a
    :class:`~bargein.session.core.vocabulary.VoiceEnded`, or when the plain one failed: ``transcript`` ``None``)."""

    item_id: str
    transcript: Transcript | None
    primed: Transcript | None = None
    at_ms: float | None = None
    """The silence it was made at: over a paused reply a guess still comes after the user spoke on (a
    command in it cuts), and its words then say nothing about the turn's newer silence."""


@dataclass(frozen=True)
class PartialTranscript:
    """A partial recognition (:class:`~bargein.session.core.work_vocabulary.RecognisePartial`) of the segment being
    spoken came back with its words so far (empty when it failed): the next partial may start."""

    item_id: str
    text: str
    whole: bool = True
    """It heard the whole segment, not only its last ``window_ms``: its words may warm the reply's prompt."""


@dataclass(frozen=True)
class PrefetchReply:
    """The turn ``item_id`` reads as a query before its endpoint: start its reply's LLM privately.

    ``text`` is what speculative recognition heard; the tokens are used only by a reply started after
    the endpoint for exactly the history the prefetch assumed.
    """

    item_id: str
    text: str
    estimate_end: bool = False
    """Also have the language model estimate whether ``text`` ends the sentence, with the same prompt, where it can
    (fed back as :class:`~bargein.session.core.endpointing.TextEndEstimate`): the turn being spoken, on the
    tiered endpoint that weighs it. The shell feeds one back however it goes (``probability`` ``None`` where none
    will come): the short silence waits for it."""


@dataclass(frozen=True)
class ReportSegment:
    """Tell the client what the machine decided about a segment (``bargein.listen.segment``)."""

    item_id: str
    verdict: ListenDecision
    action: str
    """What the machine did: answer, cut the reply and answer, resume the reply, ignore..."""


@dataclass(frozen=True)
class AwaitClassification:
    """A committed segment needs the listening classifier's decision."""

    item_id: str


@dataclass(frozen=True)
class DiscardSegment:
    """A noise segment: remove it from the conversation; it never reaches the LLM."""

    item_id: str
