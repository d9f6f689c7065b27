"""What the duplex machine needs to know about turn-taking, grouped by concern, with documented defaults.

The session's ``turn_detection`` (``server_vad``, ``semantic_vad`` or ``null``) is translated into one
:class:`TurnSettings`. Manual turns are an explicit mode (:meth:`TurnSettings.manual`), not a missing value:
the VAD still runs (its frames keep stream time) but only the client commits and creates responses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from bargein.protocol.session_config import SemanticVad, ServerVad, SessionConfig
from bargein.session.core.endpointing import EAGERNESS_SILENCE_MS, TieredPreset, TurnEvidence, endpoint_silence_ms

Eagerness = Literal["low", "medium", "high", "auto"]
PARTIAL_EVERY_MS = 1000
"""How often a session's turn being spoken is recognised, at most (and never twice at once)."""
PLAYOUT_WAIT_MS = 2000
"""How long a session's reply whose words are all out stays live while the client plays it (the default output lead
is 1 s; a client that stops reading, or a longer lead, ends it before its playback does)."""


@dataclass(frozen=True)
class Endpointing:
    """When a user turn starts and ends."""

    threshold: float = 0.5
    """Speech probability at which a turn starts (it ends below ``threshold - 0.15``)."""
    prefix_padding_ms: int = 300
    """Audio kept before the onset in the committed item."""
    silence_duration_ms: int = 500
    """Silence that ends a turn (``server_vad``)."""
    max_turn_ms: int = 60_000
    """A turn that has gone on this long without an endpoint is committed as it stands (and the next speech
    begins a new one). A television or a fan the VAD hears as endless speech would otherwise hold one turn
    open until the input buffer is full, after which every append is refused and the session hears nothing."""
    voice_fade: bool = True
    """Count a turn's silence from where the voice fell to the room's level (:mod:`~bargein.session.core.voice_fade`)
    rather than from where Silero's slowly decaying probability fell under the offset threshold."""
    eagerness: Eagerness | None = None
    """Set for ``semantic_vad``: the endpoint silence then follows the end-of-turn model and the words."""
    tiers: TieredPreset | None = None
    """Set for the default endpoint (``server_vad`` whose client has not set ``silence_duration_ms``, on a
    server with the end-of-turn model that has not chosen plain silence): ``silence_duration_ms`` unless the model
    and the words agree."""

    @property
    def scores(self) -> bool:
        """True when a silence (of :attr:`score_after_ms` or more) asks the end-of-turn model for its score."""
        return self.eagerness is not None or self.tiers is not None

    @property
    def score_after_ms(self) -> int:
        """How long a silence lasts before the end-of-turn model is asked about it (the tiers' wait;
        ``semantic_vad`` asks at once, since its short silence is shorter than a score takes)."""
        return self.tiers.score_after_ms if self.tiers is not None and self.eagerness is None else 0

    def silence_ms(self, evidence: TurnEvidence, *, confirm: bool) -> int:
        """The silence that ends the current turn, as the evidence heard so far says."""
        return endpoint_silence_ms(self.silence_duration_ms, eagerness=self.eagerness, tiers=self.tiers,
                                   evidence=evidence, confirm=confirm)


@dataclass(frozen=True)
class Interruption:
    """What speech over a reply does to it."""

    enabled: bool = True
    """``interrupt_response``: speech over a reply pauses it (and a query then cancels it)."""
    false_interruption_timeout_ms: int = 2000
    """A paused reply resumes if no query is recognised this long after the segment ends."""
    confirm_query_ms: int = 600
    """In confirm mode, speech must last this long before it may pause a reply."""
    half_hop_onset: bool = True
    """While a reply is live, a second VAD stream offset by half a frame (:class:`~bargein.session.core.vocabulary.
    OnsetProbe`) may hold the reply's audio at once, provisionally, until the main grid's onset pauses it or not
    (:mod:`~bargein.session.core.onset_hold`): the onset, the segments and the verdicts stay the main grid's. On: over
    WebRTC the stop's p99 met 60 ms in 3 of 4 runs (1 of 4 off), the held-out listening set unchanged within its
    noise (docs/results/2026-12-05-webrtc-stop.md)."""
    playout_wait_ms: int | None = None
    """A reply whose words are all out stays live at most this long (pauses not counted) while the client plays
    the audio pacing sent ahead, so speech there still pauses it (:mod:`~bargein.session.core.play_out`); every
    session has :data:`PLAYOUT_WAIT_MS`. ``None`` (a bare ``TurnSettings``, as scripted timelines use): no timer, the
    reply waits for the shell's report that its last sample was played."""


