"""The vocabulary of the duplex machine: the events it takes and the actions it returns.

All are small frozen dataclasses; the audio the machine does not read travels as an :class:`AudioPiece`.
Every event is named for what happened, every action for what the shell must do.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

from bargein.protocol.client_events import ResponseParams
from bargein.protocol.errors import ProtocolError
from bargein.session.core.endpointing import TextEndEstimate as TextEndEstimate
from bargein.session.core.endpointing import TurnEndScored as TurnEndScored
from bargein.session.core.listen_vocabulary import AwaitClassification as AwaitClassification
from bargein.session.core.listen_vocabulary import DiscardSegment as DiscardSegment
from bargein.session.core.listen_vocabulary import GuessTranscribed as GuessTranscribed
from bargein.session.core.listen_vocabulary import PartialTranscript as PartialTranscript
from bargein.session.core.listen_vocabulary import PrefetchReply as PrefetchReply
from bargein.session.core.listen_vocabulary import ReportSegment as ReportSegment
from bargein.session.core.listen_vocabulary import SegmentClassified as SegmentClassified
from bargein.session.core.listen_vocabulary import SegmentTranscribed as SegmentTranscribed
from bargein.session.core.reply_vocabulary import AudioPiece as AudioPiece
from bargein.session.core.reply_vocabulary import GenerateReply as GenerateReply
from bargein.session.core.reply_vocabulary import ReplyInputReady as ReplyInputReady
from bargein.session.core.reply_vocabulary import ReplyTruncated as ReplyTruncated
from bargein.session.core.reply_vocabulary import UserWords as UserWords
from bargein.session.core.settings import TurnSettings
from bargein.session.core.speech_vocabulary import HoldReplyOutput as HoldReplyOutput
from bargein.session.core.speech_vocabulary import ReleaseReplyOutput as ReleaseReplyOutput
from bargein.session.core.speech_vocabulary import ScoreTurnEnd as ScoreTurnEnd
from bargein.session.core.speech_vocabulary import SegmentAbandoned as SegmentAbandoned
from bargein.session.core.speech_vocabulary import SilenceBegan as SilenceBegan
from bargein.session.core.speech_vocabulary import SpeechAnnounced as SpeechAnnounced
from bargein.session.core.speech_vocabulary import SpeechResumed as SpeechResumed
from bargein.session.core.speech_vocabulary import SpeechStarted as SpeechStarted
from bargein.session.core.speech_vocabulary import SpeechStopped as SpeechStopped
from bargein.session.core.speech_vocabulary import VoiceEnded as VoiceEnded
from bargein.session.core.tool_wait import ToolWait as ToolWait
from bargein.session.core.work_vocabulary import ArmClosedPlaybackTimer as ArmClosedPlaybackTimer
from bargein.session.core.work_vocabulary import ArmPlayOutTimer as ArmPlayOutTimer
from bargein.session.core.work_vocabulary import ClosedPlaybackTimerFired as ClosedPlaybackTimerFired
from bargein.session.core.work_vocabulary import ClosedReplyCut as ClosedReplyCut
from bargein.session.core.work_vocabulary import ClosedReplyPlaying as ClosedReplyPlaying
from bargein.session.core.work_vocabulary import ClosedReplySent as ClosedReplySent
from bargein.session.core.work_vocabulary import ClosedReplyTruncated as ClosedReplyTruncated
from bargein.session.core.work_vocabulary import PlayOutTimerFired as PlayOutTimerFired
from bargein.session.core.work_vocabulary import RecognisePartial as RecognisePartial
from bargein.session.core.work_vocabulary import ReplyHeard as ReplyHeard
from bargein.session.core.work_vocabulary import ReportPartial as ReportPartial
from bargein.session.core.work_vocabulary import SessionClosing as SessionClosing
from bargein.session.core.work_vocabulary import WarmPrompt as WarmPrompt


class Phase(enum.Enum):
    """Where the conversation is, seen from both sides at once."""

    LISTENING = "listening"
    USER_SPEAKING = "user_speaking"
    THINKING = "thinking"
    AGENT_SPEAKING = "agent_speaking"
    PAUSED = "paused"
    """The user talked over the reply; it waits for the listening decision."""
    AWAITING_TOOL = "awaiting_tool"  # a client function's output is owed and nothing else is happening


# --- events (inputs) ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class VadFrame:
    """Speech probability of the input audio between ``start_ms`` and ``end_ms`` (stream time)."""

    start_ms: float
    end_ms: float
    probability: float
    energy_db: float = -100.0
    """Frame level in dBFS, for the listening classifier (the machine itself ignores it)."""


@dataclass(frozen=True)
class OnsetProbe:
    """A second VAD stream's frame, on the grid offset by half a frame (its end falls midway between two
    :class:`VadFrame` ends), run while a reply is live: a second, sooner chance to hear a barge-in's onset. It
    begins no turn: over a playing reply it only holds the reply's audio until the main frames confirm the
    barge-in or not (:mod:`~bargein.session.core.onset_hold`); the turn's onset, speech, silence and end stay the
    main frames'."""

    start_ms: float
    end_ms: float
    probability: float


