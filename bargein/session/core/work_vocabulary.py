"""The duplex machine's vocabulary for work it times itself and has the shell carry out: partial recognition of the
turn being spoken and what its words are used for, and the wait for a reply's last stretch to be played.

Part of :mod:`bargein.session.core.vocabulary` (which re-exports every name here), kept apart so each
module stays small.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RecognisePartial:
    """Recognise the turn ``item_id`` so far (``input_audio_transcription.delta``, and the words prompt warming
    reads): its audio from ``start_ms`` (its onset less the prefix padding) to the newest sample, at most the last
    ``window_ms`` of it. ``at_ms``: the stream time at which it became due. The result is fed back as a
    :class:`~bargein.session.core.listen_vocabulary.PartialTranscript` (empty when recognition failed), which
    also tells the machine that no partial recognition is running any more."""

    item_id: str
    start_ms: float
    at_ms: float
    window_ms: float


@dataclass(frozen=True)
class ReportPartial:
    """Words recognised so far of the turn still being spoken: send the client what extends the transcript
    already sent for ``item_id`` (``conversation.item.input_audio_transcription.delta``)."""

    item_id: str
    text: str


@dataclass(frozen=True)
class WarmPrompt:
    """Have the LLM evaluate the prompt a reply to ``text`` (the turn's words so far) would get, so that the
    reply's prompt at the endpoint has only its last words left to read. Cache work: nothing reaches the client."""

    item_id: str
    text: str


@dataclass(frozen=True)
class ArmPlayOutTimer:
    """Fire :class:`PlayOutTimerFired` with ``arm`` after ``delay_ms``: the longest a reply whose words are all
    out stays live while the client plays its last stretch (re-arming replaces the reply's timer)."""

    response_id: str
    delay_ms: int
    arm: int
    """Which arming this is: a firing of an earlier one (the reply paused and resumed since) is stale."""


@dataclass(frozen=True)
class PlayOutTimerFired:
    """The play-out timer armed by :class:`ArmPlayOutTimer` number ``arm`` ran out."""

    response_id: str
    arm: int
