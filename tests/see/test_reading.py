"""Reading text out of PP-OCR's pieces: look-alike letters and digits mended by their neighbours, lines grouped and
re-read wider (a scripted OCR says what each crop reads), and real OCR keeping a tilted line's last characters."""

from __future__ import annotations

import numpy as np
import pytest

from bargein.see.detectors import Detectors
from bargein.see.frames import decode_frame
from bargein.see.reading import Piece, better_reading, group_lines, line_corners, mend_digits_and_letters
from tests.support.pictures import encode, sign


@pytest.mark.parametrize(("read", "meant"), [
    ("R00M 12", "ROOM 12"),  # a run of zeros between letters
    ("EX1T", "EXIT"),  # a one between upper-case letters is an I
    ("Mi1k", "Milk"),  # between lower-case letters an l
    ("Co0ffee", "Cooffee"),  # lower-case zero
    ("0PEN", "OPEN"),  # a zero opening an upper-case word
    ("GATE 1O5", "GATE 105"),  # an O between digits
    ("12.4O", "12.40"),  # an O closing a number
    ("O8:34", "08:34"),  # an O opening one
    ("2l3", "213"),  # an l between digits
])
def test_look_alikes_are_mended_by_their_neighbours(read: str, meant: str) -> None:
    assert mend_digits_and_letters(read) == meant


@pytest.mark.parametrize("kept", ["ROOM 10", "ROOM1", "A1", "B0", "TOOL", "Il Duomo", "10AM", "C37", "O"])
def test_a_look_alike_between_a_letter_and_a_digit_is_left_as_read(kept: str) -> None:
    assert mend_digits_and_letters(kept) == kept


def piece(text: str, x: float, y: float, width: float = 80, height: float = 30) -> Piece:
    box = np.array([[x, y], [x + width, y], [x + width, y + height], [x, y + height]], dtype=np.float32)
    return Piece(text, 0.9, box)


def test_pieces_are_grouped_into_lines_top_to_bottom_left_to_right() -> None:
    lines = group_lines([piece("20:24", 300, 104), piece("Pharmacy", 100, 100), piece("Total", 100, 200)])
    assert [[p.text for p in line] for line in lines] == [["Pharmacy", "20:24"], ["Total"]]


def test_a_line_is_re_read_wider_than_its_pieces() -> None:
    corners = line_corners([piece("NO", 100, 100), piece("PARKING", 200, 100)])
    assert corners[0][0] == pytest.approx(100 - 0.6 * 30, abs=1) and corners[1][0] == pytest.approx(280 + 18, abs=1)
    assert corners[3][1] - corners[0][1] == pytest.approx(30 * 1.3, abs=1)


def test_the_wider_reading_is_taken_only_when_it_adds_to_the_first() -> None:
    assert better_reading("NO PARKING C", "NO PARKING C27", 0.95, 0.8)  # the cut-off characters
    assert better_reading("Milk A18", " Milk A18 4", 0.9, 0.8)  # what the wider crop adds is kept
    assert not better_reading("Milk A18", "Milk A18", 0.99, 0.8)  # nothing new
    assert not better_reading("Main Street t D36", "Main Street D36", 0.99, 0.8)  # less: keep what was read
    assert not better_reading("ROOM 81", "RQOM 81 4", 0.99, 0.8)  # a different reading
    assert not better_reading("NO PARKING C", "NO PARKING C27", 0.6, 0.8)  # not confident


class ScriptedOcr:
    """PP-OCR as scripted: the pieces of a whole-frame reading, and what a line's own crop reads."""

    def __init__(self, pieces: list[tuple[str, float]], line: tuple[str, float]) -> None:
        self.pieces, self.line = pieces, line
        self.crops: list[tuple[int, ...]] = []

    def __call__(self, image: np.ndarray, use_det: bool = True, **_: object) -> tuple[object, float]:
        if use_det:
            return [[[[100 + 200 * k, 100], [260 + 200 * k, 100], [260 + 200 * k, 140], [100 + 200 * k, 140]],
                     text, score] for k, (text, score) in enumerate(self.pieces)], 0.0
        self.crops.append(image.shape)
        return [[*self.line]], 0.0


def scripted(pieces: list[tuple[str, float]], line: tuple[str, float]) -> tuple[Detectors, ScriptedOcr]:
    detectors = Detectors.__new__(Detectors)
    ocr = ScriptedOcr(pieces, line)
    detectors._ocr = ocr
    return detectors, ocr


def test_the_wider_reading_of_a_line_replaces_its_cut_pieces_and_is_mended() -> None:
    detectors, ocr = scripted([("NO PARKING", 0.97), ("C2", 0.9)], ("NO PARKING C27", 0.93))
    lines = detectors.read_text(np.zeros((480, 640, 3), dtype=np.uint8))
    assert [line.text for line in lines] == ["NO PARKING C27"]
    assert len(ocr.crops) == 1 and ocr.crops[0][1] > 360  # one crop, wider than the pieces (360 px)
    detectors, _ = scripted([("R00M", 0.95), ("12", 0.9)], ("Q R00M 12", 0.6))  # too unsure to replace
    assert [line.text for line in detectors.read_text(np.zeros((480, 640, 3), dtype=np.uint8))] == ["ROOM 12"]


def test_a_line_of_lone_marks_is_dropped_without_a_second_reading() -> None:
    detectors, ocr = scripted([("O", 0.9), ("!", 0.9)], ("O 1", 0.95))
    assert detectors.read_text(np.zeros((480, 640, 3), dtype=np.uint8)) == [] and ocr.crops == []


def test_a_number_at_a_tilted_lines_right_end_is_read_whole() -> None:
    detectors = Detectors()
    card = sign("NO PARKING C37", text_size=48).rotate(7, fillcolor="white")
    pixels = decode_frame(encode(card, "JPEG", quality=80)).pixels
    assert "NOPARKINGC37" in "".join(line.text for line in detectors.read_text(pixels)).replace(" ", "")


def test_a_piece_boxed_twice_inside_a_longer_one_is_dropped() -> None:
    lines = group_lines([piece("Main Street", 100, 100, width=300), piece("t", 380, 104, width=30),
                         piece("D36", 420, 100, width=90)])
    assert [[p.text for p in line] for line in lines] == [["Main Street", "D36"]]
