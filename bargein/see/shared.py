"""What every session of a server shares for seeing: the vision settings and the scene reader's pool."""

from __future__ import annotations

from dataclasses import dataclass, field

from bargein.see.scene_pool import ScenePool
from bargein.see.vision import VisionSettings


@dataclass
class Seeing:
    """The ``see`` stage's shared part, carried on :class:`~bargein.engines.base.Engines` as ``see``."""

    settings: VisionSettings = field(default_factory=VisionSettings)
    pool: ScenePool | None = None
    """The offline scene reader (None: no scene notes, as with the fake engines)."""

    @classmethod
    def offline(cls, settings: VisionSettings) -> Seeing:
        """With the scene reader on the packaged OCR and face models, their files checked against their pins now
        (a missing or altered file stops start-up, as for the other models; they load at the first read)."""
        from bargein.see.detectors import PINNED, Detectors

        for pin in PINNED:
            pin.verified_path()
        return cls(settings, ScenePool(Detectors))
