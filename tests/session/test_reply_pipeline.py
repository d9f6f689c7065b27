"""The reply pipeline: a slow first clause starts as an early phrase, a later one is spoken in parts when the
audio runs short; cancellation stops TTS within a chunk."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence

import pytest

from bargein.audio.codecs import AudioFormat
from bargein.engines.base import LanguageModel
from bargein.engines.fakes import FakeSynthesizer
from bargein.engines.speak.clauses import FIRST_CLAUSE_WORDS
from bargein.session.history import Conversation
from bargein.session.outbound import Outbound
from bargein.session.playback import PlaybackEstimate
from bargein.session.playback_cushion import CUSHION_LOW_MS, HURRY_MIN_WORDS, PlaybackCushion
from bargein.session.reply_handle import Pause, ReplyHandle, ReplyWiring
from bargein.session.reply_pipeline import FIRST_PHRASE_WORDS, ReplyPipeline, ReplyPlan
from bargein.session.reply_sink import HandleSink
from bargein.session.response_events import ReplyState, assistant_item
from bargein.session.tool_use import PendingCalls
from bargein.values import CancelToken, ChatMessage, GenerationOptions, WordTiming


class SlowWords(LanguageModel):
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
        self.first_audio_at: float | None = None
        self.playback_clock = False
        """Answer ``audio_ahead_ms`` as a client playing each delta on arrival (else no cushion: no hurried clause)."""

    async def wait_for_room(self) -> None:
        return None

    def reply_text(self, text: str) -> None:
        self.texts.append((self.llm.yielded if self.llm else 0, text))

    def reply_audio(self, payload: bytes, duration_ms: float, words: Sequence[WordTiming]) -> None:
        if self.first_audio_at is None:
            self.first_audio_at = time.monotonic()
        self.audio_ms += duration_ms

    def audio_ahead_ms(self) -> float | None:
        if not self.playback_clock or self.first_audio_at is None:
            return None
        return self.audio_ms - 1000.0 * (time.monotonic() - self.first_audio_at)

    def reply_mark(self, stage: str) -> None:
        return None

    def reply_tokens(self, count: int) -> None:
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


SECOND = "Then you lower the eggs gently into the boiling water and leave them there for nine whole minutes."


async def test_a_slow_second_sentence_is_spoken_in_parts_when_the_audio_runs_short() -> None:
    # the first clause plays for about 0.8 s; the second sentence takes the model 1.2 s to write
    llm = SlowWords("Boil them first. " + SECOND, 0.06)
    sink = RecordingSink(llm)
    # the first clause's own deadline is out of the way: only the cushion may hurry a clause here
    sink.playback_clock = True
    await ReplyPipeline(llm, FakeSynthesizer(ms_per_char=50.0), first_clause_deadline_s=5.0).run(
        plan(), sink, CancelToken())
    clauses = [text.strip() for _, text in sink.texts]
    assert clauses[0] == "Boil them first."
    words_written, second = sink.texts[1]
    # released before its sentence was written, as whole words, at least the fewest a hurried clause may have
    assert words_written < len(llm.text.split())
    assert HURRY_MIN_WORDS <= len(second.split()) < len(SECOND.split())
    assert SECOND.startswith(second.strip())
    assert " ".join(clauses).split() == llm.text.split()


async def test_a_second_sentence_waits_for_its_end_while_the_first_still_plays() -> None:
    # the same writing speed, but the first clause plays for about 8 s: no reason to break the sentence
    llm = SlowWords("Boil them first. " + SECOND, 0.06)
    sink = RecordingSink(llm)
    sink.playback_clock = True
    await ReplyPipeline(llm, FakeSynthesizer(ms_per_char=500.0, chunk_ms=8000.0), first_clause_deadline_s=5.0).run(
        plan(), sink, CancelToken())
    assert [text.strip() for _, text in sink.texts] == ["Boil them first.", SECOND]


def test_the_cushion_runs_short_only_while_the_speech_stage_waits_for_text() -> None:
    ahead: list[float | None] = [None]
    cushion = PlaybackCushion(lambda: ahead[0])
    assert not cushion.running_short()  # nothing forwarded yet, or the reply is paused: nothing to run out of
    ahead[0] = CUSHION_LOW_MS + 100.0
    assert not cushion.running_short()
    ahead[0] = CUSHION_LOW_MS - 100.0
    assert cushion.running_short()
    cushion.speaking = True  # a clause is being synthesised: its audio is on its way
    assert not cushion.running_short()


def test_the_audio_ahead_is_what_was_forwarded_less_what_played_and_nothing_while_paused() -> None:
    state = ReplyState("resp_1", assistant_item("item_1", audio=True), True, AudioFormat("audio/pcm", 24_000), "alloy")
    now = [100.0]
    wiring = ReplyWiring(Outbound(), Conversation(), PendingCalls(lambda call_id: None))
    reply = ReplyHandle(state, wiring, playback=PlaybackEstimate(clock=lambda: now[0]))
    sink = HandleSink(reply, feed=lambda event: None, progress=lambda *told: None)
    assert sink.audio_ahead_ms() is None  # nothing has left yet
    state.item.audio_ms = 1500.0  # forwarded; 1,000 ms of it has left the socket so far
    reply.playback.on_sent(1000.0)
    now[0] += 0.4
    assert sink.audio_ahead_ms() == pytest.approx(1100.0)
    reply.paused = Pause(cut_ms=400.0, segment_item_id="item_user")
    assert sink.audio_ahead_ms() is None  # paused: nothing plays, nothing to hurry
