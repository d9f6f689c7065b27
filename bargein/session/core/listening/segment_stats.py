"""What the listening classifier measures of a segment while it is spoken: its VAD frames' statistics
(:class:`SegmentStats`) and the session's noise floor (:class:`NoiseFloor`). Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bargein.session.core.listening.thresholds import BACKGROUND_PROBABILITY, NOISE_FLOOR_RATE, NOISE_FLOOR_START_DB

SILENT_DB = -100.0
"""The level of a frame whose measure is not a finite number (as a frame without energy is reported)."""
MAX_LEVEL_FRAMES = 2000
"""Frame levels kept per segment: 64 s of Silero's 32 ms frames, every frame of the longest turn (``max_turn_ms``,
60 s, committed as it stands), so that no word of a long turn goes unplaced and counts as the room's (1,000
frames left the last 28 s of a 60 s turn to the room)."""


@dataclass
class SegmentStats:
    """Accumulates a segment's VAD frames: duration, speech share, confidence, level."""

    threshold: float = 0.5
    frames: int = 0
    speech_frames: int = 0
    probability_sum: float = 0.0
    peak_probability: float = 0.0
    speech_power_sum: float = 0.0
    speech_ms: float = 0.0
    offset_ms: float = 0.0
    """Where the segment's first frame lies in the clip the recogniser hears (its prefix padding)."""
    frame_ms: float = 0.0
    levels_db: list[float] = field(default_factory=list)
    """Each frame's level, for the level of each recognised word (at most :data:`MAX_LEVEL_FRAMES`)."""
    probabilities: list[float] = field(default_factory=list)
    """Each frame's speech probability, alongside ``levels_db``."""

    def add(self, probability: float, energy_db: float, frame_ms: float) -> None:
        """One VAD frame of the segment (a level or probability that is not a finite number counts as silence:
        one NaN would make the segment's level, the user's reference level and every later comparison NaN)."""
        if not math.isfinite(energy_db):
            energy_db = SILENT_DB
        if not math.isfinite(probability):
            probability = 0.0
        if len(self.levels_db) < MAX_LEVEL_FRAMES:
            self.levels_db.append(energy_db)
            self.probabilities.append(probability)
        self.frame_ms = frame_ms
        self.frames += 1
        self.probability_sum += probability
        self.peak_probability = max(self.peak_probability, probability)
        if probability >= self.threshold:
            self.speech_frames += 1
            self.speech_ms += frame_ms
            self.speech_power_sum += 10 ** (energy_db / 10)

    @property
    def mean_probability(self) -> float:
        """Average speech probability over the segment."""
        return self.probability_sum / self.frames if self.frames else 0.0

    @property
    def speech_level_db(self) -> float:
        """Mean power of the speech frames, in dBFS."""
        if not self.speech_frames:
            return -100.0
        return 10 * math.log10(max(self.speech_power_sum / self.speech_frames, 1e-10))


@dataclass
class NoiseFloor:
    """A slow estimate of the background level from frames the VAD calls silence.

    It starts as the running mean of the first background frames (a floor that crept up from -70 dBFS at
    the slow rate would take seconds, and meanwhile every sound would look loud), then follows slowly.
    """

    level_db: float = NOISE_FLOOR_START_DB
    rate: float = NOISE_FLOOR_RATE
    observed: int = 0

    def observe(self, probability: float, energy_db: float) -> None:
        """Track background frames only; a floor that followed speech would hide it."""
        # an infinite frame would hold the floor there
        if probability < BACKGROUND_PROBABILITY and -100 < energy_db < math.inf:
            self.observed += 1
            self.level_db += max(self.rate, 1 / self.observed) * (energy_db - self.level_db)
