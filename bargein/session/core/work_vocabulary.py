"""The duplex machine's vocabulary for work it times itself and has the shell carry out: partial recognition of the
turn being spoken and what its words are used for, the wait for a reply's last stretch to be played, and the
playback of closed replies the client still plays (:mod:`~bargein.session.core.closed_playback`).

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


@dataclass(frozen=True)
class ClosedReplyPlaying:
    """A spoken reply's ``response.done`` went out, not cut short, while the client may still play it: ``audio_ms``
    of audio forwarded (its item ``item_id``), ``sent_ms`` of it left for the client, ``left_ms`` of it not played
    yet by the shell's playback estimate."""

    response_id: str
    item_id: str
    audio_ms: float
    sent_ms: float
    left_ms: float


@dataclass(frozen=True)
class ClosedReplySent:
    """A delta of a closed reply the client still plays left for it: now ``sent_ms`` of its audio has left, and
    ``left_ms`` is not played yet by the playback estimate."""

    response_id: str
    sent_ms: float
    left_ms: float


@dataclass(frozen=True)
class ClosedReplyCut:
    """The user spoke over a closed reply the client still played: ``heard_ms`` into it by the server's playback
    estimate (which its item now keeps)."""

    response_id: str
    heard_ms: float


@dataclass(frozen=True)
class ClosedReplyTruncated:
    """The client truncated ``item_id`` to ``heard_ms`` (``conversation.item.truncate``, clamped to its audio): where
    its playback of that item stopped."""

    item_id: str
    heard_ms: float


@dataclass(frozen=True)
class ClosedPlaybackTimerFired:
    """The closed reply's timer armed by :class:`ArmClosedPlaybackTimer` number ``arm`` ran out."""

    response_id: str
    arm: int


@dataclass(frozen=True)
class SessionClosing:
    """The session ends: the client stops playing whatever it still holds."""


@dataclass(frozen=True)
class ArmClosedPlaybackTimer:
    """Fire :class:`ClosedPlaybackTimerFired` with ``arm`` after ``delay_ms``: for a closed reply the client still
    plays, when it has had time to play the last sample, or when a cut's grace ends (re-arming replaces the reply's
    timer)."""

    response_id: str
    delay_ms: float
    arm: int
    """Which arming this is: a firing of an earlier one (replaced by a cut, or for a reply told since) is stale."""


@dataclass(frozen=True)
class ReplyHeard:
    """The client's playback of a closed reply ended: tell its observers how much of it was heard, once.
    ``heard_ms`` None: as far as the shell's playback estimate had reached by now (at most its audio)."""

    response_id: str
    heard_ms: float | None
