"""A reply adopting a speculative head start at each moment of its first clause: before the first token, in the
middle of the first clause, and while or after the clause is spoken privately. The first clause is synthesised
once whatever the moment, its audio reaches the client as soon as a chunk of it exists, and the early-phrase
deadline counts from the model's first token, not from the adoption (a timeline the test steps by hand)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from types import SimpleNamespace

import pytest

from bargein.audio.codecs import AudioFormat
from bargein.engines.base import LanguageModel
from bargein.engines.fakes import FakeSynthesizer
from bargein.session import reply_pipeline, speculation
from bargein.session.reply_pipeline import ReplyPipeline, ReplyPlan
from bargein.session.speculation import PrefetchedReply
from bargein.values import CancelToken, ChatMessage, GenerationOptions, SpeechChunk, WordTiming

MESSAGES = [ChatMessage("user", "what time is it")]
TOKENS = ["It", " is", " noon", " today", " in", " Paris", "."]
FIRST_CLAUSE = "It is noon"
"""The first clause's cap (three whole words) ends it once " today" begins."""


class HandFedModel(LanguageModel):
    """Writes exactly the tokens the test hands it, when it hands them."""

    def __init__(self) -> None:
        self.tokens: asyncio.Queue[str | None] = asyncio.Queue()

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        while (token := await self.tokens.get()) is not None:
            yield token


class HandPacedSynthesizer(FakeSynthesizer):
    """The fake TTS, making each chunk only when the test allows one more (any call), and logging the calls."""

    def __init__(self) -> None:
        super().__init__(ms_per_char=40.0, chunk_ms=100.0)
        self.calls: list[str] = []
        self.chunks_made: list[str] = []
        self.allowance = asyncio.Semaphore(0)

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        self.calls.append(text)
        async for chunk in super().synthesize(text, voice=voice, cancel=cancel, speed=speed):
            await self.allowance.acquire()
            self.chunks_made.append(text)
            yield chunk

    def allow(self, chunks: int) -> None:
        """Let the synthesiser make ``chunks`` more chunks."""
        for _ in range(chunks):
            self.allowance.release()


