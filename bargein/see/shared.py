"""What every session of a server shares for seeing: the vision settings (and, with the scene reader, its pool)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bargein.see.vision import VisionSettings


@dataclass
class Seeing:
    """The ``see`` stage's shared part, carried on :class:`~bargein.engines.base.Engines` as ``see``."""

    settings: VisionSettings = field(default_factory=VisionSettings)
