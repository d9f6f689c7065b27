"""Image-token math: what one image costs a vision model, and the resize that keeps a turn within its budget.

Pure functions of sizes, no pixels. Four families, each as its own processor resizes:

- ``qwen2.5-vl``: dynamic resolution. Each side is rounded to a multiple of 28 (a 2 x 2 merge of 14-px patches is
  one token), then if the area is outside ``[min_pixels, max_pixels]`` both sides are scaled by one factor (the
  aspect kept) and floored (too large) or ceiled (too small) to multiples of 28. Tokens = (h / 28) * (w / 28).
- ``openai``: the tile rule of GPT-4o-class models. ``detail: low``: 85 tokens whatever the size. ``high`` (and
  ``auto``, which bargein sends as high): fit within 2048 x 2048, then scale down so the shortest side is at most
  768, then 85 + 170 per 512-px tile the image covers.
- ``llava``: a fixed-token encoder (LLaVA-1.5's CLIP ViT-L/14 at 336 px): always 576 tokens, resized to 336 x 336.
- ``internvl``: 448-px tiling (InternVL 1.5-2.5, VITA): the grid of tiles (columns x rows, 1 to ``max_tiles``) whose
  aspect is closest to the image's, ties going to the larger grid when the image covers more than half of it; a
  448-px thumbnail is added when there is more than one tile; 256 tokens a tile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Family = Literal["qwen2.5-vl", "openai", "llava", "internvl"]
FAMILIES: tuple[Family, ...] = ("qwen2.5-vl", "openai", "llava", "internvl")
Detail = Literal["low", "high", "auto"]

QWEN_BLOCK = 28
QWEN_MIN_PIXELS = 4 * QWEN_BLOCK * QWEN_BLOCK  # 3136: the processor's default
QWEN_MAX_PIXELS = 1280 * QWEN_BLOCK * QWEN_BLOCK  # 1003520: the model card's recommended cap (1280 tokens)
OPENAI_BASE, OPENAI_TILE, OPENAI_TILE_PX = 85, 170, 512
OPENAI_FIT_PX, OPENAI_SHORT_PX = 2048, 768
LLAVA_TOKENS, LLAVA_PX = 576, 336
INTERNVL_TILE_PX, INTERNVL_TILE_TOKENS, INTERNVL_MAX_TILES = 448, 256, 12


@dataclass(frozen=True)
class ImageCost:
    """What one image becomes for a model: the size it is resized to and the tokens it then costs."""

    width: int
    height: int
    tokens: int


def qwen_resize(width: int, height: int, *, min_pixels: int = QWEN_MIN_PIXELS,
                max_pixels: int = QWEN_MAX_PIXELS) -> ImageCost:
    """Qwen2.5-VL's ``smart_resize``: sides in multiples of 28, area clamped to [min_pixels, max_pixels]."""
    block = QWEN_BLOCK
    h = max(block, round(height / block) * block)
    w = max(block, round(width / block) * block)
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(block, math.floor(height / beta / block) * block)
        w = max(block, math.floor(width / beta / block) * block)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / block) * block
        w = math.ceil(width * beta / block) * block
    return ImageCost(w, h, (h // block) * (w // block))


def openai_resize(width: int, height: int, detail: Detail = "auto") -> ImageCost:
    """OpenAI's tile rule; ``low`` is 85 tokens at 512 x 512 at most."""
    if detail == "low":
        scale = min(1.0, OPENAI_TILE_PX / max(width, height))
        return ImageCost(max(1, round(width * scale)), max(1, round(height * scale)), OPENAI_BASE)
    scale = min(1.0, OPENAI_FIT_PX / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, OPENAI_SHORT_PX / min(w, h))
    w, h = round(w * scale), round(h * scale)
    tiles = math.ceil(w / OPENAI_TILE_PX) * math.ceil(h / OPENAI_TILE_PX)
    return ImageCost(w, h, OPENAI_BASE + OPENAI_TILE * tiles)


def llava_resize(width: int, height: int) -> ImageCost:
    """A fixed-token encoder: 336 x 336, 576 tokens, whatever came in."""
    del width, height  # the encoder sees a square of its own size whatever the image
    return ImageCost(LLAVA_PX, LLAVA_PX, LLAVA_TOKENS)


def internvl_grid(width: int, height: int, max_tiles: int = INTERNVL_MAX_TILES) -> tuple[int, int]:
    """The (columns, rows) of 448-px tiles InternVL's dynamic preprocessing picks for an image."""
    aspect = width / height
    grids = sorted({(c, r) for n in range(1, max_tiles + 1) for c in range(1, n + 1) for r in range(1, n + 1)
                    if c * r <= max_tiles}, key=lambda g: g[0] * g[1])
    best, best_diff = (1, 1), math.inf
    area = width * height
    for columns, rows in grids:
        diff = abs(aspect - columns / rows)
        if diff < best_diff:
            best, best_diff = (columns, rows), diff
        elif diff == best_diff and area > 0.5 * INTERNVL_TILE_PX * INTERNVL_TILE_PX * columns * rows:
            best = (columns, rows)
    return best


def internvl_resize(width: int, height: int, max_tiles: int = INTERNVL_MAX_TILES) -> ImageCost:
    """InternVL/VITA 448-px tiling: the tiled size, and 256 tokens a tile plus the thumbnail's."""
    columns, rows = internvl_grid(width, height, max_tiles)
    tiles = columns * rows + (1 if columns * rows > 1 else 0)
    return ImageCost(columns * INTERNVL_TILE_PX, rows * INTERNVL_TILE_PX, tiles * INTERNVL_TILE_TOKENS)


def image_cost(family: Family, width: int, height: int, detail: Detail = "auto") -> ImageCost:
    """What an image costs a model of ``family`` at its default settings."""
    match family:
        case "qwen2.5-vl":
            return qwen_resize(width, height)
        case "openai":
            return openai_resize(width, height, detail)
        case "llava":
            return llava_resize(width, height)
        case "internvl":
            return internvl_resize(width, height)


def fit_image(family: Family, width: int, height: int, budget: int, detail: Detail = "auto") -> ImageCost | None:
    """The largest resize of an image that costs at most ``budget`` tokens, or None if even the smallest costs more.

    Qwen: ``max_pixels`` lowered to ``budget`` blocks. OpenAI: ``high`` shrunk until its tiles fit, else ``low``.
    LLaVA: 576 or nothing. InternVL: fewer tiles (the thumbnail counted).
    """
    cost = image_cost(family, width, height, detail)
    if cost.tokens <= budget:
        return cost
    if family == "qwen2.5-vl":
        blocks = budget
        while blocks >= 1:
            fitted = qwen_resize(width, height, min_pixels=min(QWEN_MIN_PIXELS, blocks * QWEN_BLOCK ** 2),
                                 max_pixels=blocks * QWEN_BLOCK ** 2)
            if fitted.tokens <= budget:
                return fitted
            blocks -= 1
        return None
    if family == "openai":
        return _fit_openai(width, height, budget, detail)
    if family == "internvl":
        for max_tiles in range(INTERNVL_MAX_TILES - 1, 0, -1):
            fitted = internvl_resize(width, height, max_tiles)
            if fitted.tokens <= budget:
                return fitted
    return None


def _fit_openai(width: int, height: int, budget: int, detail: Detail) -> ImageCost | None:
    """OpenAI's high detail shrunk a tile row or column at a time until it fits, else low detail."""
    if detail != "low":
        high = openai_resize(width, height, "high")
        w, h = high.width, high.height
        while w > OPENAI_TILE_PX or h > OPENAI_TILE_PX:
            longer = max(w, h)
            scale = (math.ceil(longer / OPENAI_TILE_PX) - 1) * OPENAI_TILE_PX / longer  # one tile fewer along it
            w, h = max(1, math.floor(w * scale)), max(1, math.floor(h * scale))
            fitted = openai_resize(w, h, "high")
            if fitted.tokens <= budget:
                return fitted
    low = openai_resize(width, height, "low")
    return low if low.tokens <= budget else None


def plan_turn(family: Family, sizes: list[tuple[int, int]], budget: int,
              detail: Detail = "auto") -> list[ImageCost | None]:
    """How a turn's images (oldest first) are sent within ``budget`` tokens: the newest gets the budget's first
    claim, each older one what is left at its own full cost or a resize; None where an image is left out."""
    plan: list[ImageCost | None] = [None] * len(sizes)
    left = budget
    for index in range(len(sizes) - 1, -1, -1):
        width, height = sizes[index]
        share = left if index == len(sizes) - 1 else min(left, image_cost(family, width, height, detail).tokens)
        fitted = fit_image(family, width, height, share, detail) if share > 0 else None
        if fitted is not None:
            plan[index] = fitted
            left -= fitted.tokens
    return plan
