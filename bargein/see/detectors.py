"""The packaged models the offline scene reader runs: PP-OCR (rapidocr's wheel) and OpenCV's frontal-face Haar
cascade. Every file is checked against its pinned sha256 before it is loaded; both run on one thread each.

OCR on a 640 x 480 frame takes 0.2-0.5 s of one core, so it never runs on the event loop or a reply's path:
:mod:`bargein.see.scene_pool` runs it in the background.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from bargein.weights import PinnedFile

OCR_DETECTOR = PinnedFile("rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx",
                          "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9", "rapidocr-onnxruntime")
OCR_RECOGNISER = PinnedFile("rapidocr_onnxruntime", "models/ch_PP-OCRv4_rec_infer.onnx",
                            "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b", "rapidocr-onnxruntime")
OCR_ANGLE = PinnedFile("rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                       "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c", "rapidocr-onnxruntime")
FACE_CASCADE = PinnedFile("cv2", "data/haarcascade_frontalface_default.xml",
                          "0f7d4527844eb514d4a4948e822da90fbb16a34a0bbbbc6adc6498747a5aafb0", "opencv-python-headless")
PINNED = (OCR_DETECTOR, OCR_RECOGNISER, OCR_ANGLE, FACE_CASCADE)
MIN_TEXT_SCORE = 0.6
"""Recognised lines scoring under this are dropped: on texture (brick, foliage, fabric) PP-OCR finds "text"
at 0.5-0.6 that is not there, and inventing words is worse than missing a faint one."""
MIN_TEXT_CHARS = 2
"""A piece of text needs this many letters or digits: lone marks ('O', a box, one CJK stroke) are what PP-OCR
reads into shapes and glare; a one-character sign is lost, which is the better error."""
FACE_SIDE = 640
"""Frames are scanned for faces at most this wide (a face under ~30 px there is too small to matter)."""


@dataclass(frozen=True)
class TextLine:
    """One line of text read in a frame, with the recogniser's confidence and the line's height in pixels."""

    text: str
    score: float
    height: int


@dataclass(frozen=True)
class _Piece:
    text: str
    score: float
    y: float
    x: float
    height: float


def mend_digits_and_letters(text: str) -> str:
    """Undo PP-OCR's commonest slips on Latin signs: a zero between two letters is the letter O ('RO0M'), an O
    between two digits is a zero ('1O5')."""
    text = re.sub(r"(?<=[A-Za-z])0(?=[A-Za-z])", "O", text)
    return re.sub(r"(?<=\d)[Oo](?=\d)", "0", text)


def _lines(pieces: list[_Piece]) -> list[list[_Piece]]:
    """Pieces grouped into lines: a piece whose middle is within 60 % of the line's height of the line's middle
    is on it (a tilted sign's words are read as separate pieces at slightly different heights)."""
    lines: list[list[_Piece]] = []
    for piece in sorted(pieces, key=lambda p: p.y):
        if lines and abs(piece.y - lines[-1][0].y) < 0.6 * max(piece.height, lines[-1][0].height):
            lines[-1].append(piece)
        else:
            lines.append([piece])
    return lines


def _joined(line: list[_Piece]) -> TextLine:
    pieces = sorted(line, key=lambda p: p.x)
    return TextLine(" ".join(p.text for p in pieces), min(p.score for p in pieces), int(max(p.height for p in pieces)))


class Detectors:
    """The loaded OCR and face models (one instance per server process; not thread-safe: one caller at a time)."""

    def __init__(self) -> None:
        import cv2
        from rapidocr_onnxruntime import RapidOCR

        self._ocr: Any = RapidOCR(det_model_path=str(OCR_DETECTOR.verified_path()),
                                  rec_model_path=str(OCR_RECOGNISER.verified_path()),
                                  cls_model_path=str(OCR_ANGLE.verified_path()),
                                  intra_op_num_threads=1, inter_op_num_threads=1)
        self._faces: Any = cv2.CascadeClassifier(str(FACE_CASCADE.verified_path()))
        if self._faces.empty():
            raise RuntimeError(f"OpenCV could not load {FACE_CASCADE.relative_path}")

    def read_text(self, pixels: npt.NDArray[np.uint8]) -> list[TextLine]:
        """The lines of text in an RGB frame, top to bottom, each line's pieces left to right."""
        found, _ = self._ocr(np.ascontiguousarray(pixels[:, :, ::-1]))  # PP-OCR reads BGR, as OpenCV does
        pieces = []
        for box, text, score in found or ():
            xs, ys = [point[0] for point in box], [point[1] for point in box]
            cleaned = mend_digits_and_letters(str(text).strip())
            if float(score) >= MIN_TEXT_SCORE and len(re.sub(r"\W", "", cleaned)) >= MIN_TEXT_CHARS:
                pieces.append(_Piece(cleaned, float(score), (min(ys) + max(ys)) / 2, (min(xs) + max(xs)) / 2,
                                     max(ys) - min(ys)))
        return [_joined(line) for line in _lines(pieces)]

    def count_faces(self, pixels: npt.NDArray[np.uint8]) -> int:
        """How many frontal faces an RGB frame shows."""
        import cv2

        grey = cv2.cvtColor(pixels, cv2.COLOR_RGB2GRAY)
        if grey.shape[1] > FACE_SIDE:
            scale = FACE_SIDE / grey.shape[1]
            grey = cv2.resize(grey, (FACE_SIDE, max(1, round(grey.shape[0] * scale))), interpolation=cv2.INTER_AREA)
        faces = self._faces.detectMultiScale(cv2.equalizeHist(grey), scaleFactor=1.1, minNeighbors=6,
                                             minSize=(30, 30))
        return len(faces)
