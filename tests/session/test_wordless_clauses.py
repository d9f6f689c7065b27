"""Clauses with nothing to say (an ellipsis, emoji, punctuation) are not sent to the synthesiser, and their
text stays in the reply's transcript where the model wrote it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest

from bargein.audio.codecs import AudioFormat
from bargein.engines.base import LanguageModel
from bargein.engines.fakes import FakeSynthesizer
from bargein.engines.speak.clauses import has_words
from bargein.session.private_clause import PrivateClause
from bargein.session.reply_pipeline import ReplyPipeline, ReplyPlan
from bargein.values import CancelToken, ChatMessage, GenerationOptions, SpeechChunk
from tests.session.test_reply_pipeline import RecordingSink


@pytest.mark.parametrize("text", ["...", "…", "😀", "🙂👍", "!?", " — ", "*", "（）", "-- ~"])
def test_a_clause_of_no_words_has_nothing_to_say(text: str) -> None:
    assert not has_words(text)


@pytest.mark.parametrize("text", ["Hi!", "3.", "你好。", "😀 ok", "é", "42%"])
def test_letters_and_digits_of_any_script_are_words(text: str) -> None:
    assert has_words(text)


class Fixed(LanguageModel):
    """A language model writing a fixed list of tokens."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        for token in self.tokens:
            yield token


class Recording(FakeSynthesizer):
    """The fake voice, remembering every text it was asked to speak."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        self.asked.append(text)
        async for chunk in super().synthesize(text, voice=voice, cancel=cancel, speed=speed):
            yield chunk


async def speak(tokens: list[str]) -> tuple[Recording, RecordingSink]:
    tts, sink = Recording(), RecordingSink()
    plan = ReplyPlan("resp_1", [ChatMessage("user", "hi")], True, None, AudioFormat())
    await ReplyPipeline(Fixed(tokens), tts).run(plan, sink, CancelToken())
    return tts, sink


@pytest.mark.parametrize("tokens", [
    ["Well... ", "\n", "😀😀\n", "That is all. ", "...\n", "Bye now."],
    ["Hello there.\n", "...\n", "🙂\n"],
    ["...\n", "🙂 Fine."],
])
async def test_wordless_clauses_are_not_synthesised_but_stay_in_the_transcript(tokens: list[str]) -> None:
    # before: "..." and "😀😀" went to the synthesiser (Kokoro returns nothing for them: a wasted call)
    tts, sink = await speak(tokens)
    assert tts.asked and all(has_words(text) for text in tts.asked)
    assert "".join(text for _, text in sink.texts).split() == "".join(tokens).split()


async def test_a_reply_of_only_emoji_is_silent_but_written() -> None:
    tts, sink = await speak(["🙂👍"])
    assert tts.asked == [] and sink.audio_ms == 0.0
    assert "".join(text for _, text in sink.texts) == "🙂👍"


async def test_a_wordless_private_clause_calls_no_synthesiser() -> None:
    tts = Recording()
    clause = PrivateClause(tts, "...", None, 1.0, CancelToken())
    assert [chunk async for chunk in clause.replay()] == []
    assert tts.asked == []
