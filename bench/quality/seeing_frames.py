"""Camera-like frames for ``bench.quality.seeing``: printed text in several fonts, sizes, angles, blur, noise,
glare and backgrounds (signs, receipts, screens, posters), and frames with no text at all, each with a question.

Everything is drawn with Pillow from a seed, in the fonts of Debian's ``fonts-dejavu-core``/``fonts-dejavu-extra``
and ``fonts-liberation`` packages. The set splits in two halves by font family and background: the ``fit``
half (free to look at while tuning) and the ``held_out`` half (reported; nothing is fitted on it). A frame whose
family and background fall in different halves is not made, so no font or background crosses over.
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


def printed_text(rng: random.Random) -> str:
    """A sign's, a label's or a receipt's text: words with numbers, prices and times."""
    word = rng.choice(WORDS)
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
    draw = ImageDraw.Draw(image)
    for _ in range(rng.randint(2, 6)):
        x, y = rng.randrange(0, 560), rng.randrange(0, 400)
        colour = tuple(rng.randrange(0, 256) for _ in range(3))
        if rng.random() < 0.5:
            draw.ellipse((x, y, x + rng.randint(30, 160), y + rng.randint(30, 160)), fill=colour)
        else:
            draw.rectangle((x, y, x + rng.randint(30, 200), y + rng.randint(20, 120)), fill=colour)
    return image


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
