"""The packaged models the offline scene reader runs: PP-OCR (rapidocr's wheel) and OpenCV's frontal-face Haar
cascade. Every file is checked against its pinned sha256 before it is loaded; both run on one thread each.

OCR on a 640 x 480 frame takes 0.2-0.5 s of one core, so it never runs on the event loop or a reply's path:
:mod:`bargein.see.scene_pool` runs it in the background, and stops a read that is running when a spoken turn
reaches its critical path (:meth:`Detectors.stop`: the ONNX runs end between two of the graph's nodes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from bargein.see.reading import Piece, better_reading, group_lines, line_crop, mend_digits_and_letters
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
REREAD_MIN_SCORE = 0.8
"""A line's second, wider reading replaces the first only at this confidence or more."""
FACE_SIDE = 640
"""Frames are scanned for faces at most this wide (a face under ~30 px there is too small to matter)."""


class ReadStopped(Exception):
    """A read was stopped before its end (:meth:`Detectors.stop`): it made no note."""


class _StoppableSession:
    """An ONNX Runtime session whose runs end early, between two nodes of the graph, once the detectors are told to
    stop (its run options' ``terminate``); the rest is the session's own."""

    def __init__(self, session: Any, detectors: Detectors) -> None:
        self._session = session
        self._detectors = detectors

    def run(self, names: Any, feed: Any) -> Any:
        return self._session.run(names, feed, self._detectors.run_options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


@dataclass(frozen=True)
class TextLine:
    """One line of text read in a frame, with the recogniser's confidence and the line's height in pixels."""

    text: str
    score: float
    height: int


class Detectors:
    """The loaded OCR and face models (one instance per server process; not thread-safe: one caller at a time)."""

    _stopped = False
    """Whether the read running now was told to stop (:meth:`stop`)."""

    def __init__(self) -> None:
        import cv2
        import onnxruntime
        from rapidocr_onnxruntime import RapidOCR

        self._ocr: Any = RapidOCR(det_model_path=str(OCR_DETECTOR.verified_path()),
                                  rec_model_path=str(OCR_RECOGNISER.verified_path()),
                                  cls_model_path=str(OCR_ANGLE.verified_path()),
                                  intra_op_num_threads=1, inter_op_num_threads=1)
        self._faces: Any = cv2.CascadeClassifier(str(FACE_CASCADE.verified_path()))
        if self._faces.empty():
            raise RuntimeError(f"OpenCV could not load {FACE_CASCADE.relative_path}")
        self._new_options: Any = onnxruntime.RunOptions
        self.run_options: Any = self._new_options()
        """The current read's ONNX run options (a new one per read: a stopped one stays stopped)."""
        for model in (self._ocr.text_det.infer, self._ocr.text_cls.infer, self._ocr.text_rec.session):
            model.session = _StoppableSession(model.session, self)

    def stop(self) -> None:
        """Stop the read running now (called from another thread): its ONNX runs end between two of the graph's
        nodes and the read raises :class:`ReadStopped` (the face scan, not stoppable, is skipped when it has not
        begun). A read that begins later runs as usual."""
        self._stopped = True
        self.run_options.terminate = True

    def begin(self) -> None:
        """A new read begins (in the reader's thread): a stop told before it does not apply."""
        self._stopped = False
        self.run_options = self._new_options()

    def _check(self) -> None:
        if self._stopped:
            raise ReadStopped

    def read_text(self, pixels: npt.NDArray[np.uint8]) -> list[TextLine]:
        """The lines of text in an RGB frame, top to bottom, each line's pieces left to right, each line read a
        second time as one wider crop (:mod:`bargein.see.reading`)."""
        bgr = np.ascontiguousarray(pixels[:, :, ::-1])  # PP-OCR reads BGR, as OpenCV does
        found = self._ocr_stoppable(bgr)
        pieces = [Piece(str(text).strip(), float(score), np.asarray(box, dtype=np.float32))
                  for box, text, score in found or () if float(score) >= MIN_TEXT_SCORE]
        lines = []
        for line in group_lines(pieces):
            if not any(len(re.sub(r"\W", "", piece.text)) >= MIN_TEXT_CHARS for piece in line):
                continue  # lone marks only: shapes and glare
            text = " ".join(piece.text for piece in line)
            score = min(piece.score for piece in line)
            reread = self._ocr_stoppable(line_crop(bgr, line), use_det=False, use_cls=False, use_rec=True)
            if reread:
                line_text, line_score = " ".join(str(t) for t, _ in reread).strip(), min(float(s) for _, s in reread)
                if better_reading(text, line_text, line_score, REREAD_MIN_SCORE):
                    text, score = line_text, line_score
            text = mend_digits_and_letters(" ".join(text.split()))
            if len(re.sub(r"\W", "", text)) >= MIN_TEXT_CHARS:
                lines.append(TextLine(text, score, int(max(piece.height for piece in line))))
        return lines

    def _ocr_stoppable(self, bgr: npt.NDArray[np.uint8], **steps: bool) -> Any:
        """PP-OCR's findings in ``bgr`` (``steps``: which of its models run); raises :class:`ReadStopped` when the
        read was stopped (rapidocr reports the ended run as an error of its own)."""
        self._check()
        try:
            found, _ = self._ocr(bgr, **steps)
        except Exception:
            self._check()
            raise
        self._check()
        return found

    def count_faces(self, pixels: npt.NDArray[np.uint8]) -> int:
        """How many frontal faces an RGB frame shows."""
        import cv2

        self._check()
        grey = cv2.cvtColor(pixels, cv2.COLOR_RGB2GRAY)
        if grey.shape[1] > FACE_SIDE:
            scale = FACE_SIDE / grey.shape[1]
            grey = cv2.resize(grey, (FACE_SIDE, max(1, round(grey.shape[0] * scale))), interpolation=cv2.INTER_AREA)
        faces = self._faces.detectMultiScale(cv2.equalizeHist(grey), scaleFactor=1.1, minNeighbors=6,
                                             minSize=(30, 30))
        return len(faces)
