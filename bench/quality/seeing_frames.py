"""Camera-like frames for ``bench.quality.seeing``: printed text in several fonts, sizes, angles, blur, noise,
glare and backgrounds (signs, receipts, screens, posters), and frames with no text at all, each with a question.

Everything is drawn with Pillow from a seed, in the fonts of Debian's ``fonts-dejavu-core``/``fonts-dejavu-extra``
and ``fonts-liberation`` packages. The first set splits in two halves by font family and background: the ``fit``
half (free to look at while tuning) and the ``held_out`` half (reported once; it has since been examined failure by
failure, so it is no longer blind). A frame whose family and background fall in different halves is not made, so
no font or background crosses over.

``fresh`` is a second held-out set, made after the reading was tuned and never used for fitting: faces of those
packages that neither half uses (condensed, narrow, italic, oblique), five backgrounds of its own (a yellow label,
an LCD panel, a poster, wood, a whiteboard), more words, its own seed (4412), and every text whole in the frame
(the first set's larger sizes sometimes run a sign's end out of the frame, where no reader can see it: those
frames are kept as they were, so the first set's figures stay comparable).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

DEJAVU, LIBERATION = Path("/usr/share/fonts/truetype/dejavu"), Path("/usr/share/fonts/truetype/liberation")
FONTS = {
    "dejavu-sans": DEJAVU / "DejaVuSans-Bold.ttf",
    "dejavu-mono": DEJAVU / "DejaVuSansMono.ttf",
    "liberation-serif": LIBERATION / "LiberationSerif-Bold.ttf",
    "liberation-sans": LIBERATION / "LiberationSans-Regular.ttf",
    "dejavu-serif": DEJAVU / "DejaVuSerif.ttf",
    "liberation-mono": LIBERATION / "LiberationMono-Bold.ttf",
}
BACKGROUNDS = ("plain", "screen", "gradient", "sign", "receipt", "texture")
HALVES = {
    "fit": (("dejavu-sans", "dejavu-mono", "liberation-serif"), ("plain", "screen", "gradient")),
    "held_out": (("liberation-sans", "dejavu-serif", "liberation-mono"), ("sign", "receipt", "texture")),
}
FRESH_FONTS = {
    "dejavu-sans-condensed": DEJAVU / "DejaVuSansCondensed.ttf",
    "dejavu-serif-condensed-bold-italic": DEJAVU / "DejaVuSerifCondensed-BoldItalic.ttf",
    "liberation-sans-narrow-bold": LIBERATION / "LiberationSansNarrow-Bold.ttf",
    "liberation-serif-italic": LIBERATION / "LiberationSerif-Italic.ttf",
    "dejavu-mono-bold-oblique": DEJAVU / "DejaVuSansMono-BoldOblique.ttf",
}
FRESH_BACKGROUNDS = ("label", "lcd", "poster", "wood", "whiteboard")
FRESH_SEED = 4412
FRESH_WORDS = ("ARRIVALS", "LIFT", "TOILETS", "Bakery", "Fresh Fish", "Check-in", "Platform", "CLOSED", "Tea",
               "Stop", "Oranges", "Left Luggage")
TEXT_QUESTIONS = ("what does this say?", "can you read me the sign?", "what's written there?",
                  "read that for me please", "what does the label say?")
BLANK_QUESTIONS = ("what does this say?", "is there any writing here?", "can you read this for me?")
WORDS = ("PLATFORM", "EXIT", "GATE", "ROOM", "BUS", "OPEN", "SALE", "TICKETS", "NO PARKING", "Coffee", "Milk",
         "Bread", "Pharmacy", "Main Street", "Departures", "Total")


@dataclass(frozen=True)
class BenchFrame:
    """One frame: its pixels, the text printed on it ('' for none), the question asked and how it was made."""

    image: Image.Image = field(repr=False)
    text: str
    question: str
    family: str
    background: str
    how: str


def printed_text(rng: random.Random, words: tuple[str, ...] = WORDS) -> str:
    """A sign's, a label's or a receipt's text: words with numbers, prices and times."""
    word = rng.choice(words)
    match rng.randrange(5):
        case 0:
            return f"{word} {rng.randint(1, 99)}"
        case 1:
            return f"{word} {rng.randint(1, 19)}.{rng.randint(0, 99):02d}"
        case 2:
            return f"{word} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
        case 3:
            return word
        case _:
            return f"{word} {rng.choice('ABCDEF')}{rng.randint(1, 40)}"


