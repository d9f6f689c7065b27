"""The duplex machine's vocabulary for the user's speech as turn detection hears it: the actions that tell the client
it began and stopped, and those that start or stop the work done on it meanwhile (speculative recognition, the
end-of-turn score).

Part of :mod:`bargein.session.core.vocabulary` (which re-exports every name here), kept apart so each
module stays small.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SpeechStarted:
    """Emit ``input_audio_buffer.speech_started``; the user item will be ``item_id``."""

    item_id: str
    audio_start_ms: float
    cuts_playing: bool = True
    """Speech interrupts the agent (``interrupt_response``): a finished reply the client may still be playing is
    cut where its playback stands. Off, the client plays it on and the history keeps all of it."""
    told: bool = True
    """The client hears of it now. Not in confirm mode over the agent's live reply, which the speech does not pause
    at its onset: OpenAI's clients stop playing at ``speech_started``, so it is told (:class:`SpeechAnnounced`) only
    once the speech pauses the reply, or the reply ends, and never for a cough the reply talks through."""


@dataclass(frozen=True)
class SpeechAnnounced:
    """Emit the ``input_audio_buffer.speech_started`` a :class:`SpeechStarted` held back, with its onset."""

    item_id: str
    audio_start_ms: float
    cuts_playing: bool = True
    """As :attr:`SpeechStarted.cuts_playing`: the client stops a finished reply it still plays here."""


@dataclass(frozen=True)
class SilenceBegan:
    """The VAD first saw silence in a turn: speculative recognition may start."""

    item_id: str
    at_ms: float
    listen_span: tuple[float, float] | None = None
    """A turn over the agent's reply: its loud stretch so far, recognised a second time primed (as
    ``CommitBuffer``'s ``listen_span``), at once, and fed back as ``GuessTranscribed.primed``."""
    urgent: bool = False
    """A paused reply waits for these words: the recogniser serves them before other work."""
    guess: bool = True
    """Recognise the turn so far speculatively (its audio from ``start_ms`` to ``at_ms``): not for a turn too long
    for one (:data:`~bargein.session.core.partials.MAX_GUESS_MS`), whose final recognition runs in slices."""
    start_ms: float = field(default=0.0, compare=False)
    """Where the turn's audio begins (its onset less the prefix padding; derived from the turn, not compared)."""


@dataclass(frozen=True)
class ScoreTurnEnd:
    """The silence that began at ``at_ms`` has lasted long enough to be worth judging: the end-of-turn model
    scores the turn up to it (the audio :class:`SilenceBegan` saw), fed back as ``TurnEndScored``."""

    item_id: str
    at_ms: float
    optional: bool = False
    """The turn can end without it (the default endpoint, which then waits plain silence): the shared model
    may refuse it when it has no CPU to spare. ``semantic_vad``'s scores are not optional."""
    start_ms: float = field(default=0.0, compare=False)
    """Where the turn's audio begins (its onset less the prefix padding; derived from the turn, not compared)."""


@dataclass(frozen=True)
class VoiceEnded:
    """Over a paused reply, the segment's loud stretch (the user's own voice) ended while the VAD still hears
    speech (the room's quieter talker): recognise that stretch primed, urgently, as at a :class:`SilenceBegan`,
    and feed it back as ``GuessTranscribed`` with only ``primed``."""

    item_id: str
    at_ms: float
    listen_span: tuple[float, float]


@dataclass(frozen=True)
class SpeechResumed:
    """Speech came back before the endpoint: speculative work for ``item_id`` is stale."""

    item_id: str


@dataclass(frozen=True)
class SegmentAbandoned:
    """``item_id`` was being spoken when turn detection was turned off or the client cleared the buffer: its
    partials, guesses and end-of-turn score stop (none of them can count any more)."""

    item_id: str


@dataclass(frozen=True)
class SpeechStopped:
    """Emit ``input_audio_buffer.speech_stopped`` (``told``: unless its ``speech_started`` was never told)."""

    item_id: str
    audio_end_ms: float
    told: bool = True


@dataclass(frozen=True)
class HoldReplyOutput:
    """A half-hop onset probe heard speech over the playing reply ``response_id``: stop sending its audio at once,
    keeping its place (nothing is dropped, and the client is told nothing); the main VAD grid confirms the stop by
    pausing the reply, or it is released (:class:`ReleaseReplyOutput`). See
    :mod:`~bargein.session.core.onset_hold`."""

    response_id: str
    probe_start_ms: float
    """Where the probe frame that heard the speech began (stream time), for the record."""


@dataclass(frozen=True)
class ReleaseReplyOutput:
    """The main grid did not confirm the hold of ``response_id``'s audio: send it on from where it was held."""

    response_id: str
