"""From PP-OCR's pieces to lines of text: the pieces grouped into lines, each line read a second time as one
wider crop (the detector's tight boxes cut off a line's last character), and the slips between look-alike
letters and digits mended by their neighbours.

Pure functions over pixels and strings; :class:`~bargein.see.detectors.Detectors` runs the models around them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

LINE_MARGIN = 0.6
"""A line's second reading reaches this many line heights past each end of its pieces: PP-OCR's detector
draws its boxes tight, and a last digit at a line's right edge ('C37' read 'C3') falls outside them."""
ECHO_OVERLAP = 0.6
"""A piece whose horizontal span lies this much inside a longer piece's on the same line is read twice."""
LINE_HEIGHT_MARGIN = 0.3
"""The second reading's crop is this much taller than the line (shared between top and bottom)."""


@dataclass(frozen=True)
class Piece:
    """One piece PP-OCR read: its text, confidence and box corners (x, y) in the frame."""

    text: str
    score: float
    box: npt.NDArray[np.float32]

    @property
    def middle_y(self) -> float:
        """The box's vertical middle."""
        return float(self.box[:, 1].max() + self.box[:, 1].min()) / 2

    @property
    def middle_x(self) -> float:
        """The box's horizontal middle."""
        return float(self.box[:, 0].max() + self.box[:, 0].min()) / 2

    @property
    def height(self) -> float:
        """The box's height in pixels."""
        return float(self.box[:, 1].max() - self.box[:, 1].min())


def group_lines(pieces: list[Piece]) -> list[list[Piece]]:
    """Pieces grouped into lines, top to bottom, each left to right: a piece whose middle is within 60 % of the
    line's height of the line's middle is on it (a tilted sign's words are read as separate pieces at slightly
    different heights)."""
    lines: list[list[Piece]] = []
    for piece in sorted(pieces, key=lambda p: p.middle_y):
        if lines and abs(piece.middle_y - lines[-1][0].middle_y) < 0.6 * max(piece.height, lines[-1][0].height):
            lines[-1].append(piece)
        else:
            lines.append([piece])
    return [without_echoes(sorted(line, key=lambda p: p.middle_x)) for line in lines]


def without_echoes(line: list[Piece]) -> list[Piece]:
    """A line's pieces less those lying mostly (:data:`ECHO_OVERLAP`) inside a longer piece's span: on a tilted line
    the detector may box a few letters a second time ('Main Street t D36')."""
    def span(piece: Piece) -> tuple[float, float]:
        return float(piece.box[:, 0].min()), float(piece.box[:, 0].max())

    kept = []
    for piece in line:
        left, right = span(piece)
        inside = any(
            other is not piece and len(other.text) > len(piece.text)
            and min(right, span(other)[1]) - max(left, span(other)[0]) >= ECHO_OVERLAP * max(1.0, right - left)
            for other in line)
        if not inside:
            kept.append(piece)
    return kept


def line_corners(line: list[Piece]) -> npt.NDArray[np.float32]:
    """The corners (top left, top right, bottom right, bottom left) of a rectangle along the line's slant that
    holds all its pieces, widened by :data:`LINE_MARGIN` line heights at each end."""
    import cv2

    points = np.concatenate([piece.box for piece in line]).astype(np.float32)
    (cx, cy), (width, height), angle = cv2.minAreaRect(points)
    if width < height:  # OpenCV may name the long side height; the line runs along the long side
        width, height, angle = height, width, angle - 90
    width += 2 * LINE_MARGIN * height
    height *= 1 + LINE_HEIGHT_MARGIN
    corners = cv2.boxPoints(((cx, cy), (width, height), angle)).astype(np.float32)
    sums, differences = corners.sum(axis=1), corners[:, 1] - corners[:, 0]
    return np.array([corners[sums.argmin()], corners[differences.argmin()], corners[sums.argmax()],
                     corners[differences.argmax()]], dtype=np.float32)


def line_crop(pixels: npt.NDArray[np.uint8], line: list[Piece]) -> npt.NDArray[np.uint8]:
    """The line straightened out of the frame (edges replicated where the widened crop leaves the frame)."""
    import cv2

    corners = line_corners(line)
    width = round(float(np.linalg.norm(corners[1] - corners[0])))
    height = round(float(np.linalg.norm(corners[3] - corners[0])))
    target = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float32)
    crop = cv2.warpPerspective(pixels, cv2.getPerspectiveTransform(corners, target), (max(1, width), max(1, height)),
                               borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC)
    return np.asarray(crop, dtype=np.uint8)


def squeezed(text: str) -> str:
    """Lower case, letters and digits only (how two readings of a line are compared)."""
    return re.sub(r"[\W_]+", "", text.lower())


def better_reading(pieces_text: str, line_text: str, line_score: float, min_score: float) -> bool:
    """Whether the line's second, wider reading replaces its pieces' text: it is confident and holds everything
    the pieces read, in order, with more (a character the tight boxes cut off), never less."""
    first, second = squeezed(pieces_text), squeezed(line_text)
    return line_score >= min_score and len(second) > len(first) and first in second


_UPPER_BETWEEN = re.compile(r"(?<=[A-Z])[01]+(?=[A-Z])")
_LOWER_BETWEEN = re.compile(r"(?<=[a-z])[01]+(?=[a-z])")
_LEADING_ZERO = re.compile(r"\b0(?=[A-Z]{2})")
_DIGITS_BETWEEN = re.compile(r"(?<=\d)[OoIl|]+(?=\d)")
_DIGITS_TRAILING = re.compile(r"(?<=\d)[Oo]+\b")
_DIGITS_LEADING = re.compile(r"\b[Oo](?=\d)")
_AS_UPPER, _AS_LOWER = str.maketrans("01", "OI"), str.maketrans("01", "ol")
_AS_DIGITS = str.maketrans("OoIl|", "00111")


def mend_digits_and_letters(text: str) -> str:
    """Undo PP-OCR's slips between look-alikes by their neighbours, both ways: zeros and ones between letters are
    the letters O and I ('R00M', 'EX1T'; lower case between lower-case letters), a zero opening an upper-case word
    is an O ('0PEN'); O, I and l between digits are digits ('1O5'), as is an O closing or opening a number
    ('2O', 'O8'). A look-alike between a letter and a digit ('ROOM1', 'A1') is left as read."""
    text = _UPPER_BETWEEN.sub(lambda m: m.group().translate(_AS_UPPER), text)
    text = _LOWER_BETWEEN.sub(lambda m: m.group().translate(_AS_LOWER), text)
    text = _LEADING_ZERO.sub("O", text)
    text = _DIGITS_BETWEEN.sub(lambda m: m.group().translate(_AS_DIGITS), text)
    text = _DIGITS_TRAILING.sub(lambda m: "0" * len(m.group()), text)
    return _DIGITS_LEADING.sub("0", text)
