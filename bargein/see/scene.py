"""The scene note: a short factual line about a frame, from OCR, a face count and plain image statistics.

``text on screen: 'PLATFORM 4 Zurich 14:32'; one face; dim light; mostly blue and white; little motion``. It says
only what the detectors found (no guess at objects or people), so the model that reads it cannot be led to
invent; with no text it says ``no text in view``, so "what does it say?" gets an honest answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from bargein.see.detectors import TextLine
from bargein.see.frames import Frame
from bargein.see.phash import grey, shrink

MAX_NOTE_TEXT = 300
"""Characters of read text a note quotes (a page of small print is summarised by its first lines)."""
DIM_BELOW, BRIGHT_ABOVE = 70.0, 190.0
"""Mean luma (0-255) under which the light is called dim, over which bright."""
MOTION_LEVELS = ((3.0, "little motion"), (12.0, "some motion"))
"""Mean absolute grey-level change between consecutive frames (at 64 x 48) under which each word applies;
above the last, ``much motion``."""
HUES = ((15, "red"), (40, "orange"), (70, "yellow"), (160, "green"), (200, "cyan"), (260, "blue"),
        (300, "purple"), (340, "pink"), (360, "red"))
"""Upper hue bound (degrees) of each colour name."""
COLOUR_SHARE = 0.15
"""A colour is named when at least this share of the frame has it."""


class SceneDetectors(Protocol):
    """What the reader needs of the models (:class:`~bargein.see.detectors.Detectors`)."""

    def read_text(self, pixels: npt.NDArray[np.uint8]) -> list[TextLine]:
        """Lines of text, top to bottom."""

    def count_faces(self, pixels: npt.NDArray[np.uint8]) -> int:
        """Frontal faces."""

    def begin(self) -> None:
        """A new read begins (in the reader's thread): a stop told before it does not apply to it."""

    def stop(self) -> None:
        """Stop the read running now, from another thread (it raises
        :class:`~bargein.see.detectors.ReadStopped`); detectors that cannot stop a read do nothing."""


@dataclass(frozen=True)
class SceneNote:
    """What the reader found in one frame, and the frame's stream time."""

    text: tuple[str, ...]
    faces: int
    light: str
    colours: tuple[str, ...]
    motion: str | None
    frame_at_ms: float

    def line(self) -> str:
        """The note as one line for the model and the page."""
        words = " ".join(self.text)
        if len(words) > MAX_NOTE_TEXT:
            words = words[:MAX_NOTE_TEXT].rsplit(" ", 1)[0] + " ..."
        parts = [f"text on screen: '{words}'" if words else "no text in view"]
        parts.append({0: "no face", 1: "one face"}.get(self.faces, f"{self.faces} faces"))
        parts.append(self.light)
        if self.colours:
            parts.append("mostly " + " and ".join(self.colours))
        if self.motion is not None:
            parts.append(self.motion)
        return "; ".join(parts)


def read_scene(frame: Frame, previous: Frame | None, detectors: SceneDetectors) -> SceneNote:
    """The note of ``frame`` (``previous``: the frame before it, for motion). Blocking: run it off the loop."""
    pixels = frame.pixels
    lines = detectors.read_text(pixels)
    return SceneNote(tuple(line.text for line in lines), detectors.count_faces(pixels), light_of(pixels),
                     dominant_colours(pixels), motion_between(previous.pixels, pixels) if previous else None,
                     frame.at_ms)


def light_of(pixels: npt.NDArray[np.uint8]) -> str:
    """``dim light``, ``bright light`` or ``even light`` by the frame's mean luma."""
    mean = float(grey(pixels[::4, ::4]).mean())
    return "dim light" if mean < DIM_BELOW else "bright light" if mean > BRIGHT_ABOVE else "even light"


def dominant_colours(pixels: npt.NDArray[np.uint8]) -> tuple[str, ...]:
    """The colour names covering at least :data:`COLOUR_SHARE` of the frame, most first (at most two)."""
    rgb = pixels[::4, ::4, :3].reshape(-1, 3).astype(np.float32) / 255.0
    top, bottom = rgb.max(axis=1), rgb.min(axis=1)
    saturation = np.where(top > 0, (top - bottom) / np.maximum(top, 1e-6), 0.0)
    names = np.full(len(rgb), "grey", dtype=object)
    names[top < 0.2] = "black"
    names[(top >= 0.8) & (saturation < 0.15)] = "white"
    chromatic = (saturation >= 0.3) & (top >= 0.2)
    hue = _hue_degrees(rgb[chromatic], top[chromatic], bottom[chromatic])
    bounds = np.array([bound for bound, _ in HUES])
    names[chromatic] = np.array([name for _, name in HUES], dtype=object)[np.searchsorted(bounds, hue, side="right")
                                                                          .clip(0, len(HUES) - 1)]
    labels, counts = np.unique(names.astype(str), return_counts=True)
    ranked = sorted(zip(counts.tolist(), labels.tolist(), strict=True), reverse=True)
    return tuple(name for count, name in ranked[:2] if count >= COLOUR_SHARE * len(rgb))


def _hue_degrees(rgb: npt.NDArray[np.float32], top: npt.NDArray[np.float32],
                 bottom: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Hue in degrees [0, 360) of chromatic pixels."""
    span = np.maximum(top - bottom, 1e-6)
    r, g, b = rgb[:, 0], rgb[:, 1], rgb[:, 2]
    hue = np.where(top == r, ((g - b) / span) % 6, np.where(top == g, (b - r) / span + 2, (r - g) / span + 4))
    result: npt.NDArray[np.float32] = (hue * 60.0).astype(np.float32)
    return result


def motion_between(before: npt.NDArray[np.uint8], after: npt.NDArray[np.uint8]) -> str:
    """How much changed between two frames, in words (:data:`MOTION_LEVELS`)."""
    change = float(np.abs(shrink(grey(after), 64, 48) - shrink(grey(before), 64, 48)).mean())
    return next((word for bound, word in MOTION_LEVELS if change < bound), "much motion")
