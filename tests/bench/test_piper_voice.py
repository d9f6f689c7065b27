"""The Piper voice of the fifth held-out set: pinned files, Piper's phoneme ids, and audio that is a function of the
text and the generator alone."""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from bargein.weights import WeightError
from testdata.piper_voice import (
    FETCH_COMMAND,
    MEMBERS,
    Delivery,
    extract_from_wheel,
    phoneme_ids,
    phonemes,
    synthesise,
    verified_files,
    voice_dir,
)

needs_espeak = pytest.mark.skipif(not shutil.which("espeak-ng"), reason="eSpeak NG writes the voice's phonemes")


def test_phoneme_ids_put_the_pad_after_every_known_phoneme_between_begin_and_end() -> None:
    table = {"^": [1], "$": [2], "_": [0], "a": [14], " ": [3], "?": [13]}
    assert phoneme_ids("a a?", table) == [1, 0, 14, 0, 3, 0, 14, 0, 13, 0, 2]
    assert phoneme_ids("ax", table) == [1, 0, 14, 0, 2], "a phoneme the voice does not know is left out"


@needs_espeak
def test_phonemes_keep_each_clause_and_its_first_mark() -> None:
    spoken = phonemes("Not him, her?!", "en-us")
    assert spoken.count(",") == 1 and spoken.endswith("?") and "!" not in spoken
    assert phonemes("", "en-us") == ""


def _wheel(path: Path, contents: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in contents.items():
            archive.writestr(name, data)
    return path


def test_a_wheel_with_altered_or_missing_files_is_refused(tmp_path: Path) -> None:
    altered = _wheel(tmp_path / "altered.whl", {member: b"not the voice" for member in MEMBERS})
    with pytest.raises(WeightError, match="expected the pinned"):
        extract_from_wheel(altered, tmp_path / "models")
    empty = _wheel(tmp_path / "empty.whl", {"other.txt": b""})
    with pytest.raises(WeightError, match="cannot read"):
        extract_from_wheel(empty, tmp_path / "models")
    assert not any(voice_dir(tmp_path / "models").iterdir()), "nothing that looks finished is left"


def test_a_missing_or_altered_cached_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(WeightError, match=re.escape(FETCH_COMMAND)):
        verified_files(tmp_path)
    folder = voice_dir(tmp_path)
    folder.mkdir(parents=True)
    for member in MEMBERS:
        (folder / Path(member).name).write_bytes(b"altered")
    with pytest.raises(WeightError, match="expected the pinned"):
        verified_files(tmp_path)


@needs_espeak
def test_the_audio_depends_on_the_text_and_delivery_alone() -> None:
    delivery = Delivery(length_scale=1.0, noise_scale=0.667, noise_w=0.8, seed=7)
    first = synthesise("Then who pays?", delivery)
    synthesise("Something else in between.", Delivery(0.9, 0.5, 0.6, 8))
    assert np.array_equal(synthesise("Then who pays?", delivery), first)
    assert 0.5 < len(first) / 24_000 < 3.0 and 0.01 < float(np.sqrt(np.mean(first ** 2))) < 0.5
    slower = synthesise("Then who pays?", Delivery(1.3, 0.667, 0.8, 7))
    assert len(slower) > len(first) * 1.15, "the length scale slows the voice"
