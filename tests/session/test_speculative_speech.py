"""The first clause is spoken privately before the commit: used by the reply, never heard before the commit,
thrown away when the user goes on speaking."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.session import realtime_session
from bargein.session.outbound import Outbound, Outgoing
from bargein.session.speculation import PrefetchedReply
from bargein.values import CancelToken, ChatMessage, GenerationOptions, SpeechChunk
from tests.support.session_harness import Harness, reply_playing
from tests.support.tones import quiet, stream, tone


class LoggedSynthesizer(FakeSynthesizer):
    """The fake TTS, writing each clause it is asked for into a shared log."""

    def __init__(self, log: list[tuple[str, str]]) -> None:
        super().__init__(ms_per_char=20.0)
        self.log = log
        self.cancelled: list[str] = []

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        self.log.append(("tts", text))
        async for chunk in super().synthesize(text, voice=voice, cancel=cancel, speed=speed):
            yield chunk
            await asyncio.sleep(0.001)
        if cancel.cancelled:
            self.cancelled.append(text)


def logged_session(log: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch) -> tuple[Harness, LoggedSynthesizer]:
    """A session whose outgoing events and TTS calls go into one log, in the order they happen."""

    class LoggedOutbound(Outbound):
        def put(self, item: Outgoing) -> None:
            log.append(("event", item.event["type"]))
            super().put(item)

    monkeypatch.setattr(realtime_session, "Outbound", LoggedOutbound)
    tts = LoggedSynthesizer(log)
    engines = Engines(FakeVad(), FakeRecognizer(("what time is it",)),
                      FakeLanguageModel(filler="It is noon. Have a nice day."), tts)
    return Harness(engines), tts


async def test_the_first_clause_is_spoken_before_the_commit_but_heard_only_after_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[tuple[str, str]] = []
    h, _ = logged_session(log, monkeypatch)
    await stream(h, np.concatenate([quiet(0.3), tone(0.8), quiet(1.5)]))
    await h.drain(until="response.done")
    commit = log.index(("event", "input_audio_buffer.committed"))
    first_tts = next(i for i, entry in enumerate(log) if entry[0] == "tts")
    assert first_tts < commit, "the first clause was synthesised during the endpoint silence"
    first_audio = log.index(("event", "response.output_audio.delta"))
    assert first_audio > commit, "no speculative audio reaches the client before the commit"
    clauses = [text for kind, text in log if kind == "tts"]
    assert len(clauses) == len(set(clauses)), "the reply used the early speech instead of speaking it again"
    counts = h.session.speculation
    assert counts.tts_started == 1 and counts.tts_used == 1
    transcript = [e for e in h.events if e["type"] == "response.output_audio_transcript.done"][0]["transcript"]
    assert transcript.startswith(clauses[0])
    await h.session.close()


async def test_the_early_speech_is_discarded_when_the_user_goes_on_speaking(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[tuple[str, str]] = []
    h, _ = logged_session(log, monkeypatch)
    # a 350 ms pause: long enough for the speculation to speak, shorter than the 500 ms endpoint
    await stream(h, np.concatenate([quiet(0.3), tone(0.8), quiet(0.35), tone(0.6, 220.0), quiet(1.5)]))
    await h.drain(until="response.done")
    counts = h.session.speculation
    assert counts.tts_started == 2, "spoken at both silences"
    assert counts.tts_used == 1, "only the speech of the final silence was used"
    commit = log.index(("event", "input_audio_buffer.committed"))
    assert all(entry != ("event", "response.output_audio.delta") for entry in log[:commit])
    await h.session.close()


async def test_a_discarded_clause_stops_the_tts_and_keeps_nothing() -> None:
    log: list[tuple[str, str]] = []
    tts = LoggedSynthesizer(log)
    tts.ms_per_char = 400.0  # a long clause: many chunks, still being made when discarded
    reply = PrefetchedReply(FakeLanguageModel(filler="It is noon."), [ChatMessage("user", "time?")],
                            GenerationOptions(), tts, "alloy")
    for _ in range(200):
        await asyncio.sleep(0.001)
        if reply.first_clause is not None and reply.first_clause.chunks:
            break
    first = reply.first_clause
    assert first is not None and first.chunks
    reply.discard()
    assert first.chunks == [] and reply.spoken(first.clause, "alloy", 1.0) is None
    await asyncio.sleep(0.05)
    assert first.done and first.chunks == []
    assert tts.cancelled == [first.clause]


async def test_the_early_speech_is_used_only_for_the_same_clause_voice_and_pace() -> None:
    tts = LoggedSynthesizer([])
    reply = PrefetchedReply(FakeLanguageModel(), [ChatMessage("user", "hi")], GenerationOptions(), tts, "alloy")
    for _ in range(200):
        await asyncio.sleep(0.001)
        if reply.first_clause is not None and reply.first_clause.done:
            break
    first = reply.first_clause
    assert first is not None
    assert reply.spoken(first.clause, "ash", 1.0) is None
    assert reply.spoken(first.clause + " more", "alloy", 1.0) is None
    assert reply.spoken(first.clause, "alloy", 1.25) is None
    replayed = reply.spoken(first.clause, "alloy", 1.0)
    assert replayed is not None
    chunks = [chunk async for chunk in replayed]
    assert len(chunks) == len(first.chunks) > 0


async def test_a_clause_not_begun_at_adoption_is_left_to_the_reply() -> None:
    log: list[tuple[str, str]] = []
    tts = LoggedSynthesizer(log)
    reply = PrefetchedReply(FakeLanguageModel(filler="It is noon.", token_delay_s=0.01),
                            [ChatMessage("user", "time?")], GenerationOptions(), tts, "alloy")
    tokens = [token async for token in reply.adopt(CancelToken())]
    assert tokens and reply.first_clause is None and log == []


async def test_a_turn_spoken_over_a_reply_is_prepared_during_the_pause_with_the_reply_cut_where_it_paused() -> None:
    llm = FakeLanguageModel(filler=" ".join(["The old walls of the city were built long ago."] * 20))
    h = Harness(Engines(FakeVad(), FakeRecognizer(("tell me more about the old city walls please",)), llm,
                        FakeSynthesizer(ms_per_char=20.0)))
    first = await reply_playing(h)  # the client plays the reply's first words
    await stream(h, np.concatenate([tone(0.8), quiet(1.2)]))
    await h.drain(until="response.done")
    done = h.events[-1]["response"]
    assert done["id"] == first and done["status"] == "cancelled"
    paused = next(e for e in h.events if e["type"] == "bargein.reply.paused")
    await h.drain(until="response.output_audio.delta")  # the answer is playing
    assert h.events[-1]["response_id"] != first
    counts = h.session.speculation
    assert counts.llm_used == 1, "the reply adopted the answer prepared during the pause"
    assert len(llm.seen) == 2, "the model was asked once for the first reply and once, early, for the second"
    cut = next(item for item in h.session.conversation if item.id == done["output"][0]["id"])
    assert paused["audio_end_ms"] > 0 and cut.heard_ms == paused["audio_end_ms"]
    heard = cut.heard_text()
    assert heard and len(heard) < len(cut.parts[0].text), "some of the reply was heard, not all of it"
    # the early answer was asked with the reply as the cancel cut it: only what was heard
    assert [m.content for m in llm.seen[1] if m.role == "assistant"] == [heard]
    await h.session.close()


async def test_a_head_start_made_before_the_tools_changed_is_not_adopted() -> None:
    """The answer prepared in the endpoint's silence was asked without tools; a session.update then offers one.
    The reply must be asked again with the tool on offer, not handed the stream made without it."""
    weather = {"type": "function", "name": "get_weather", "description": "Weather in a city",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    llm = FakeLanguageModel()
    h = Harness(Engines(FakeVad(), FakeRecognizer(("what is the weather in paris",)), llm, FakeSynthesizer()))
    await stream(h, np.concatenate([quiet(0.3), tone(0.8), quiet(0.3)]))
    counts = h.session.speculation
    assert counts.llm_started == 1 and len(llm.seen) == 1, "the head start began (without tools)"
    await h.send(type="session.update", session={"tools": [weather]})
    await stream(h, quiet(1.2))
    await h.drain(until="response.done")
    assert counts.llm_used == 0 and counts.llm_discarded == 1 and len(llm.seen) == 2
    assert [tool["name"] for tool in llm.seen_options[-1].tools] == ["get_weather"]
    await h.session.close()
