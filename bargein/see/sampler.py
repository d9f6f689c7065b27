"""Which frames a session keeps: the newest at each user turn, at most a few a second while the user speaks.

VITA-style sampling of the frames a turn spans: a short turn keeps every frame that arrived at the speaking
rate (1.5 a second by default), a long one is thinned to a fixed number spread uniformly over it (when the
clip is full, every other frame goes and the rate halves), so a one-minute turn costs what a short one does.
Near-duplicates of the frame kept last (same scene, by perceptual hash) are dropped. Memory is bounded by
frames and by bytes, whatever the client sends.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from bargein.see.frames import Frame
from bargein.see.phash import near_duplicate


@dataclass(frozen=True)
class SamplerLimits:
    """A session's frame bounds and rate."""

    max_frames: int = 8
    """Frames one turn's clip may hold (and so a turn's prompt)."""
    max_bytes: int = 32 * 1024 * 1024
    """Pixel bytes the clip and the newest frame may hold together."""
    speaking_fps: float = 1.5
    """Frames a second kept while the user speaks (VITA samples 1-2)."""


class FrameSampler:
    """One session's frames: the newest (always), and the clip of the turn being spoken."""

    def __init__(self, limits: SamplerLimits | None = None) -> None:
        self.limits = limits or SamplerLimits()
        self.newest: Frame | None = None
        self.clip: list[Frame] = []
        self.speaking = False
        self.counts: Counter[str] = Counter()
        """What became of the frames offered: kept, duplicate, rate (arrived too soon), thinned."""
        self._interval_ms = 1000.0 / self.limits.speaking_fps

    @property
    def nbytes(self) -> int:
        """Pixel bytes held now."""
        held = sum(f.nbytes for f in self.clip)
        return held + (self.newest.nbytes if self.newest is not None and self.newest not in self.clip else 0)

    def offer(self, frame: Frame) -> str:
        """Take a frame if it is worth keeping; says what became of it (``kept``, ``duplicate``, ``rate``)."""
        if self.newest is not None and near_duplicate(self.newest.hash, frame.hash):
            self.counts["duplicate"] += 1
            return "duplicate"
        self.newest = frame
        outcome = "kept"
        if self.speaking:
            last = self.clip[-1] if self.clip else None
            if last is not None and frame.at_ms - last.at_ms < self._interval_ms:
                outcome = "rate"
            else:
                self.clip.append(frame)
        self.counts[outcome] += 1
        self._bound()
        return outcome

    def speech_started(self) -> None:
        """The user began a turn: its clip starts empty, at the full rate."""
        self.speaking = True
        self.clip = []
        self._interval_ms = 1000.0 / self.limits.speaking_fps

    def speech_stopped(self) -> None:
        """The user's turn ended: its clip waits for :meth:`take_turn`."""
        self.speaking = False

    def peek_turn(self) -> tuple[Frame, ...]:
        """The frames :meth:`take_turn` would give now, the clip left as it is (a speculative reply's prompt)."""
        frames = list(self.clip)
        if self.newest is not None and (not frames or frames[-1] is not self.newest):
            frames.append(self.newest)
        while len(frames) > self.limits.max_frames:
            frames = _thin(frames)
        return tuple(frames)

    def take_turn(self) -> tuple[Frame, ...]:
        """The frames of the turn just committed, oldest first, ending with the newest frame; the clip empties."""
        frames = self.peek_turn()
        self.clip = []
        return frames

    def _bound(self) -> None:
        """Thin the clip while it holds too many frames or bytes."""
        while len(self.clip) >= self.limits.max_frames or (self.nbytes > self.limits.max_bytes and len(self.clip) > 1):
            before = len(self.clip)
            self.clip = _thin(self.clip)
            self._interval_ms *= 2  # the thinned clip keeps one frame in two: keep taking them as sparsely
            self.counts["thinned"] += before - len(self.clip)
        if self.nbytes > self.limits.max_bytes:  # one frame over the bound on its own: keep only the newest
            self.clip = []


def _thin(frames: list[Frame]) -> list[Frame]:
    """Every other frame, always keeping the newest, so what is left still spans the turn uniformly."""
    kept = frames[::-1][::2][::-1]
    return kept if len(kept) < len(frames) else frames[1:]
