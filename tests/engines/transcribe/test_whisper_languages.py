"""The languages a Whisper model transcribes are those it has a token for: faster-whisper lists Cantonese
(``yue``) for every multilingual model, but only large-v3 (100 languages) knows it; base has 99."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from faster_whisper.tokenizer import _LANGUAGE_CODES

from bargein.engines.transcribe.whisper_decode import WhisperCore


class _Model:
    """Just enough of a faster-whisper model: its language list and the CTranslate2 model's counts."""

    def __init__(self, num_languages: int | None, *, multilingual: bool = True) -> None:
        # what faster-whisper says of every multilingual model: all 100, Cantonese last
        self.supported_languages = list(_LANGUAGE_CODES) if multilingual else ["en"]
        ctranslate2: dict[str, Any] = {"is_multilingual": multilingual,
                                       "detect_language": lambda encoded: [[("<|zh|>", 0.9)]]}
        if num_languages is not None:
            ctranslate2["num_languages"] = num_languages
        self.model = SimpleNamespace(**ctranslate2)


def test_a_model_of_99_languages_does_not_offer_cantonese() -> None:
    # before: yue was listed, so a session asking for it was accepted, and decoded with no language token
    languages = WhisperCore(_Model(99)).languages  # type: ignore[arg-type]
    assert "yue" not in languages and {"en", "zh", "fr"} <= languages and len(languages) == 99


def test_a_model_of_100_languages_offers_cantonese() -> None:
    assert "yue" in WhisperCore(_Model(100)).languages  # type: ignore[arg-type]


def test_a_model_that_does_not_say_keeps_faster_whispers_list() -> None:
    assert "yue" in WhisperCore(_Model(None)).languages  # type: ignore[arg-type]
    assert WhisperCore(_Model(99, multilingual=False)).languages == frozenset({"en"})  # type: ignore[arg-type]


def test_cantonese_asked_of_a_model_without_it_is_detected_instead() -> None:
    # a caller past the session's check (a direct call) gets the language the model hears, not a decode with no
    # language token labelled Cantonese
    core = WhisperCore(_Model(99))  # type: ignore[arg-type]
    assert core._language(core.decoder, np.zeros(1), "yue") == "zh"
    assert core._language(core.decoder, np.zeros(1), "fr") == "fr"


async def test_the_installed_base_model_has_99_languages() -> None:
    from bargein.engines.transcribe.whisper_asr import load_whisper

    try:
        recognizer = load_whisper("base")
    except Exception as error:  # not installed here: the fakes above stand for it
        pytest.skip(f"Whisper base is not installed: {error}")
    try:
        assert recognizer.core.model.model.num_languages == 99
        assert "yue" not in recognizer.languages and "zh" in recognizer.languages
    finally:
        await recognizer.aclose()
