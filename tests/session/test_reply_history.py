"""What the conversation keeps of replies that are cut, paused, fail or call tools (fake engines, no socket)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np

from bargein.audio.codecs import AudioFormat
from bargein.engines.base import Engines, LanguageModel, LLMCapabilities, SpeechSynthesizer
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.session.history import Item, Part
from bargein.session.reply_pipeline import ReplyPipeline, ReplyPlan
from bargein.values import CancelToken, ChatMessage, GenerationOptions, ReplyPiece, SpeechChunk, ToolCall, WordTiming
from tests.support.session_harness import Harness, SilentRecognizer, say_tone

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


class LateCaller(LanguageModel):
    """To "talk": says a sentence, then calls ``get_weather`` once ``release`` is set; to anything else: "Fine."."""

    capabilities = LLMCapabilities(tools=True)

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.seen: list[list[ChatMessage]] = []

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        async for piece in self.stream_reply(messages, cancel=cancel, options=options):
            if isinstance(piece, str):
                yield piece

    async def stream_reply(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                           options: GenerationOptions | None = None) -> AsyncIterator[ReplyPiece]:
        self.seen.append(list(messages))
        if messages[-1].role == "user" and messages[-1].content == "talk":
            for word in ("Let", "me", "look", "that", "up", "for", "you,", "it", "takes", "a", "moment."):
                await asyncio.sleep(0.01)
                yield word + " "
            await self.release.wait()
            yield ToolCall("get_weather", "call_late", '{"city": "Paris"}')
            return
        yield "Fine."


async def test_a_tool_call_made_while_the_reply_is_paused_does_not_follow_the_turn_that_cut_it() -> None:
    """The model calls a client tool while the user talks over its reply; the user's turn cuts the reply. The call
    was never announced while the reply was paused, so it is dropped with the reply: neither the history nor the
    next prompt holds it after the user's words (the next reply would answer an unanswered tool instead)."""
    llm = LateCaller()
    h = Harness(Engines(FakeVad(), FakeRecognizer(("what time is it",), delay_s=0.3), llm, FakeSynthesizer()))
    first = await _asked_to_talk(h)
    await say_tone(h, 0.8, 0.8)  # the user's question over the reply: it pauses, and the turn is committed
    await h.drain(until="input_audio_buffer.committed")
    llm.release.set()  # the model's call comes while the turn is being judged
    done = await _done(h, first)
    assert done["status"] == "cancelled"
    await h.drain(until="response.created")
    answer = h.events[-1]["response"]["id"]
    await _done(h, answer)
    prompt = llm.seen[-1]
    assert prompt[-1].role == "user" and prompt[-1].content == "what time is it", prompt[-3:]
    assert not any(m.role == "tool" for m in prompt)
    assert not [e for e in h.events if e["type"] == "response.function_call_arguments.done"]
    assert not [item for item in h.session.conversation if item.type == "function_call"]
    assert "call_late" not in h.session.replies.pending
    await h.session.close()


async def _done(h: Harness, response_id: str, timeout: float = 15.0) -> dict[str, Any]:
    """The ``response`` of ``response_id``'s ``response.done``, draining until it comes."""
    while True:
        for event in h.events:
            if event["type"] == "response.done" and event["response"]["id"] == response_id:
                return dict(event["response"])
        await h.drain(until="response.done", timeout=timeout)


async def _asked_to_talk(h: Harness) -> str:
    """With the weather tool on offer, the user types "talk" and asks for a reply; its id once its audio plays."""
    await h.send(type="session.update", session={"tools": [WEATHER]})
    await h.send(type="conversation.item.create", item={"type": "message", "role": "user",
                                                        "content": [{"type": "input_text", "text": "talk"}]})
    await h.send(type="response.create")
    await h.drain(until="response.output_audio.delta")
    return str(h.events[-1]["response_id"])


async def test_a_tool_call_held_over_a_false_interruption_is_announced_when_the_reply_resumes() -> None:
    llm = LateCaller()
    h = Harness(Engines(FakeVad(), SilentRecognizer(), llm, FakeSynthesizer()))
    reply = await _asked_to_talk(h)
    await say_tone(h, 0.2, 0.0)  # a cough over the reply pauses it
    await h.drain(until="bargein.reply.paused")
    llm.release.set()
    await asyncio.sleep(0.1)  # the model calls the tool while the reply is paused
    assert not [e for e in h.events if e["type"] == "response.output_item.added" and e["output_index"] == 1]
    await say_tone(h, 0.0, 0.8)  # the cough is noise: the reply resumes
    done = await _done(h, reply)
    kinds = [e["type"] for e in h.events]
    assert kinds.index("bargein.reply.resumed") < kinds.index("response.function_call_arguments.done")
    assert done["status"] == "completed" and done["output"][-1]["call_id"] == "call_late"
    assert "call_late" in h.session.replies.pending
    await h.session.close()


class FailsMidSentence(LanguageModel):
    """Writes one long clause, then fails while its speech is still being made."""

    async def stream(self, messages: Sequence[ChatMessage], *, cancel: CancelToken,
                     options: GenerationOptions | None = None) -> AsyncIterator[str]:
        for word in ("Unquestionably", "extraordinarily", "uncharacteristic", "circumstances,", "and"):
            yield word + " "
        await asyncio.sleep(0.3)  # the first clause is being spoken, paced to real time
        raise RuntimeError("the model's worker died")


async def _failed_reply(h: Harness) -> dict[str, Any]:
    """The user types "talk" and asks for a reply, which fails mid-clause: its ``response.done``'s ``response``."""
    await h.send(type="conversation.item.create", item={"type": "message", "role": "user",
                                                        "content": [{"type": "input_text", "text": "talk"}]})
    await h.send(type="response.create")
    await h.drain(until="response.created")
    return await _done(h, h.events[-1]["response"]["id"])