class Client:
    """The reply's sink: what reached the client, in order."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.deltas = 0

    async def wait_for_room(self) -> None:
        return None

    def reply_text(self, text: str) -> None:
        self.texts.append(text)

    def reply_audio(self, payload: bytes, duration_ms: float, words: Sequence[WordTiming]) -> None:
        self.deltas += 1

    def audio_ahead_ms(self) -> float | None:
        return None

    def reply_mark(self, stage: str) -> None:
        return None

    def reply_tokens(self, count: int) -> None:
        return None


async def settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0)


async def feed(llm: HandFedModel, tokens: Sequence[str]) -> None:
    for token in tokens:
        llm.tokens.put_nowait(token)
        await settle()


def start_reply(head: PrefetchedReply, tts: HandPacedSynthesizer, client: Client) -> asyncio.Task[None]:
    cancel = CancelToken()
    plan = ReplyPlan("resp_1", MESSAGES, True, "alloy", AudioFormat(), prefetched=head.adopt(cancel),
                     prespoken=head.spoken, prefetched_since=head.unspoken_since)  # as the reply runner plans it
    return asyncio.create_task(ReplyPipeline(HandFedModel(), tts).run(plan, client, cancel))


async def finish(llm: HandFedModel, tts: HandPacedSynthesizer, reply: asyncio.Task[None], fed: int) -> None:
    await feed(llm, TOKENS[fed:])
    llm.tokens.put_nowait(None)
    tts.allow(100)
    await asyncio.wait_for(reply, 5.0)


@pytest.mark.parametrize("fed_before_adoption", [0, 1, 2, 3])
async def test_a_head_start_adopted_before_its_first_clause_is_complete_is_spoken_once_by_the_reply(
        fed_before_adoption: int) -> None:
    llm, tts, client = HandFedModel(), HandPacedSynthesizer(), Client()
    head = PrefetchedReply(llm, MESSAGES, GenerationOptions(), tts, "alloy")
    await feed(llm, TOKENS[:fed_before_adoption])
    reply = start_reply(head, tts, client)
    await feed(llm, TOKENS[fed_before_adoption:4])
    assert head.first_clause is None and tts.calls == [FIRST_CLAUSE]  # the reply speaks it as soon as it is whole
    tts.allow(1)
    await settle()
    assert client.deltas > 0  # its first chunk went out at once, before the model wrote on
    await finish(llm, tts, reply, 4)
    assert tts.calls.count(FIRST_CLAUSE) == 1
    assert "".join(client.texts).split() == "".join(TOKENS).split()


@pytest.mark.parametrize("chunks_before_adoption", [0, 1, 99])
async def test_a_head_start_adopted_while_or_after_its_clause_is_spoken_privately_replays_it_without_waiting(
        chunks_before_adoption: int) -> None:
    llm, tts, client = HandFedModel(), HandPacedSynthesizer(), Client()
    head = PrefetchedReply(llm, MESSAGES, GenerationOptions(), tts, "alloy")
    await feed(llm, TOKENS[:4])
    assert head.first_clause is not None and head.first_clause.clause == FIRST_CLAUSE
    tts.allow(chunks_before_adoption)
    await settle()
    private = head.first_clause
    reply = start_reply(head, tts, client)
    await settle()
    if chunks_before_adoption == 0:
        assert client.deltas == 0
        tts.allow(1)
        await settle()
    # the first chunk made reaches the client without waiting for the rest of the clause
    assert client.deltas > 0
    assert chunks_before_adoption == 99 or not private.done
    await finish(llm, tts, reply, 4)
    assert tts.calls.count(FIRST_CLAUSE) == 1  # never synthesised again
    assert tts.chunks_made.count(FIRST_CLAUSE) == len(private.chunks)
    assert "".join(client.texts).split() == "".join(TOKENS).split()


async def test_the_early_phrase_deadline_counts_from_the_head_starts_first_token(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The model was slow since its first token, written before the commit: the reply adopting it hands out the
    early phrase on the deadline counted from that token, as it would had it started the stream itself."""
    now = [100.0]
    monkeypatch.setattr(reply_pipeline, "time", SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(speculation, "time", SimpleNamespace(monotonic=lambda: now[0]))
    llm, tts, client = HandFedModel(), HandPacedSynthesizer(), Client()
    tts.allow(100)
    head = PrefetchedReply(llm, MESSAGES, GenerationOptions(), tts, "alloy")
    await feed(llm, ["Well", " you"])  # the first token at 100.0 s
    now[0] = 100.2  # the commit, 200 ms later: the reply adopts the stream
    reply = start_reply(head, tts, client)
    await settle()
    assert tts.calls == []
    now[0] = 100.35  # 350 ms after the first token, past the 300 ms deadline (150 ms after the adoption)
    await feed(llm, [" see"])
    assert tts.calls == ["Well you"]
    await feed(llm, [" it", "."])
    llm.tokens.put_nowait(None)
    await asyncio.wait_for(reply, 5.0)


async def test_a_clause_spoken_privately_is_replayed_whole_however_slow_its_words_were(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The head start's first clause came whole but past the deadline and was spoken privately: the reply, reading
    its tokens from the buffer, cuts the same clause (no early phrase) and replays that speech, never synthesising
    it again."""
    now = [100.0]
    monkeypatch.setattr(reply_pipeline, "time", SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(speculation, "time", SimpleNamespace(monotonic=lambda: now[0]))
    llm, tts, client = HandFedModel(), HandPacedSynthesizer(), Client()
    tts.allow(100)
    head = PrefetchedReply(llm, MESSAGES, GenerationOptions(), tts, "alloy")
    await feed(llm, TOKENS[:2])
    now[0] = 100.5
    await feed(llm, TOKENS[2:4])
    assert head.first_clause is not None and head.first_clause.clause == FIRST_CLAUSE
    now[0] = 100.6
    reply = start_reply(head, tts, client)
    await finish(llm, tts, reply, 4)
    assert tts.calls.count(FIRST_CLAUSE) == 1 and tts.calls[0] == FIRST_CLAUSE
    assert client.texts[0] == FIRST_CLAUSE
