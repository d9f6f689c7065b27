"""How a server's sessions see: the vision mode, the model family the token math follows, the per-turn budget.

``notes`` (the default without ``--llm-url``): no image reaches the model; the offline scene reader's note does,
as quoted context. ``native`` (the default with ``--llm-url``): the turn's frames go as ``image_url`` parts,
each resized by the token math of the configured family so the turn stays within its image-token budget.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from PIL import Image

from bargein.see.frames import Frame
from bargein.see.tokens import Detail, Family, ImageCost, plan_turn

VisionMode = Literal["auto", "notes", "native"]
DEFAULT_IMAGE_TOKEN_BUDGET = 1280
"""Image tokens one turn may spend by default: one Qwen2.5-VL frame at its recommended cap, about 7 OpenAI
high-detail tiles, two LLaVA frames or five InternVL tiles."""
JPEG_QUALITY = 85


@dataclass(frozen=True)
class VisionSettings:
    """A server's vision settings (``--vision``, ``--vision-family``, ``--image-token-budget``)."""

    mode: Literal["notes", "native"] = "notes"
    family: Family = "qwen2.5-vl"
    image_token_budget: int = DEFAULT_IMAGE_TOKEN_BUDGET
    """The server's default; a session's ``image_token_budget`` overrides it."""
    detail: Detail = "auto"

    @classmethod
    def resolve(cls, mode: VisionMode, *, remote_llm: bool, family: Family = "qwen2.5-vl",
                budget: int = DEFAULT_IMAGE_TOKEN_BUDGET) -> VisionSettings:
        """``auto`` is ``native`` with a model behind ``--llm-url`` (images went there before seeing had a stage
        of its own), ``notes`` with the embedded text-only model."""
        chosen: Literal["notes", "native"] = ("native" if remote_llm else "notes") if mode == "auto" else mode
        return cls(chosen, family, budget)


@dataclass(frozen=True)
class SentImage:
    """A frame as a vision model gets it: the resized JPEG's data URL and the tokens it costs."""

    data_url: str
    cost: ImageCost


def images_for_turn(frames: tuple[Frame, ...], settings: VisionSettings, budget: int,
                    encode: Callable[[Frame, ImageCost], str] | None = None) -> list[SentImage]:
    """The turn's frames (oldest first) resized by the family's token math within ``budget``; frames the budget
    leaves no room for are left out (the newest has the first claim). ``encode``: how a frame becomes its data
    URL at its planned size (default :func:`encode_resized`; a session passes its cache of them)."""
    plan = plan_turn(settings.family, [(f.pixels.shape[1], f.pixels.shape[0]) for f in frames], budget,
                     settings.detail)
    encoder = encode or encode_resized
    return [SentImage(encoder(frame, cost), cost) for frame, cost in zip(frames, plan, strict=True)
            if cost is not None]


def encode_resized(frame: Frame, cost: ImageCost) -> str:
    """The frame resized to the size the model will see, as a JPEG data URL (the model's processor then does no
    resize of its own, so the tokens are what the math says)."""
    image = Image.fromarray(frame.pixels)
    if (image.width, image.height) != (cost.width, cost.height):
        image = image.resize((cost.width, cost.height), Image.Resampling.BICUBIC)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=JPEG_QUALITY)
    return "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode("ascii")
