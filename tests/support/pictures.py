"""Real images for the ``see`` tests, drawn with Pillow: printed text on a card, plain scenes, and encoded
bad images (truncated, animated, CMYK, a 20k x 20k header)."""

from __future__ import annotations

import base64
import io
import struct
import zlib

from PIL import Image, ImageDraw, ImageFont

FONT_PATHS = ("/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf",
              "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf")


def font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """A TrueType font from the system's packages, else Pillow's own scalable default."""
    for path in FONT_PATHS:
        try:
            return ImageFont.truetype(path, size)
        except OSError:
            continue
    return ImageFont.load_default(size)


def sign(text: str, size: tuple[int, int] = (640, 480), *, fill: str = "white", ink: str = "black",
         text_size: int = 64) -> Image.Image:
    """A card with ``text`` printed across its middle."""
    image = Image.new("RGB", size, fill)
    draw = ImageDraw.Draw(image)
    face = font(text_size)
    box = draw.textbbox((0, 0), text, font=face)
    x = (size[0] - (box[2] - box[0])) // 2
    y = (size[1] - (box[3] - box[1])) // 2
    draw.text((x, y), text, fill=ink, font=face)
    return image


def scene(seed: int, size: tuple[int, int] = (640, 480)) -> Image.Image:
    """A plain scene with no text: a few coloured rectangles placed by ``seed``."""
    image = Image.new("RGB", size, (40 + seed * 37 % 200, 90, 140))
    draw = ImageDraw.Draw(image)
    for k in range(4):
        x, y = (seed * 97 + k * 151) % size[0], (seed * 53 + k * 89) % size[1]
        draw.rectangle((x, y, x + 120, y + 90), fill=((seed + k) * 61 % 255, k * 70, 255 - k * 50))
    return image


def encode(image: Image.Image, fmt: str = "JPEG", **options: object) -> bytes:
    """The image encoded as ``fmt``."""
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


def data_url(encoded: bytes, mime: str = "image/jpeg") -> str:
    """A base64 data URL of encoded bytes."""
    return f"data:{mime};base64,{base64.b64encode(encoded).decode()}"


def huge_png_header(width: int = 20_000, height: int = 20_000) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` with almost no pixel data: a decompression bomb's front."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) \
        + chunk(b"IEND", b"")


def animated_gif_as_webp() -> bytes:
    """A two-frame animated WebP."""
    frames = [sign("A"), sign("B")]
    return encode(frames[0], "WEBP", save_all=True, append_images=frames[1:], duration=100)


def cmyk_jpeg() -> bytes:
    """A JPEG in CMYK (as print workflows write)."""
    return encode(sign("CMYK").convert("CMYK"), "JPEG")
