"""The reply pipeline: a slow first clause starts as an early phrase; cancellation stops TTS within a chunk."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from bargein.audio.codecs import AudioFormat
from bargein.engines.base import CancelToken, ChatMessage, GenerationOptions, WordTiming
from bargein.engines.fakes import FakeSynthesizer
from bargein.engines.speak.clauses import FIRST_CLAUSE_WORDS
from bargein.session.reply_pipeline import FIRST_PHRASE_WORDS, ReplyPipeline, ReplyPlan


class SlowWords:
    """Yields a fixed sentence one word per ``delay_s``."""

    def __init__(self, text: str, delay_s: float) -> None:
        self.text = text
        self.delay_s = delay_s
        self.yielded = 0

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        for index, word in enumerate(self.text.split(" ")):
            if cancel.cancelled:
                return
            await asyncio.sleep(self.delay_s)
            self.yielded += 1
            yield word if index == 0 else " " + word


class RecordingSink:
    def __init__(self, llm: SlowWords | None = None) -> None:
        self.llm = llm
        self.texts: list[tuple[int, str]] = []
        self.audio_ms = 0.0

    async def wait_for_room(self, response_id: str) -> None:
        return None

    def reply_text(self, response_id: str, text: str) -> None:
        self.texts.append((self.llm.yielded if self.llm else 0, text))

    def reply_audio(self, response_id: str, payload: bytes, duration_ms: float, words: Sequence[WordTiming]) -> None:
        self.audio_ms += duration_ms

    def reply_mark(self, response_id: str, stage: str) -> None:
        return None

    def reply_tokens(self, response_id: str, count: int) -> None:
        return None


def plan() -> ReplyPlan:
    return ReplyPlan("resp_1", [ChatMessage("user", "hi")], True, None, AudioFormat())


async def test_a_slow_first_sentence_is_spoken_from_an_early_phrase() -> None:
    assert FIRST_PHRASE_WORDS < FIRST_CLAUSE_WORDS  # else the clause's own cap always cuts first
    sentence = "The capital city of France is Paris and it is lovely in spring."
    llm = SlowWords(sentence, 0.15)
    sink = RecordingSink(llm)
    await ReplyPipeline(llm, FakeSynthesizer(), first_clause_deadline_s=0.2).run(plan(), sink, CancelToken())
    words_written, first = sink.texts[0]
    # the deadline passed before the clause's cap: the whole words so far went to speech, and the LLM went on
    assert first.split() == sentence.split()[:FIRST_PHRASE_WORDS]
    assert words_written < len(sentence.split())
    assert "".join(text for _, text in sink.texts).split() == sentence.split()


async def test_a_fast_first_sentence_keeps_its_natural_end() -> None:
    sink = RecordingSink()
    await ReplyPipeline(SlowWords("It's Paris. It is the capital.", 0.0), FakeSynthesizer()).run(
        plan(), sink, CancelToken())
    assert sink.texts[0][1] == "It's Paris."  # ended by its period, before the clause's word cap