@dataclass(frozen=True)
class ClientCommit:
    """``input_audio_buffer.commit`` with ``buffered_ms`` of audio in the buffer."""

    buffered_ms: float
    event_id: str | None = None


@dataclass(frozen=True)
class ClientClear:
    """``input_audio_buffer.clear``."""


@dataclass(frozen=True)
class ClientResponseCreate:
    """``response.create``, with the client's per-response parameters (they travel with the reply)."""

    event_id: str | None = None
    params: ResponseParams | None = None


@dataclass(frozen=True)
class ClientResponseCancel:
    """``response.cancel``, optionally naming the response."""

    response_id: str | None = None
    event_id: str | None = None


@dataclass(frozen=True)
class ReplyAudio:
    """A reply produced a chunk of audio (the machine never reads the ``payload``)."""

    response_id: str
    payload: AudioPiece


@dataclass(frozen=True)
class ReplyText:
    """A reply produced a piece of text (its transcript, or its text output)."""

    response_id: str
    text: str


@dataclass(frozen=True)
class AudioAppended:
    """Client audio was appended and its VAD frames fed; the newest sample is at ``stream_ms``."""

    stream_ms: float


@dataclass(frozen=True)
class ReplyPlayingOut:
    """Every word of a spoken reply is out; the client still plays the audio pacing sent ahead of it. Speech now
    pauses the reply as before (a cough resumes it from the cut), but is judged as a turn after the reply: an
    overlapping "yes" answers the agent rather than acknowledging it."""

    response_id: str


@dataclass(frozen=True)
class ReplyFinished:
    """A reply ended by itself: generated, and (a spoken one) played by the client as far as the server waits for."""

    response_id: str
    failed: bool = False


@dataclass(frozen=True)
class IdleTimerFired:
    """The idle timer armed by :class:`ArmIdleTimer` ran out at stream time ``at_ms``."""

    at_ms: float


@dataclass(frozen=True)
class SettingsChanged:
    """``session.update`` changed turn detection or output (manual turns: :meth:`TurnSettings.manual`)."""

    settings: TurnSettings


@dataclass(frozen=True)
class PauseTimerFired:
    """The false-interruption timer of a paused reply ran out."""

    response_id: str


Event = (VadFrame | OnsetProbe | AudioAppended | ClientCommit | ClientClear | ClientResponseCreate
         | ClientResponseCancel | ReplyAudio | ReplyText | ReplyPlayingOut | ReplyFinished | IdleTimerFired
         | SettingsChanged
         | SegmentClassified | SegmentTranscribed | GuessTranscribed | PartialTranscript | PauseTimerFired
         | TurnEndScored | TextEndEstimate | ToolWait | PlayOutTimerFired | ReplyInputReady | ReplyTruncated
         | ClosedReplyPlaying
         | ClosedReplySent | ClosedReplyCut | ClosedReplyTruncated | ClosedPlaybackTimerFired | SessionClosing)


# --- actions (outputs) --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommitBuffer:
    """Turn input audio into user item ``item_id``: from ``start_ms`` (``None``: buffer start) to ``end_ms``."""

    item_id: str
    start_ms: float | None
    end_ms: float | None
    event_id: str | None = None
    listen_span: tuple[float, float] | None = None
    """A turn over the agent's reply: the stretch (stream ms) of the user's own voice, which the shell
    recognises a second time primed with the language's vocabulary of commands and acknowledgements
    (:mod:`bargein.session.core.listening.over_reply`) and feeds back as ``SegmentTranscribed.primed``."""
    urgent: bool = False
    """A paused reply waits for the verdict: recognitions not already done are served before other work."""


