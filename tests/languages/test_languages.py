"""The language table: codes (two-letter, BCP 47 and ISO 639-2 tags), Mandarin phrase lists, units of text without
spaces, Chinese numbers."""

from __future__ import annotations

import pytest

from bargein.engines.transcribe.wer import character_error_rate, chinese_number
from bargein.languages import (
    ENGLISH,
    MANDARIN,
    is_backchannel,
    is_command,
    join_units,
    language,
    language_code,
    normalise_utterance,
    spoken_units,
    text_units,
    unsupported_language,
)


@pytest.mark.parametrize(("requested", "code"), [
    ("zh", "zh"), ("zh-CN", "zh"), ("zh_TW", "zh"), ("Mandarin", "zh"), ("cmn", "zh"), ("en-US", "en"),
    ("EN", "en"), ("fr", "fr"), ("", None), (None, None), ("  ", None),
])
def test_language_codes(requested: str | None, code: str | None) -> None:
    assert language_code(requested) == code


def test_rows_by_any_spelling_and_english_when_unknown() -> None:
    assert language("zh-CN") is MANDARIN
    assert language("fr") is ENGLISH
    assert language(None) is ENGLISH
    assert "简体中文" in MANDARIN.instructions


def test_a_language_the_recogniser_cannot_honour_is_named() -> None:
    english_only = frozenset({"en"})
    reason = unsupported_language("zh", english_only)
    assert reason is not None and "'zh'" in reason and "--asr-model base" in reason
    assert unsupported_language("en-US", english_only) is None
    assert unsupported_language(None, english_only) is None
    assert unsupported_language("zh", frozenset({"en", "zh"})) is None
    assert unsupported_language("xx", None) is None  # a recogniser that cannot tell takes anything


def test_han_characters_are_units_of_their_own() -> None:
    assert text_units("停一下") == ["停", "一", "下"]
    assert text_units("it's 2020年中国 ok-ay") == ["it's", "2020", "年", "中", "国", "ok-ay"]
    assert spoken_units("你好，世界。Hello, world!") == ["你", "好，", "世", "界。", "Hello,", "world!"]
    assert join_units(spoken_units("你好，世界。Hello, world! 2020年")) == "你好，世界。 Hello, world! 2020年"
    assert join_units(["中", "国", "AI", "很", "好"]) == "中国AI很好"


@pytest.mark.parametrize("heard", ["嗯", "嗯嗯。", "嗯，嗯", "对对", "对对对！", "好的。", "是的", "哦"])
def test_mandarin_backchannels(heard: str) -> None:
    assert is_backchannel(heard, "zh")
    assert not is_command(heard, "zh")


@pytest.mark.parametrize("heard", ["停", "停！", "停一下", "等一下，我想问个问题", "别说了", "不对。",
                                   "不对，我说的是上海"])
def test_mandarin_commands(heard: str) -> None:
    assert is_command(heard, "zh")
    assert not is_backchannel(heard, "zh")


def test_a_question_is_neither_and_english_lists_live_in_the_classifier() -> None:
    assert not is_backchannel("中国有多少个省？", "zh")
    assert not is_command("中国有多少个省？", "zh")
    assert not is_backchannel("嗯", "en")  # the English row adds nothing to the classifier's own lists
    assert normalise_utterance("Stop, please!") == "stop please"


@pytest.mark.parametrize(("heard", "spoken"), [
    ("ＳＴＯＰ！", "stop"), ("uh\u2010huh", "uh-huh"), ("uh\u2011huh.", "uh-huh"), ("Don\u2019t", "don't"),
    ("\uf967对", "不对"), ("等\u2f00下", "等一下"),
])
def test_utterances_are_folded_as_the_english_lexicons_fold_them(heard: str, spoken: str) -> None:
    """Fullwidth forms, compatibility ideographs, Kangxi radicals, curly apostrophes and Unicode hyphens spell
    the phrase lists' words, as :func:`~bargein.languages.fold` has the English lexicons read them."""
    assert normalise_utterance(heard) == spoken


def test_phrase_lists_match_compatibility_forms() -> None:
    assert is_command("\uf967对，我说的是上海", "zh")  # 不 as CJK compatibility ideograph U+F967
    assert is_command("等\u2f00下", "zh")  # 一 as Kangxi radical U+2F00
    assert is_backchannel("\ufa08。", "zh")  # 行 as CJK compatibility ideograph U+FA08
    assert not is_command("\ufa08。", "zh")


@pytest.mark.parametrize(("number", "spoken"), [
    (0, "零"), (3, "三"), (10, "十"), (11, "十一"), (34, "三十四"), (105, "一百零五"), (110, "一百一十"),
    (1001, "一千零一"), (9999, "九千九百九十九"),
])
def test_chinese_numbers(number: int, spoken: str) -> None:
    assert chinese_number(number) == spoken


def test_character_error_rate_ignores_punctuation_and_number_style() -> None:
    assert character_error_rate(["我们下午三点见。"], ["我们下午3点见"]) == 0.0
    assert character_error_rate(["北京是中国的首都。"], ["北京市中国的首都"]) == pytest.approx(1 / 8)
    assert character_error_rate([""], [""]) == 0.0


def test_a_session_in_mandarin_gets_mandarin_instructions_unless_it_brought_its_own() -> None:
    from bargein.protocol.session_config import DEFAULT_INSTRUCTIONS, SessionConfig

    mandarin = SessionConfig.for_language("zh-CN", model="bargein")
    assert mandarin.language == "zh" and mandarin.instructions == MANDARIN.instructions
    assert SessionConfig.for_language("en").instructions == DEFAULT_INSTRUCTIONS
    back = mandarin.updated({"audio": {"input": {"transcription": {"language": "en"}}}})
    assert back.language == "en" and back.instructions == DEFAULT_INSTRUCTIONS
    own = SessionConfig().updated({"instructions": "Be brief."})
    assert own.updated({"audio": {"input": {"transcription": {"language": "zh"}}}}).instructions == "Be brief."
    both = SessionConfig().updated({"instructions": "简短回答。",
                                    "audio": {"input": {"transcription": {"language": "zh"}}}})
    assert both.instructions == "简短回答。"


def test_traditional_characters_become_simplified() -> None:
    from bargein.engines.transcribe.simplified import available, to_simplified

    assert available(), "opencc-python-reimplemented is part of the multilingual extra"
    assert to_simplified("中國有多少個省？頭髮") == "中国有多少个省？头发"
    assert to_simplified("Hello, world.") == "Hello, world."


@pytest.mark.parametrize("requested, code", [
    ("cmn-Hans-CN", "zh"), ("cmn-CN", "zh"), ("CMN_hans", "zh"), ("yue-HK", "yue"),
    ("eng", "en"), ("zho", "zh"), ("chi", "zh"), ("english-us", "en"),
    ("EN", "en"), ("zh-CN", "zh"), ("fr-FR", "fr"), ("xyz-ab", "xyz-ab"),
])
def test_language_tags_normalise(requested: str, code: str) -> None:
    assert language_code(requested) == code


def test_a_bcp47_mandarin_tag_is_mandarin_and_supported() -> None:
    # before: "cmn" was Mandarin but "cmn-Hans-CN" (Google's and Azure's spelling) was refused as unknown
    assert language("cmn-Hans-CN").code == "zh"
    assert unsupported_language("cmn-Hans-CN", frozenset({"en", "zh"})) is None