def background(kind: str, rng: random.Random, size: tuple[int, int] = (640, 480)) -> tuple[Image.Image, str]:
    """A background and the ink colour that reads on it."""
    width, height = size
    if kind == "plain":
        return Image.new("RGB", size, (238, 236, 230)), "black"
    if kind == "screen":
        return Image.new("RGB", size, (20, 30, 70)), "white"
    if kind == "sign":
        return Image.new("RGB", size, (0, 110, 60)), "white"
    ramp = np.linspace(0, 1, width)[None, :, None]
    if kind == "gradient":
        pixels = (np.array([250, 220, 160]) * (1 - ramp) + np.array([160, 200, 250]) * ramp) * np.ones((height, 1, 1))
        return Image.fromarray(pixels.astype(np.uint8)), "black"
    grain = np.random.default_rng(rng.randrange(1 << 30)).normal(0, 1, (height, width, 1))
    if kind == "receipt":
        pixels = np.clip(245 + 6 * grain, 0, 255) * np.ones((1, 1, 3))
        return Image.fromarray(pixels.astype(np.uint8)), (60, 60, 60)
    blotches = Image.fromarray(np.clip(128 + 60 * grain[..., 0], 0, 255).astype(np.uint8)).filter(
        ImageFilter.GaussianBlur(6))
    tinted = np.asarray(blotches, dtype=np.float32)[..., None] * np.array([0.9, 0.8, 0.6]) + 60
    return Image.fromarray(np.clip(tinted, 0, 255).astype(np.uint8)), (10, 10, 10)


def draw_text(image: Image.Image, text: str, font_path: Path, size: int, ink: object,
              rng: random.Random) -> Image.Image:
    """``text`` printed somewhere near the middle, on a card when the background is busy."""
    font = ImageFont.truetype(str(font_path), size)
    draw = ImageDraw.Draw(image)
    box = draw.textbbox((0, 0), text, font=font)
    width, height = box[2] - box[0], box[3] - box[1]
    x = max(10, (image.width - width) // 2 + rng.randint(-60, 60))
    y = max(10, (image.height - height) // 2 + rng.randint(-80, 80))
    draw.text((x - box[0], y - box[1]), text, fill=ink, font=font)
    return image


def camera_effects(image: Image.Image, rng: random.Random) -> tuple[Image.Image, str]:
    """Angle, blur, glare and sensor noise, as a hand-held phone adds them; says which."""
    angle = rng.uniform(-10, 10)
    image = image.rotate(angle, resample=Image.Resampling.BICUBIC, fillcolor=image.getpixel((2, 2)))
    blur = rng.choice((0.0, 0.6, 1.2))
    if blur:
        image = image.filter(ImageFilter.GaussianBlur(blur))
    pixels = np.asarray(image, dtype=np.float32)
    glare = rng.random() < 0.4
    if glare:
        h, w = pixels.shape[:2]
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        yy, xx = np.mgrid[0:h, 0:w]
        pixels = pixels + 90 * np.exp(-(((yy - cy) / 120) ** 2 + ((xx - cx) / 160) ** 2))[..., None]
    noise = rng.choice((0.0, 4.0, 9.0))
    pixels = pixels + np.random.default_rng(rng.randrange(1 << 30)).normal(0, noise, pixels.shape) if noise else pixels
    how = f"angle {angle:+.0f}, blur {blur}, noise {noise:.0f}{', glare' if glare else ''}"
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)), how


def blank_scene(kind: str, rng: random.Random) -> Image.Image:
    """A background with shapes and no text: a table, a wall, a window."""
    image, _ = background(kind, rng)
    return scatter_shapes(image, rng)


def frames(half: str, *, per_pair: int = 4, blanks_per_background: int = 6, seed: int = 44) -> list[BenchFrame]:
    """The frames of one half: ``per_pair`` text frames per (font family, background) and the no-text frames."""
    families, backgrounds = HALVES[half]
    rng = random.Random(f"{seed}-{half}")
    made = []
    for family in families:
        for kind in backgrounds:
            for _ in range(per_pair):
                text = printed_text(rng)
                image, ink = background(kind, rng)
                image = draw_text(image, text, FONTS[family], rng.choice((34, 48, 64, 84)), ink, rng)
                image, how = camera_effects(image, rng)
                made.append(BenchFrame(image, text, rng.choice(TEXT_QUESTIONS), family, kind, how))
    for kind in backgrounds:
        for _ in range(blanks_per_background):
            image, how = camera_effects(blank_scene(kind, rng), rng)
            made.append(BenchFrame(image, "", rng.choice(BLANK_QUESTIONS), "-", kind, how))
    return made