@dataclass(frozen=True)
class ClearBuffer:
    """Drop buffered input audio and emit ``input_audio_buffer.cleared``."""


@dataclass(frozen=True)
class StartReply:
    """Create response ``response_id`` (trigger: the VAD endpoint, the client or the idle timer).

    ``params`` are the client's ``response.create`` parameters, for this reply only.
    """

    response_id: str
    trigger: Literal["turn_detected", "client", "idle_timeout"]
    params: ResponseParams | None = None


@dataclass(frozen=True)
class CancelReply:
    """Stop every stage of ``response_id`` and emit its ``response.done`` with status ``cancelled``."""

    response_id: str
    reason: Literal["turn_detected", "client_cancelled"]


@dataclass(frozen=True)
class ForwardAudio:
    """Send this chunk of the active reply to the client."""

    response_id: str
    payload: AudioPiece


@dataclass(frozen=True)
class DropAudio:
    """A chunk of a reply that is no longer active: never sent."""

    response_id: str


@dataclass(frozen=True)
class ForwardText:
    """Send this text of the active reply to the client."""

    response_id: str
    text: str


@dataclass(frozen=True)
class HoldText:
    """Text of a paused reply: keep it, in order with its audio, until the reply resumes or is cancelled."""

    response_id: str
    text: str


@dataclass(frozen=True)
class DropText:
    """Text of a reply that is no longer active: never sent."""

    response_id: str


@dataclass(frozen=True)
class TrimBuffer:
    """Forget buffered input audio before stream time ``before_ms`` (no turn needs it)."""

    before_ms: float


@dataclass(frozen=True)
class CompleteReply:
    """Emit the reply's closing events and ``response.done`` (completed or failed)."""

    response_id: str
    status: Literal["completed", "failed"]


@dataclass(frozen=True)
class ArmIdleTimer:
    """Fire :class:`IdleTimerFired` after ``delay_ms`` of no speech (re-arming replaces the old timer)."""

    delay_ms: int


@dataclass(frozen=True)
class DisarmIdleTimer:
    """Cancel a pending idle timer."""


@dataclass(frozen=True)
class IdleTimeout:
    """Emit ``input_audio_buffer.timeout_triggered`` for an empty turn ``item_id``."""

    item_id: str
    audio_start_ms: float
    audio_end_ms: float


@dataclass(frozen=True)
class Reject:
    """Answer a client event with an ``error`` event; nothing else changes."""

    error: ProtocolError


@dataclass(frozen=True)
class PauseReply:
    """Stop sending the reply at once and remember where the client's playback stands."""

    response_id: str
    item_id: str
    """The segment that paused it."""


@dataclass(frozen=True)
class HoldAudio:
    """Audio of a paused reply: keep it, in order, until the reply resumes or is cancelled."""

    response_id: str
    payload: AudioPiece


@dataclass(frozen=True)
class ResumeReply:
    """The pause was a false interruption: continue the reply from the cut point."""

    response_id: str


@dataclass(frozen=True)
class ArmPauseTimer:
    """Fire :class:`PauseTimerFired` after ``delay_ms`` unless the pause is decided first."""

    response_id: str
    delay_ms: int


@dataclass(frozen=True)
class ModeChanged:
    """The storm guard switched the session between ``normal`` and ``confirm`` mode."""

    mode: Literal["normal", "confirm"]
    reason: str


Action = (SpeechStarted | SpeechAnnounced | SilenceBegan | ScoreTurnEnd | VoiceEnded | SpeechResumed
          | SegmentAbandoned | SpeechStopped | CommitBuffer | ClearBuffer | TrimBuffer | StartReply | CancelReply
          | ForwardAudio | DropAudio | ForwardText | HoldText | DropText | CompleteReply | ArmIdleTimer
          | DisarmIdleTimer | IdleTimeout | Reject | PauseReply | HoldAudio | ResumeReply | ArmPauseTimer
          | AwaitClassification | ReportSegment | DiscardSegment | PrefetchReply | ModeChanged | ArmPlayOutTimer
          | GenerateReply | RecognisePartial | ReportPartial | WarmPrompt | ArmClosedPlaybackTimer | ReplyHeard
          | HoldReplyOutput | ReleaseReplyOutput)
