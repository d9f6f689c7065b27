"""Where the voice of the turn being spoken fell to the room's level: the true start of its silence.

Silero's speech probability decays slowly after the voice stops: on the LibriVox clips of the first-audio
benchmark it stays above the offset threshold for 90 to 280 ms after the speech's energy fell to the room's
level (a fading vowel, breath), and every endpoint silence used to be counted from there. A frame within
:data:`QUIET_ABOVE_FLOOR_DB` of the noise floor is not the voice whatever the probability says, as long as the
turn's voice stands clearly above the room (:data:`CLEAR_VOICE_DB`; in a noisy room the energy says nothing
and the probability alone decides). Pure code, fed one VAD frame at a time by the duplex machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

QUIET_ABOVE_FLOOR_DB = 12.0
"""A frame less than this far above the noise floor is the room's level, not the voice (the first-audio
benchmark finds the end of speech offline the same way, on 10 ms frames)."""
CLEAR_VOICE_DB = 30.0
"""The energy counts only in a turn whose loudest voiced frame stood this far above the floor: the quiet line
then lies at least 18 dB under the voice's peak."""
FADE_START_MS = 96.0
"""A quiet stretch this long begins the turn's silence (backdated to its start) though Silero still hears
speech: speculative recognition and the end-of-turn score start there. A shorter one (a stop consonant, a
gap between words) begins nothing."""
MAX_BACKDATE_MS = 256.0
"""Silero still calling a frame speech this far into a quiet stretch makes the stretch soft speech, not a fade:
the voice again until the next frame above the quiet line. The endpoint, which needs Silero to agree, also
never counts its silence from further back than this before Silero's offset."""


@dataclass
class VoiceFade:
    """The turn's loudest voiced level and the stretch of quiet frames it is in, if any."""

    peak_db: float = -math.inf
    quiet_since_ms: float | None = None
    soft: bool = False
    """The current stretch under the quiet line is soft speech (Silero heard it too long): no fade in it."""

    def frame(self, start_ms: float, energy_db: float, floor_db: float, *, voiced: bool) -> None:
        """One VAD frame of the turn; ``voiced``: Silero calls it speech."""
        if voiced:
            self.peak_db = max(self.peak_db, energy_db)
        if self.peak_db - floor_db < CLEAR_VOICE_DB or energy_db >= floor_db + QUIET_ABOVE_FLOOR_DB:
            self.quiet_since_ms, self.soft = None, False
        elif self.soft:
            pass
        elif self.quiet_since_ms is None:
            self.quiet_since_ms = start_ms
        elif voiced and start_ms - self.quiet_since_ms >= MAX_BACKDATE_MS:
            self.quiet_since_ms, self.soft = None, True

    @property
    def quiet(self) -> bool:
        """The frame just fed belongs to a fade: at the room's level in a turn whose voice is clear of it."""
        return self.quiet_since_ms is not None

    def faded(self, end_ms: float) -> bool:
        """The voice has been at the room's level for :data:`FADE_START_MS` up to ``end_ms``."""
        return self.quiet_since_ms is not None and end_ms - self.quiet_since_ms >= FADE_START_MS


def silence_counted_from(silence_since_ms: float, vad_silent_since_ms: float | None) -> float | None:
    """Where the endpoint counts the turn's silence from: its start (the fade, or Silero's own silence), held to
    :data:`MAX_BACKDATE_MS` before Silero agreed; ``None`` while Silero still hears speech (no endpoint then)."""
    if vad_silent_since_ms is None:
        return None
    return max(silence_since_ms, vad_silent_since_ms - MAX_BACKDATE_MS)
