"""Frames in, checked: an ``input_image`` data URL becomes a decoded RGB frame, or a refusal with a stable code.

Only data URLs are read: a URL the client names is never fetched (the server would become the client's proxy).
Every limit is checked on the header before a pixel is decoded, so a decompression bomb costs nothing; the decode
itself runs off the event loop (:func:`decode_frame` is plain blocking code, called from a worker thread).
"""

from __future__ import annotations

import base64
import binascii
import io
import re
import warnings
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from PIL import Image

from bargein.see.phash import dhash

MAX_IMAGE_BYTES = 8 * 1024 * 1024
"""The most encoded bytes one image may carry (a phone's 12 MP JPEG is 3-5 MB)."""
MAX_IMAGE_PIXELS = 25_000_000
"""The most pixels one image may decode to (25 MP, 75 MB as RGB); 20k x 20k is refused on its header."""
MAX_IMAGE_SIDE = 10_000
"""The longest side an image may have: a 1 x 25M strip is no camera frame."""
WORKING_SIDE = 1536
"""Frames are kept at most this long on their longest side: enough for OCR and every vision family's largest
resize (Qwen2.5-VL's default max_pixels is 1003520, about 1000 x 1000), a quarter of a 12 MP photo's memory."""
FORMATS = frozenset({"JPEG", "PNG", "WEBP"})
"""The encodings a frame may use (what browsers' canvas.toDataURL and cameras write)."""
MODES = frozenset({"1", "L", "LA", "P", "RGB", "RGBA"})
"""Pixel modes with an unambiguous RGB reading; CMYK (print separations) and 16-bit modes are refused."""
_DATA_URL = re.compile(r"data:image/([a-z0-9.+-]+)(;[a-z0-9=.-]+)*;base64,", re.IGNORECASE)

NOT_DATA_URL = "invalid_value"
"""The code for an image that is not a base64 data URL: the protocol's own, as it was before images were decoded."""

RGBFrame = npt.NDArray[np.uint8]


class ImageRejected(Exception):
    """An image the server will not read: ``code`` is stable (clients may branch on it), ``message`` says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, eq=False)
class Frame:
    """One decoded image: RGB pixels (at most :data:`WORKING_SIDE` on the longest side), its size as sent, the
    stream time it arrived at and its 64-bit difference hash (near-duplicates differ in a few bits). Frames
    compare by identity."""

    pixels: RGBFrame = field(repr=False)
    width: int
    height: int
    at_ms: float
    hash: int

    @property
    def nbytes(self) -> int:
        """The memory its pixels hold."""
        return int(self.pixels.nbytes)


def data_url_bytes(url: str) -> bytes:
    """The encoded image inside a ``data:image/...;base64,`` URL; anything else is refused, never fetched."""
    match = _DATA_URL.match(url[:200])
    if match is None:
        raise ImageRejected(NOT_DATA_URL, "input_image.image_url must be a data:image/...;base64, URL "
                                          "(the server fetches no URL)")
    payload = url[match.end():]
    if len(payload) > (MAX_IMAGE_BYTES * 4) // 3 + 4:
        raise ImageRejected("image_too_many_bytes", f"the image is over {MAX_IMAGE_BYTES} bytes")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageRejected("image_not_base64", "the image's data URL is not valid base64") from None


def decode_frame(encoded: bytes, at_ms: float = 0.0) -> Frame:
    """Check an encoded image on its header, then decode it to an RGB :class:`Frame`; raises :class:`ImageRejected`."""
    if len(encoded) > MAX_IMAGE_BYTES:
        raise ImageRejected("image_too_many_bytes", f"the image is over {MAX_IMAGE_BYTES} bytes")
    image = _open_checked(encoded)
    width, height = image.size
    try:
        image.draft("RGB", _draft_size(width, height))  # JPEG decodes at 1/2, 1/4, 1/8 scale when that suffices
        image.load()
    except (OSError, SyntaxError, ValueError):
        raise ImageRejected("image_truncated", "the image's data ends early or is corrupt") from None
    rgb = image.convert("RGB")
    if max(rgb.size) > WORKING_SIDE:
        scale = WORKING_SIDE / max(rgb.size)
        rgb = rgb.resize((max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale))), Image.Resampling.BOX)
    pixels: RGBFrame = np.asarray(rgb, dtype=np.uint8)
    return Frame(pixels, width, height, at_ms, dhash(pixels))


def decode_data_url(url: str, at_ms: float = 0.0) -> Frame:
    """:func:`data_url_bytes` then :func:`decode_frame`."""
    return decode_frame(data_url_bytes(url), at_ms)


def _open_checked(encoded: bytes) -> Image.Image:
    """The image opened on its header alone, refused unless its format, size, mode and frame count are allowed."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(encoded), formats=sorted(FORMATS))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ImageRejected("image_too_many_pixels", f"the image is over {MAX_IMAGE_PIXELS} pixels") from None
    except (OSError, SyntaxError, ValueError):
        raise ImageRejected("image_not_an_image", "the data is not a JPEG, PNG or WebP image") from None
    width, height = image.size
    if width * height > MAX_IMAGE_PIXELS or max(width, height) > MAX_IMAGE_SIDE or min(width, height) < 1:
        raise ImageRejected("image_too_many_pixels", f"the image is {width} x {height}: at most {MAX_IMAGE_PIXELS} "
                                                     f"pixels and {MAX_IMAGE_SIDE} on a side")
    if getattr(image, "n_frames", 1) > 1:
        raise ImageRejected("image_animated", "the image is animated: send one frame")
    if image.mode not in MODES:
        raise ImageRejected("image_mode_unsupported", f"the image's pixel mode {image.mode} is not supported "
                                                      "(send RGB or greyscale; CMYK is refused)")
    return image


def _draft_size(width: int, height: int) -> tuple[int, int]:
    """The smallest size a JPEG draft may decode to and still cover :data:`WORKING_SIDE`."""
    scale = min(1.0, WORKING_SIDE / max(width, height))
    return max(1, int(width * scale)), max(1, int(height * scale))
