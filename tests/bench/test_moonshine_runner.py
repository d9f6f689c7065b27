"""The Moonshine runner of the recogniser comparison: its wrapper logic on a fake library, and the real model once."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from bargein.weights import PinnedFile, WeightError
from bench.harness import moonshine_runner
from bench.harness.moonshine_runner import MIN_SAMPLES, RATE, Audio, Moonshine, load_moonshine


class FakeLibrary:
    """Records what it was asked; answers with a fixed error code and text."""

    def __init__(self, *, handle: int = 3, error: int = 0, text: str = "") -> None:
        self.handle, self.error, self.text = handle, error, text
        self.loaded: list[tuple[Path, Path, Path]] = []
        self.clips: list[Audio] = []

    def load(self, encoder: Path, decoder: Path, tokenizer: Path) -> int:
        self.loaded.append((encoder, decoder, tokenizer))
        return self.handle

    def transcribe(self, handle: int, audio: Audio) -> tuple[int, str]:
        assert handle == self.handle
        self.clips.append(audio)
        return self.error, self.text


def test_a_clip_under_100_ms_is_not_recognised() -> None:
    library = FakeLibrary(text="phantom words")
    assert Moonshine(library, 3).transcribe(np.zeros(MIN_SAMPLES - 1, np.float32)) == ""
    assert library.clips == []


def test_the_text_comes_back_with_its_spaces_collapsed_from_flat_audio() -> None:
    library = FakeLibrary(text="  Turn off   the lights. ")
    audio = np.zeros((RATE, 1), np.float32)
    assert Moonshine(library, 3).transcribe(audio) == "Turn off the lights."
    assert library.clips[0].shape == (RATE,)


def test_an_error_code_is_raised_not_read_as_silence() -> None:
    with pytest.raises(RuntimeError, match="error code 2"):
        Moonshine(FakeLibrary(error=2), 3).transcribe(np.zeros(RATE, np.float32))


def test_a_missing_or_altered_file_is_refused_before_the_library_is_asked(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    altered = PinnedFile("moonshine_cpp", "models/base-en/encoder_model.ort", "0" * 64, "moonshine-cpp==0.1.4")
    (tmp_path / "encoder_model.ort").write_bytes(b"not the model")
    monkeypatch.setattr(PinnedFile, "locate", lambda self: tmp_path / "encoder_model.ort")
    monkeypatch.setattr(moonshine_runner, "ENCODER", altered)
    library = FakeLibrary()
    with pytest.raises(WeightError, match=re.escape("pip install --force-reinstall moonshine-cpp==0.1.4")):
        load_moonshine(library=library)
    assert library.loaded == []


def test_a_model_the_library_cannot_load_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(PinnedFile, "verified_path", lambda self: tmp_path / self.relative_path)
    with pytest.raises(RuntimeError, match="could not load"):
        load_moonshine(library=FakeLibrary(handle=-1))


def test_loading_warms_the_model_up_on_one_second_of_tone(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(PinnedFile, "verified_path", lambda self: tmp_path / self.relative_path)
    library = FakeLibrary()
    load_moonshine(library=library)
    assert [clip.size for clip in library.clips] == [RATE]
    assert [path.name for path in library.loaded[0]] == ["encoder_model.ort", "decoder_model_merged.ort",
                                                          "tokenizer.bin"]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("moonshine_cpp") is None, reason="moonshine-cpp is not on the path")
def test_the_packaged_model_hears_a_spoken_command() -> None:
    from bargein.audio.resample import resample
    from testdata.voices import espeak

    spoken = espeak("en-us", ("m3",))("Turn off the lights in the kitchen.", np.random.default_rng(0))
    text = load_moonshine().transcribe(resample(spoken, 24_000, RATE))
    assert "lights" in text.lower() and "kitchen" in text.lower(), text
