"""Languages the server cannot hear or speak are refused by name, at start and in a session, never heard as
another language: Cantonese is not Mandarin, French is not English."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from bargein.cli import main
from bargein.config import Settings
from bargein.languages import language_code, unsupported_language


@pytest.mark.parametrize("requested", ["yue", "yue-HK", "YUE_Hant"])
def test_cantonese_is_not_mandarin(requested: str) -> None:
    # before: "yue" was an alias of "zh", so a Cantonese speaker was transcribed by Mandarin Whisper
    assert language_code(requested) == "yue"
    refusal = unsupported_language(requested, frozenset({"en", "zh"}))
    assert refusal is not None and requested in refusal and "en, zh" in refusal


def test_cantonese_is_honoured_by_a_recogniser_that_names_it() -> None:
    assert unsupported_language("yue", frozenset({"en", "zh", "yue"})) is None


@pytest.mark.parametrize("code", ["fr", "yue", "de-DE"])
def test_settings_refuse_a_language_the_server_cannot_speak(code: str) -> None:
    # before: --language fr was taken, and every session was heard by tiny.en and spoken by an English voice
    with pytest.raises(ValidationError) as raised:
        Settings(language=code)
    message = str(raised.value)
    assert "--language" in message and repr(code) in message and "en, zh" in message


@pytest.mark.parametrize("code", ["en", "zh", "zh-CN", "en-US", "Mandarin", ""])
def test_settings_take_the_languages_the_server_speaks(code: str) -> None:
    assert Settings(language=code).language == code


def test_serve_exits_2_naming_the_setting(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def must_not_serve(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the server was started in a language it cannot speak")

    monkeypatch.setattr("bargein.cli.create_app", must_not_serve)
    assert main(["serve", "--engines", "fake", "--language", "fr"]) == 2
    err = capsys.readouterr().err
    assert "--language" in err and "'fr'" in err


def test_the_environment_is_checked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BARGEIN_LANGUAGE", "fr")
    with pytest.raises(ValidationError):
        Settings()
