"""What the duplex machine remembers about the turn being spoken and the live reply: plain records, no rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from bargein.session.core.endpointing import TurnEvidence
from bargein.session.core.voice_fade import VoiceFade


@dataclass
class Turn:
    """The user turn being spoken."""

    item_id: str
    onset_ms: float
    start_ms: float
    """Where its committed audio will begin: the prefix padding before the onset, never before audio that was
    already committed or cleared."""
    during_reply: bool
    silence_since_ms: float | None = None
    """Where its current silence began: where the voice faded to the room's level, or Silero's silence."""
    vad_silent_since_ms: float | None = None
    """Where Silero's probability fell under the offset threshold in this silence (the endpoint needs it)."""
    fade: VoiceFade = field(default_factory=VoiceFade)
    scored: bool = False
    """The end-of-turn model was asked about the current silence."""
    heard: TurnEvidence = field(default_factory=TurnEvidence)
    speech_ms: float = 0.0
    told: bool = True
    """The client has been told of its ``speech_started`` (confirm mode holds it back over a live reply)."""


@dataclass
class Reply:
    """The live reply: the only one whose output may reach the client."""

    response_id: str
    trigger: Literal["turn_detected", "client", "idle_timeout"] = "client"
    """What started it: a reply to the user's turn answers their words (none: nothing to answer; lost: say so)."""
    has_audio: bool = False
    paused: bool = False
    generation_done: bool = False
    playing_out: bool = False
    """Its words are all out: the client plays the last stretch (the ``ReplyPlayingOut`` event)."""

    @property
    def stage(self) -> ReplyStage:
        """Where the reply stands: ``thinking`` (no audio forwarded yet), ``speaking`` or ``paused``."""
        if self.paused:
            return "paused"
        return "speaking" if self.has_audio else "thinking"


ReplyStage = Literal["none", "thinking", "speaking", "paused"]
"""The live reply's stage (``none``: no reply is live), one column of the machine's phase table."""
