"""Frames in, checked: real JPEG/PNG/WebP images decode; each kind of bad image is refused with its own code."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from bargein.see.frames import (
    MAX_IMAGE_BYTES,
    NOT_DATA_URL,
    WORKING_SIDE,
    ImageRejected,
    data_url_bytes,
    decode_data_url,
    decode_frame,
)
from bargein.see.phash import distance, near_duplicate
from tests.support.pictures import animated_gif_as_webp, cmyk_jpeg, data_url, encode, huge_png_header, scene, sign


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
def test_a_camera_frame_decodes_to_rgb_at_its_size(fmt: str) -> None:
    frame = decode_frame(encode(sign("EXIT 12"), fmt), at_ms=250.0)
    assert (frame.width, frame.height) == (640, 480)
    assert frame.pixels.shape == (480, 640, 3) and frame.pixels.dtype == np.uint8
    assert frame.at_ms == 250.0
    assert frame.pixels[240, 5].tolist() == [255, 255, 255] or fmt == "JPEG"  # the card's white margin


def test_a_large_photo_is_kept_at_the_working_size_with_its_aspect() -> None:
    frame = decode_frame(encode(scene(3, (4000, 3000)), "JPEG"))
    assert (frame.width, frame.height) == (4000, 3000)
    assert max(frame.pixels.shape[:2]) == WORKING_SIDE
    assert frame.pixels.shape[1] / frame.pixels.shape[0] == pytest.approx(4 / 3, rel=0.01)


def rejected_code(encoded: bytes) -> str:
    with pytest.raises(ImageRejected) as caught:
        decode_frame(encoded)
    return caught.value.code


def test_bytes_that_are_no_image_are_refused() -> None:
    assert rejected_code(b"hello, this is not a picture") == "image_not_an_image"


def test_a_truncated_jpeg_is_refused() -> None:
    whole = encode(sign("TRUNCATED"), "JPEG")
    assert rejected_code(whole[: len(whole) // 2]) == "image_truncated"


def test_a_20k_by_20k_header_is_refused_before_any_pixel_is_decoded() -> None:
    assert rejected_code(huge_png_header()) == "image_too_many_pixels"


def test_a_bomb_past_pillows_own_limit_is_refused_the_same_way() -> None:
    assert rejected_code(huge_png_header(60_000, 60_000)) == "image_too_many_pixels"


def test_an_animated_image_is_refused() -> None:
    assert rejected_code(animated_gif_as_webp()) == "image_animated"


def test_a_cmyk_jpeg_is_refused() -> None:
    assert rejected_code(cmyk_jpeg()) == "image_mode_unsupported"


def test_a_gif_is_not_an_accepted_format() -> None:
    assert rejected_code(encode(sign("GIF"), "GIF")) == "image_not_an_image"


def test_only_base64_data_urls_are_read() -> None:
    for url in ("https://example.invalid/sign.jpg", "file:///etc/passwd", "data:text/plain;base64,aGk="):
        with pytest.raises(ImageRejected) as caught:
            data_url_bytes(url)
        assert caught.value.code == NOT_DATA_URL
    with pytest.raises(ImageRejected) as caught:
        data_url_bytes("data:image/png;base64,@@not base64@@")
    assert caught.value.code == "image_not_base64"
    with pytest.raises(ImageRejected) as caught:
        data_url_bytes("data:image/png;base64," + "A" * (MAX_IMAGE_BYTES * 2))
    assert caught.value.code == "image_too_many_bytes"


def test_a_data_url_round_trips() -> None:
    encoded = encode(sign("PLATFORM 4"), "PNG")
    assert data_url_bytes(data_url(encoded, "image/png")) == encoded
    assert decode_data_url(data_url(encoded, "image/png")).width == 640
    assert base64.b64encode(encoded).decode() in data_url(encoded)


def test_the_hash_sees_the_same_scene_through_noise_and_a_new_scene_as_new() -> None:
    base = np.asarray(sign("OPEN"), dtype=np.int16)
    noisy = np.clip(base + np.random.default_rng(1).normal(0, 6, base.shape), 0, 255).astype(np.uint8)
    same = decode_frame(encode(sign("OPEN"), "JPEG")).hash
    assert near_duplicate(same, decode_frame(encode_array(noisy)).hash)
    assert not near_duplicate(same, decode_frame(encode(scene(5), "JPEG")).hash)
    assert distance(same, decode_frame(encode(sign("CLOSED"), "JPEG")).hash) > 0


def encode_array(pixels: np.ndarray) -> bytes:
    from PIL import Image
    return encode(Image.fromarray(pixels), "JPEG")
