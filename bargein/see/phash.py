"""Perceptual hashes of frames: two frames of the same still scene hash a few bits apart, a changed scene many.

The difference hash (dHash): the frame in grey, shrunk to 9 x 8 by area averaging, one bit per pair of
horizontal neighbours (is the left one clearly brighter). It ignores exposure shifts and sensor noise, and is cheap
enough to run on every camera frame.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

NEAR_DUPLICATE_BITS = 6
"""Frames whose hashes differ in at most this many of 64 bits show the same scene (camera noise and small
exposure changes flip 0-4; a new word on a sign or a hand moving in flips 10 or more)."""


def grey(pixels: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    """Luma (ITU-R BT.601 weights) of an RGB frame, or the frame itself when it is already grey."""
    if pixels.ndim == 2:
        return pixels.astype(np.float32)
    weights = np.array([0.299, 0.587, 0.114], dtype=np.float32)
    result: npt.NDArray[np.float32] = pixels[..., :3].astype(np.float32) @ weights
    return result


def shrink(plane: npt.NDArray[np.float32], width: int, height: int) -> npt.NDArray[np.float32]:
    """``plane`` averaged into ``height`` x ``width`` cells (each cell the mean of the pixels it covers)."""
    rows = np.linspace(0, plane.shape[0], height + 1).astype(int)
    cols = np.linspace(0, plane.shape[1], width + 1).astype(int)
    out = np.empty((height, width), dtype=np.float32)
    for r in range(height):
        band = plane[rows[r]:max(rows[r + 1], rows[r] + 1)]
        for c in range(width):
            out[r, c] = band[:, cols[c]:max(cols[c + 1], cols[c] + 1)].mean()
    return out


EDGE_LEVELS = 1.0
"""How much brighter (in grey levels, of 255) a cell must be than its right neighbour to set its bit: a flat wall
or a white card has cells equal but for sensor noise, which must not flip bits."""


def dhash(pixels: npt.NDArray[np.uint8]) -> int:
    """The 64-bit difference hash of a frame."""
    small = shrink(grey(pixels), 9, 8)
    bits = (small[:, :-1] > small[:, 1:] + EDGE_LEVELS).flatten()
    return int(sum(1 << i for i, bit in enumerate(bits) if bit))


def distance(a: int, b: int) -> int:
    """How many bits two hashes differ in."""
    return (a ^ b).bit_count()


def near_duplicate(a: int, b: int) -> bool:
    """The two hashes show the same scene."""
    return distance(a, b) <= NEAR_DUPLICATE_BITS