async def test_a_reply_failing_mid_clause_keeps_only_the_words_whose_audio_went_out() -> None:
    """The clause's transcript goes out with its first audio; the engine fails before the rest of its audio is
    made. The client heard only the audio sent, so the history (and ``response.done``) keeps only those words."""
    h = Harness(Engines(FakeVad(), FakeRecognizer(), FailsMidSentence(), FakeSynthesizer()))
    done = await _failed_reply(h)
    assert done["status"] == "failed"
    sent_ms = sum(len(base64.b64decode(e["delta"])) for e in h.events
                  if e["type"] == "response.output_audio.delta") / 48.0
    clause = "Unquestionably extraordinarily uncharacteristic circumstances,"
    assert sent_ms < 0.8 * len(clause) * 60.0, "the test needs the failure to come mid-clause"
    heard = done["output"][0]["content"][0]["transcript"]
    assert heard and clause.startswith(heard) and heard != clause, heard
    messages = h.session.conversation.chat_messages(None)
    assert messages[-1].role == "assistant" and messages[-1].content == heard
    await h.session.close()


class WordSink:
    """Collects a reply's text and its word timings, placed in the reply's audio as the item places them."""

    def __init__(self) -> None:
        self.text = ""
        self.audio_ms = 0.0
        self.words: list[WordTiming] = []

    async def wait_for_room(self) -> None:
        return None

    def audio_ahead_ms(self) -> float | None:
        return None  # no playback clock: clauses keep their natural ends

    def reply_text(self, text: str) -> None:
        self.text += text

    def reply_audio(self, payload: bytes, duration_ms: float,
                    words: Sequence[WordTiming]) -> None:
        self.words += [WordTiming(w.word, w.start_ms + self.audio_ms, w.end_ms + self.audio_ms) for w in words]
        self.audio_ms += duration_ms

    def reply_mark(self, stage: str) -> None:
        return None

    def reply_tokens(self, count: int) -> None:
        return None

    def reply_tool_call(self, call: ToolCall, *, after_words: bool = False) -> None:
        return None

    def reply_server_call(self, call: ToolCall, outcome: Any) -> None:
        return None


async def test_a_word_starting_in_a_chunk_s_crossfaded_end_keeps_its_timing() -> None:
    """The crossfader holds back each chunk's last 8 ms and clamps a word that starts there to the end of the audio
    it emits. That word must still reach the item: the heard text is rebuilt from the word timings, so a word lost
    there is a word missing from the middle of every cut reply's history."""
    llm = FakeLanguageModel(filler="It is a fine day today and I hope you enjoy it.")
    sink = WordSink()
    plan = ReplyPlan("resp_1", [ChatMessage("user", "what is the weather like today")], True, None, AudioFormat())
    await ReplyPipeline(llm, FakeSynthesizer(ms_per_char=47.0)).run(plan, sink, CancelToken())
    assert [w.word for w in sink.words] == sink.text.split()
    heard = Item("item_1", "assistant", [Part("output_audio", sink.text)], audio_ms=sink.audio_ms, words=sink.words)
    heard.heard_ms = sink.audio_ms  # the client played all of it, and said so
    assert heard.heard_text() == sink.text


async def test_speech_while_the_client_still_plays_a_failed_reply_cuts_it_to_what_was_played() -> None:
    """A failed reply's audio already sent keeps playing on the client; the user talking over it cuts the history
    at the playback estimate, as for a reply that completed."""
    h = Harness(Engines(FakeVad(), FakeRecognizer(), FailsMidSentence(), FakeSynthesizer()))
    done = await _failed_reply(h)
    sent = done["output"][0]["content"][0]["transcript"]
    await say_tone(h, 0.3, 0.0)  # at once: the client has played well under the second and more it was sent
    await h.drain(until="input_audio_buffer.speech_started")
    item = h.session.conversation.get(done["output"][0]["id"])
    assert sent.startswith(item.heard_text()) and item.heard_text() != sent, (item.heard_text(), sent)
    await h.session.close()


CARRY_RATE = 24_000
EMITTED = 7_874
"""Samples emitted of the first chunk: a length (about 1 in 200 at 24 kHz) where the last delta's start plus its
duration, summed in floats, lands one ulp past the audio's length."""
OVERLAP = 192
"""The crossfader's 8 ms at 24 kHz."""


class TwoChunks(SpeechSynthesizer):
    """A 24 kHz synthesiser (no resampling) whose first chunk's last word starts in the held-back overlap."""

    sample_rate = CARRY_RATE

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        first = EMITTED + OVERLAP
        yield SpeechChunk(np.full(first, 0.1, np.float32), CARRY_RATE,
                          (WordTiming("one", 0.0, 100.0), WordTiming("two", 1000.0 * (EMITTED + 50) / CARRY_RATE,
                                                                      1000.0 * first / CARRY_RATE)))
        yield SpeechChunk(np.full(4_800, 0.1, np.float32), CARRY_RATE, (WordTiming("three", 20.0, 150.0),))


async def test_a_word_clamped_to_a_chunk_end_is_sent_once() -> None:
    """The word the crossfader clamps to the end of the first chunk goes with the next chunk only, whatever the
    rounding of the last delta's bounds (it was sent twice, and a cut reply's heard text read "two two")."""
    sink = WordSink()
    plan = ReplyPlan("resp_1", [ChatMessage("user", "hi")], True, None, AudioFormat())
    await ReplyPipeline(FakeLanguageModel(filler="Hi."), TwoChunks()).run(plan, sink, CancelToken())
    words = [w.word for w in sink.words]
    assert words.count("two") == words.count("one"), (sink.text, words)