@dataclass(frozen=True)
class Listening:
    """The listening classifier and the storm guard."""

    classify: bool = True
    """Classify each segment (query or noise) before answering it or cutting a reply for it."""
    storm_barge_ins: int = 3
    """Barge-ins within ``storm_window_ms`` that switch the session into confirm mode."""
    storm_window_ms: int = 10_000
    """The storm guard's window, and the calm period that ends confirm mode."""


@dataclass(frozen=True)
class Speculation:
    """Work started before the endpoint confirms a turn."""

    prefetch_reply: bool = True
    """Start the reply's LLM privately when speculative recognition of a turn reads as a query."""
    partial_every_ms: int | None = None
    """Recognise the turn being spoken at most this often (:mod:`~bargein.session.core.partials`), and report its
    words so far (the partials' and the guess's) to the client; every session has :data:`PARTIAL_EVERY_MS`.
    ``None`` (a bare ``TurnSettings``, as scripted timelines use): no partials, no words reported before the commit."""


@dataclass(frozen=True)
class TurnSettings:
    """Everything the duplex machine decides with."""

    mode: Literal["vad", "manual"] = "vad"
    """``manual``: no VAD turns, no automatic replies; the client commits and creates responses."""
    create_response: bool = True
    """A detected turn gets an automatic reply."""
    idle_timeout_ms: int | None = None
    """After a reply, this much silence fires ``timeout_triggered`` and a reply (``None``: never)."""
    endpointing: Endpointing = field(default_factory=Endpointing)
    interruption: Interruption = field(default_factory=Interruption)
    listening: Listening = field(default_factory=Listening)
    speculation: Speculation = field(default_factory=Speculation)

    @classmethod
    def manual(cls) -> TurnSettings:
        """Manual turns (``turn_detection: null``)."""
        return cls(mode="manual", create_response=False, interruption=Interruption(playout_wait_ms=PLAYOUT_WAIT_MS))

    @property
    def vad(self) -> bool:
        """True when the VAD detects turns."""
        return self.mode == "vad"

    @property
    def idle_prompt_ms(self) -> int:
        """The idle prompt's delay; 0 when there is none (no ``idle_timeout_ms``, or manual turns)."""
        return (self.idle_timeout_ms or 0) if self.vad else 0

    @property
    def buffer_keep_ms(self) -> int:
        """Idle input audio kept in VAD mode: enough for the next onset's prefix padding."""
        return max(self.endpointing.prefix_padding_ms, 500)


def settings_from_config(config: SessionConfig, *, listen: bool = True,
                         tiers: TieredPreset | None = None) -> TurnSettings:
    """The machine's view of a session's ``turn_detection`` and output (``listen``: the server's switch;
    ``tiers``: the tiered endpoint ``server_vad`` follows, where the session may have it)."""
    detection = config.audio.input.turn_detection
    listening = Listening(classify=listen)
    answers = config.type == "realtime"  # a transcription session transcribes turns and never replies
    speculation = Speculation(prefetch_reply=answers and "audio" in config.output_modalities,
                              partial_every_ms=PARTIAL_EVERY_MS)
    if isinstance(detection, ServerVad):
        return TurnSettings(
            create_response=detection.create_response and answers, idle_timeout_ms=detection.idle_timeout_ms,
            endpointing=Endpointing(detection.threshold, detection.prefix_padding_ms, detection.silence_duration_ms,
                                    tiers=tiers),
            interruption=Interruption(enabled=detection.interrupt_response, playout_wait_ms=PLAYOUT_WAIT_MS),
            listening=listening,
            speculation=speculation)
    if isinstance(detection, SemanticVad):
        return TurnSettings(
            create_response=detection.create_response and answers,
            endpointing=Endpointing(silence_duration_ms=EAGERNESS_SILENCE_MS[detection.eagerness],
                                    eagerness=detection.eagerness),
            interruption=Interruption(enabled=detection.interrupt_response, playout_wait_ms=PLAYOUT_WAIT_MS),
            listening=listening,
            speculation=speculation)
    return TurnSettings.manual()


def plain_silence_after(patch: Mapping[str, Any], before: bool) -> bool:
    """Whether ``server_vad`` means plain silence after a ``session.update`` ``patch``: once the client sets
    ``silence_duration_ms`` it does, until it sets another kind of turn detection (or none); a patch that
    leaves turn detection alone changes nothing."""
    audio = patch.get("audio")
    section = audio.get("input") if isinstance(audio, Mapping) else None
    if not isinstance(section, Mapping) or "turn_detection" not in section:
        return before
    detection = section["turn_detection"]
    if not isinstance(detection, Mapping) or detection.get("type", "server_vad") != "server_vad":
        return False
    return before or "silence_duration_ms" in detection
