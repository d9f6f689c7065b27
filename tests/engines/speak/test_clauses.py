"""The clause splitter that feeds the TTS from the LLM's token stream."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bargein.engines.speak.clauses import ClauseSplitter


def _words(text: str) -> list[str]:
    """Word-like tokens with their leading space, as LLM tokenizers emit them."""
    return re.findall(r"\s*\S+|\s+", text)


def _split(text: str, tokens: list[str] | None = None, **options: int) -> list[str]:
    splitter = ClauseSplitter(**options)
    out = []
    for token in _words(text) if tokens is None else tokens:
        out += splitter.feed(token)
    if rest := splitter.flush():
        out.append(rest)
    return out


@pytest.mark.parametrize(("text", "clauses"), [
    ("Hello there. How are you?", ["Hello there.", "How are you?"]),
    ("Great! Thanks? Sure.", ["Great!", "Thanks?", "Sure."]),
    ('He said "stop." Then he left.', ['He said "stop."', "Then he left."]),
    # Titles, initials and abbreviations do not end a sentence.
    ("Dr. Smith is here. He waits.", ["Dr. Smith is here.", "He waits."]),
    ("Ask Mr. Jones and Mrs. Lee. They know.", ["Ask Mr. Jones and Mrs. Lee.", "They know."]),
    ("J. K. Rowling wrote it. She did.", ["J. K. Rowling wrote it.", "She did."]),
    ("Bring a tool, e.g. a hammer. Then stop.", ["Bring a tool, e.g. a hammer.", "Then stop."]),
    ("We met at 3 p.m. today. It went well.", ["We met at 3 p.m. today.", "It went well."]),
    ("Fruit, apples etc. All fresh.", ["Fruit, apples etc.", "All fresh."]),
    ("Wait... what? Oh.", ["Wait... what?", "Oh."]),
    ("Well… Maybe.", ["Well…", "Maybe."]),
    # Numbers: decimals never break; a number ends a sentence after words, not as a list marker.
    ("It costs 3.5 dollars. OK.", ["It costs 3.5 dollars.", "OK."]),
    ("Pi is about 3.14159 and e is 2.718.", ["Pi is about 3.14159 and e is 2.718."]),
    ("The answer is 42. Next question.", ["The answer is 42.", "Next question."]),
    ("Steps:\n1. Open the box.\n2. Take it out.", ["Steps:", "1. Open the box.", "2. Take it out."]),
    ("It was 1,250 people, roughly.", ["It was 1,250 people, roughly."]),
    # Short replies without punctuation come out whole at the end.
    ("Sure thing", ["Sure thing"]),
    ("ok", ["ok"]),
    ("", []),
])
def test_splits(text: str, clauses: list[str]) -> None:
    assert _split(text) == clauses
    # The same whatever the tokenisation: one character at a time, or all at once.
    assert _split(text, list(text)) == clauses
    assert _split(text, [text]) == clauses


def test_first_clause_breaks_early_at_a_comma_later_ones_need_more() -> None:
    text = "The weather tomorrow looks sunny, with a high of 22, and a low of 10 in the evening, which is nice."
    assert _split(text) == ["The weather tomorrow looks sunny,",
                            "with a high of 22, and a low of 10 in the evening,", "which is nice."]
    # Too short to stand alone: no break after "Sure,".
    assert _split("Sure, I can help with that.") == ["Sure, I can help with that."]


def test_first_clause_word_cap_ends_it_after_whole_words_and_only_the_first() -> None:
    text = "The capital city of France is Paris, and it is lovely in spring, when the trees are out."
    clauses = _split(text, first_max_words=4)
    assert clauses[0] == "The capital city of"
    assert clauses[1:] == ["France is Paris, and it is lovely in spring,", "when the trees are out."]
    # The cut is the same however the tokens fall, even one character at a time (a speculative head start
    # and the reply must agree on it).
    assert _split(text, list(text), first_max_words=4) == clauses
    # A word is whole only once the next one has begun: "of" might still grow into "often".
    splitter = ClauseSplitter(first_max_words=4)
    assert splitter.feed("The capital city of") == []
    assert splitter.feed(" Fr") == ["The capital city of"]
    # A natural end within the cap is kept, and a short first sentence is not cut.
    assert _split("Paris is the capital. It is lovely.", first_max_words=4) == ["Paris is the capital.",
                                                                                "It is lovely."]
    assert _split("Sure, I can help with that.", first_max_words=4) == ["Sure, I can help", "with that."]
    # Chinese is measured by characters, not words.
    assert _split("中国的首都是北京。", first_max_words=2) == ["中国的首都是北京。"]


def test_waits_one_token_only_when_the_next_character_decides() -> None:
    splitter = ClauseSplitter()
    assert splitter.feed("It is late.") == []
    assert splitter.feed(" ") == ["It is late."]  # an ordinary word: released on the space
    assert splitter.feed("Ask Dr.") == []
    assert splitter.feed(" ") == []  # a title: never an end
    assert splitter.feed("Who. And e.g.") == ["Ask Dr. Who."]
    assert splitter.feed(" ") == []  # "e.g." then a capital would end it, lowercase would not: wait
    assert splitter.feed("this") == []
    assert splitter.flush() == "And e.g. this"


def test_very_long_clauses_are_cut_at_spaces() -> None:
    text = " ".join(f"word{i}" for i in range(150))
    clauses = _split(text, max_clause_chars=100)
    assert all(len(c) <= 100 for c in clauses)
    assert " ".join(clauses) == text
    # A single run with no space at all is cut at the limit.
    assert [len(c) for c in _split("x" * 250, max_clause_chars=100)] == [100, 100, 50]
    # A sentence end beyond the limit does not let a clause grow past it.
    long_sentence = ("a " * 150).strip() + ". Next."
    assert all(len(c) <= 100 for c in _split(long_sentence, [long_sentence], max_clause_chars=100))


def test_flush_resets_for_the_next_reply() -> None:
    splitter = ClauseSplitter()
    assert splitter.feed("The weather tomorrow looks sunny, ") == ["The weather tomorrow looks sunny,"]
    assert splitter.flush() is None
    # The next reply gets the short first-clause threshold again.
    assert splitter.feed("The weather tomorrow looks sunny, ") == ["The weather tomorrow looks sunny,"]


_WORD = st.sampled_from(["the", "Dr.", "e.g.", "3.5", "42.", "Hello,", "world.", "Yes!", "why?", "U.S.",
                         "and", "—", "…", "wait...", "J.", "1.", "ok", "A", "sunny;", "x" * 30])


@settings(max_examples=150, deadline=None)
@given(words=st.lists(_WORD, max_size=60), seps=st.lists(st.sampled_from([" ", " ", "\n", "  "]), min_size=60),
       cuts=st.lists(st.integers(min_value=1, max_value=7), min_size=1, max_size=400))
def test_no_text_is_lost_reordered_or_overlong(words: list[str], seps: list[str], cuts: list[int]) -> None:
    text = "".join(w + s for w, s in zip(words, seps, strict=False))
    tokens, position, i = [], 0, 0
    while position < len(text):  # arbitrary token boundaries, even mid-word
        step = cuts[i % len(cuts)]
        tokens.append(text[position:position + step])
        position += step
        i += 1
    clauses = _split(text, tokens, max_clause_chars=80, first_max_words=cuts[0])
    assert " ".join(clauses).split() == text.split()
    assert all(c and c == c.strip() for c in clauses)
    assert all(len(c) <= 80 + 3 for c in clauses)  # plus at most the punctuation closing the sentence


def test_take_words_hands_out_whole_words_only() -> None:
    splitter = ClauseSplitter()
    assert splitter.feed("The capital of Fra") == []
    assert splitter.take_words(4) is None
    assert splitter.take_words(3) == "The capital of"
    assert splitter.released == 1
    assert splitter.feed("nce is Paris. ") == ["France is Paris."]


@pytest.mark.parametrize(("text", "clauses"), [
    # Chinese punctuation ends sentences with no space after it.
    ("中国有三十四个省级行政区。你还想知道什么？", ["中国有三十四个省级行政区。", "你还想知道什么？"]),
    ("好的！我来说。", ["好的！", "我来说。"]),
    # A quotation keeps its closing mark.
    ("他说：“你好。”然后走了。", ["他说：“你好。”", "然后走了。"]),
    # Western punctuation straight before a Han character ends a sentence too.
    ("你好!我是助手.", ["你好!", "我是助手."]),
    ("今天很好，我们走吧。", ["今天很好，我们走吧。"]),
])
def test_splits_chinese(text: str, clauses: list[str]) -> None:
    assert _split(text, list(text)) == clauses
    assert _split(text, [text]) == clauses


def test_a_chinese_comma_breaks_a_clause_once_it_is_long_enough() -> None:
    text = "其中包括二十三个省，五个自治区，四个直辖市和两个特别行政区。"
    # streamed: a Han character weighs about a word, so nine of them make a first clause
    assert _split(text, list(text)) == ["其中包括二十三个省，", "五个自治区，四个直辖市和两个特别行政区。"]


def test_chinese_without_any_break_is_cut_between_characters() -> None:
    clauses = _split("这" * 200, list("这" * 200), max_clause_chars=90)
    assert "".join(clauses) == "这" * 200
    assert all(len(c) <= 30 for c in clauses)  # 90 weighted characters: 30 Han characters


def test_take_words_hands_out_chinese_by_character() -> None:
    splitter = ClauseSplitter()
    assert splitter.feed("中国有") == []
    assert splitter.take_words(4) is None
    assert splitter.take_words(3) == "中国有"
    assert splitter.feed("三十四个省。") == ["三十四个省。"]