def fresh_background(kind: str, rng: random.Random, size: tuple[int, int] = (640, 480)) -> tuple[Image.Image, object]:
    """The fresh set's own backgrounds, and the ink that reads on each."""
    width, height = size
    if kind == "label":
        image = Image.new("RGB", size, (90, 90, 95))
        ImageDraw.Draw(image).rounded_rectangle((30, 40, width - 30, height - 40), radius=24, fill=(250, 215, 40),
                                                outline=(20, 20, 20), width=6)
        return image, (15, 15, 15)
    if kind == "lcd":
        return Image.new("RGB", size, (8, 14, 10)), rng.choice(((90, 255, 120), (255, 180, 40)))
    if kind == "poster":
        return Image.new("RGB", size, (190, 25, 35)), (255, 250, 240)
    grain = np.random.default_rng(rng.randrange(1 << 30)).normal(0, 1, (height, width))
    if kind == "wood":
        rows = np.linspace(0, 18 * np.pi, height)[:, None] + 0.6 * np.cumsum(grain, axis=1) / np.sqrt(width)
        shade = 0.5 + 0.5 * np.sin(rows)
        pixels = np.array([150, 100, 55]) + shade[..., None] * np.array([50, 35, 20])
        return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)), (250, 245, 235)
    smudges = Image.fromarray(np.clip(128 + 80 * grain, 0, 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(14))
    pixels = 238 - 0.08 * np.abs(np.asarray(smudges, dtype=np.float32) - 128)[..., None] * np.ones((1, 1, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)), (20, 50, 160)


MAX_TILT = 10.0
"""Degrees :func:`camera_effects` may turn a frame either way."""


def stays_inside(box: tuple[int, int, int, int], size: tuple[int, int], margin: int = 12) -> bool:
    """Whether a text box keeps ``margin`` pixels inside the frame however :func:`camera_effects` turns it."""
    cx, cy = size[0] / 2, size[1] / 2
    for degrees in np.linspace(-MAX_TILT, MAX_TILT, 11):
        turn = np.radians(degrees)
        for x, y in ((box[0], box[1]), (box[2], box[1]), (box[0], box[3]), (box[2], box[3])):
            # Pillow turns counter-clockwise about the middle; either sense is checked, so the sign does not matter
            rx = cx + (x - cx) * np.cos(turn) - (y - cy) * np.sin(turn)
            ry = cy + (x - cx) * np.sin(turn) + (y - cy) * np.cos(turn)
            if not (margin <= rx <= size[0] - margin and margin <= ry <= size[1] - margin):
                return False
    return True


def draw_whole_text(image: Image.Image, text: str, font_path: Path, size: int, ink: object,
                    rng: random.Random) -> Image.Image:
    """``text`` printed near the middle, as large as asked but smaller where it would leave the frame when
    tilted: every character stays in view."""
    draw = ImageDraw.Draw(image)
    while True:
        font = ImageFont.truetype(str(font_path), size)
        left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
        width, height = right - left, bottom - top
        x = (image.width - width) // 2 + rng.randint(-40, 40)
        y = (image.height - height) // 2 + rng.randint(-60, 60)
        if stays_inside((x, y, x + width, y + height), image.size) or size <= 16:
            draw.text((x - left, y - top), text, fill=ink, font=font)
            return image
        size = int(size * 0.9)


def fresh_frames(*, per_pair: int = 2, blanks_per_background: int = 4, seed: int = FRESH_SEED) -> list[BenchFrame]:
    """The fresh held-out set: ``per_pair`` text frames per (face, background) and the no-text frames."""
    rng = random.Random(f"{seed}-fresh")
    made = []
    for family, path in FRESH_FONTS.items():
        for kind in FRESH_BACKGROUNDS:
            for _ in range(per_pair):
                text = printed_text(rng, WORDS + FRESH_WORDS)
                image, ink = fresh_background(kind, rng)
                image = draw_whole_text(image, text, path, rng.choice((30, 40, 54, 72, 96)), ink, rng)
                image, how = camera_effects(image, rng)
                made.append(BenchFrame(image, text, rng.choice(TEXT_QUESTIONS), family, kind, how))
    for kind in FRESH_BACKGROUNDS:
        for _ in range(blanks_per_background):
            image, _ = fresh_background(kind, rng)
            image, how = camera_effects(scatter_shapes(image, rng), rng)
            made.append(BenchFrame(image, "", rng.choice(BLANK_QUESTIONS), "-", kind, how))
    return made


def scatter_shapes(image: Image.Image, rng: random.Random) -> Image.Image:
    """A few shapes and no text on a background: a table, a wall, a window."""
    draw = ImageDraw.Draw(image)
    for _ in range(rng.randint(2, 6)):
        x, y = rng.randrange(0, image.width - 80), rng.randrange(0, image.height - 80)
        colour = tuple(rng.randrange(0, 256) for _ in range(3))
        if rng.random() < 0.5:
            draw.ellipse((x, y, x + rng.randint(30, 160), y + rng.randint(30, 160)), fill=colour)
        else:
            draw.rectangle((x, y, x + rng.randint(30, 200), y + rng.randint(20, 120)), fill=colour)
    return image
