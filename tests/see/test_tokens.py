"""Image-token math against hand-computed cases (the arithmetic is in each test's comment)."""

from __future__ import annotations

import pytest

from bargein.see.tokens import (
    ImageCost,
    fit_image,
    image_cost,
    internvl_grid,
    internvl_resize,
    openai_resize,
    plan_turn,
    qwen_resize,
)


def test_qwen_rounds_each_side_to_28_px_blocks() -> None:
    # 480 / 28 = 17.1 -> 17 blocks (476 px); 640 / 28 = 22.9 -> 23 blocks (644 px); 17 * 23 = 391 tokens
    assert qwen_resize(640, 480) == ImageCost(644, 476, 391)


def test_qwen_scales_a_large_frame_down_to_max_pixels_keeping_its_aspect() -> None:
    # 1932 x 1092 is over 1003520 px: beta = sqrt(1920 * 1080 / 1003520) = 1.4375;
    # 1080 / 1.4375 / 28 = 26.8 -> 26 blocks; 1920 / 1.4375 / 28 = 47.7 -> 47 blocks; 26 * 47 = 1222
    assert qwen_resize(1920, 1080) == ImageCost(1316, 728, 1222)


def test_qwen_scales_a_thin_strip_up_to_min_pixels() -> None:
    # 100 x 50 rounds to 112 x 56 (6272 px, above the 3136 minimum): 2 * 4 = 8 tokens
    assert qwen_resize(100, 50) == ImageCost(112, 56, 8)
    # 60 x 30 rounds to 56 x 28 = 1568 px < 3136: beta = sqrt(3136 / 1800) = 1.32; 30 * 1.32 / 28 = 1.41 -> 2,
    # 60 * 1.32 / 28 = 2.83 -> 3 blocks: 84 x 56, 6 tokens
    assert qwen_resize(60, 30) == ImageCost(84, 56, 6)


def test_openai_tiles() -> None:
    # low: 85 whatever the size
    assert openai_resize(4096, 8192, "low").tokens == 85
    # 1024 x 1024: shortest side to 768 -> 768 x 768, 2 x 2 tiles: 85 + 4 * 170 = 765
    assert openai_resize(1024, 1024, "high") == ImageCost(768, 768, 765)
    # 2048 x 4096: fit 2048 -> 1024 x 2048; shortest to 768 -> 768 x 1536, 2 x 3 tiles: 85 + 6 * 170 = 1105
    assert openai_resize(2048, 4096, "high") == ImageCost(768, 1536, 1105)
    # 640 x 480 is left as it is: 2 x 1 tiles, 85 + 340 = 425; auto counts as high
    assert openai_resize(640, 480, "auto") == ImageCost(640, 480, 425)


def test_llava_is_576_tokens_whatever_the_size() -> None:
    assert image_cost("llava", 4000, 300) == ImageCost(336, 336, 576)
    assert image_cost("llava", 20, 20).tokens == 576


def test_internvl_picks_the_grid_closest_to_the_aspect() -> None:
    # 640 / 480 = 4 / 3 exactly: 4 x 3 tiles, plus the thumbnail: 13 * 256 = 3328
    assert internvl_resize(640, 480) == ImageCost(1792, 1344, 3328)
    # 448 x 448: 1 x 1 (2 x 2 ties on aspect but the image covers less than half of it): one tile, no thumbnail
    assert internvl_resize(448, 448) == ImageCost(448, 448, 256)
    # 1000 x 1000 covers more than half of 3 x 3 (903168 px): 9 tiles + thumbnail = 2560
    assert internvl_grid(1000, 1000) == (3, 3) and internvl_resize(1000, 1000).tokens == 2560
    # 1920 x 1080 (1.78) with at most 6 tiles: 2 x 1 (2.0) is closest: 2 + 1 tiles = 768
    assert internvl_resize(1920, 1080, max_tiles=6) == ImageCost(896, 448, 768)


def test_fitting_to_a_budget() -> None:
    fitted = fit_image("qwen2.5-vl", 1920, 1080, 300)
    assert fitted is not None and fitted.tokens <= 300 and fitted.tokens >= 250
    assert fitted.width / fitted.height == pytest.approx(1920 / 1080, rel=0.1)
    # 1024 x 1024 high is 768 x 768, 765 tokens; one tile fewer along its side: 512 x 512, 1 tile = 255
    assert fit_image("openai", 1024, 1024, 500) == ImageCost(512, 512, 255)
    # 2048 x 4096 high is 768 x 1536 (2 x 3 tiles, 1105); 3 -> 2 tiles along the long side: 512 x 1024, 425
    assert fit_image("openai", 2048, 4096, 600) == ImageCost(512, 1024, 425)
    assert fit_image("openai", 1024, 1024, 100) == ImageCost(512, 512, 85)  # low detail
    assert fit_image("openai", 1024, 1024, 50) is None
    assert fit_image("llava", 640, 480, 500) is None
    internvl = fit_image("internvl", 640, 480, 1000)
    assert internvl is not None and internvl.tokens <= 1000
    assert fit_image("qwen2.5-vl", 640, 480, 10_000) == qwen_resize(640, 480)  # fits as it is


def test_a_turns_plan_gives_the_newest_frame_the_first_claim() -> None:
    plan = plan_turn("qwen2.5-vl", [(640, 480)] * 3, 1000)
    newest, middle, oldest = plan[2], plan[1], plan[0]
    assert newest == middle == ImageCost(644, 476, 391)
    assert oldest is not None and oldest.tokens <= 1000 - 2 * 391
    assert sum(c.tokens for c in plan if c is not None) <= 1000
    assert plan_turn("llava", [(640, 480)] * 3, 1200) == [None, ImageCost(336, 336, 576), ImageCost(336, 336, 576)]
