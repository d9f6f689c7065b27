"""Edges of the transcribe stage: items with several clips, long items recognised in slices."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import numpy as np

from bargein.engines.base import Engines, SpeechRecognizer
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.session.history import Item, Part
from bargein.session.outbound import Outgoing
from bargein.session.realtime_session import RealtimeSession
from bargein.session.transcription import SLICE_S, Transcriber
from bargein.values import Transcript, WordTiming


class GatedRecognizer(SpeechRecognizer):
    """The n-th recognition answers ``texts[n]`` once ``gates[n]`` is set (no gate: at once)."""

    def __init__(self, texts: list[str], gates: dict[int, asyncio.Event]) -> None:
        self.texts = texts
        self.gates = gates
        self.calls = 0

    async def transcribe(self, audio: Any, *, language: str | None = None, prompt: str | None = None) -> Transcript:
        index = self.calls
        self.calls += 1
        if index in self.gates:
            await self.gates[index].wait()
        return Transcript(self.texts[index])


class SliceRecognizer(SpeechRecognizer):
    """Each slice is heard as ``text``, one word a second of audio with a word probability of 0.5."""

    def __init__(self, text: str, language: str = "en") -> None:
        self.text = text
        self.language = language

    async def transcribe(self, audio: Any, *, language: str | None = None, prompt: str | None = None) -> Transcript:
        seconds = range(len(audio) // 16_000)
        words = tuple(WordTiming(self.text, 1000.0 * s, 1000.0 * s + 500.0, 0.5) for s in seconds)
        return Transcript(self.text, language=self.language, words=words)


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_an_item_with_two_clips_is_waited_for_until_both_are_transcribed() -> None:
    # conversation.item.create with two input_audio parts: the second clip's recognition is slower
    gate = asyncio.Event()
    transcriber = Transcriber(GatedRecognizer(["first", "second"], {1: gate}), lambda _o: None,
                              lambda *_args: None, lambda: (None, None))
    item = Item("item_1", "user", [Part("input_audio"), Part("input_audio")])
    transcriber.start(item, np.zeros(8000, np.float32), content_index=0)
    transcriber.start(item, np.zeros(8000, np.float32), content_index=1)
    await _settle()
    assert item.parts[0].text == "first" and item.parts[1].text == ""
    # a reply waits for the words (wait_all), and a closing session cancels what is left (tasks)
    assert len(transcriber.tasks()) == 1
    waiting = asyncio.create_task(transcriber.wait_all())
    await _settle()
    assert not waiting.done()
    gate.set()
    await waiting
    assert item.parts[1].text == "second" and transcriber.tasks() == []


async def test_a_long_item_keeps_every_slices_words_and_logprobs() -> None:
    sent: list[Outgoing] = []
    heard: list[Transcript | None] = []
    transcriber = Transcriber(SliceRecognizer("word"), sent.append, lambda _i, t, _p, _w: heard.append(t),
                              lambda: (None, None), logprobs=lambda: True)
    item = Item("item_1", "user", [Part("input_audio")])
    seconds = int(2 * SLICE_S + 4)  # three slices: 28 s, 28 s and 4 s
    await transcriber.recognise(item, np.full(seconds * 16_000, 0.1, np.float32), 0)
    completed = sent[0].event
    assert completed["type"] == "conversation.item.input_audio_transcription.completed"
    assert len(completed["logprobs"]) == seconds
    transcript = heard[0]
    assert transcript is not None
    # the words are timed from the start of the item, not of their slice
    assert [w.start_ms for w in transcript.words] == [1000.0 * s for s in range(seconds)]


async def test_a_long_mandarin_item_is_stitched_without_spaces_between_slices() -> None:
    sent: list[Outgoing] = []
    transcriber = Transcriber(SliceRecognizer("你好", language="zh"), sent.append, lambda *_a: None,
                              lambda: ("zh", None))
    item = Item("item_1", "user", [Part("input_audio")])
    await transcriber.recognise(item, np.full(int(2 * SLICE_S * 16_000) + 16_000, 0.1, np.float32), 0)
    assert sent[0].event["transcript"] == "你好你好你好"


async def test_a_long_english_item_is_stitched_with_spaces() -> None:
    sent: list[Outgoing] = []
    transcriber = Transcriber(SliceRecognizer("hello."), sent.append, lambda *_a: None, lambda: ("en", None))
    item = Item("item_1", "user", [Part("input_audio")])
    await transcriber.recognise(item, np.full(int(SLICE_S * 16_000) + 16_000, 0.1, np.float32), 0)
    assert sent[0].event["transcript"] == "hello. hello."


async def test_an_item_deleted_while_it_is_recognised_gets_no_more_events_but_its_turn_still_hears() -> None:
    sent: list[Outgoing] = []
    heard: list[Transcript | None] = []
    deleted: set[str] = set()
    gate = asyncio.Event()
    transcriber = Transcriber(GatedRecognizer(["hello"], {0: gate}), sent.append,
                              lambda _i, t, _p, _w: heard.append(t), lambda: (None, None),
                              present=lambda item: item.id not in deleted)
    item = Item("item_1", "user", [Part("input_audio")])
    transcriber.start(item, np.zeros(8000, np.float32), content_index=0)
    await _settle()
    deleted.add("item_1")  # conversation.item.delete, answered with conversation.item.deleted
    gate.set()
    await transcriber.wait_all()
    assert sent == []
    assert heard == [Transcript("hello")]


async def test_a_session_sends_nothing_more_of_an_item_deleted_while_it_is_recognised() -> None:
    """The client deleted the item: after ``conversation.item.deleted`` no transcription or ``item.done`` of it."""
    session = RealtimeSession(Engines(FakeVad(), FakeRecognizer(delay_s=0.05), FakeLanguageModel(), FakeSynthesizer()))
    session.start()
    pcm = (np.sin(np.arange(24000) / 10) * 8000).astype("<i2").tobytes()
    await session.handle_message(json.dumps({"type": "conversation.item.create", "item": {
        "id": "item_gone", "type": "message", "role": "user",
        "content": [{"type": "input_audio", "audio": base64.b64encode(pcm).decode()}]}}))
    await session.handle_message(json.dumps({"type": "conversation.item.delete", "item_id": "item_gone"}))
    await session.transcriber.wait_all()
    sent = []
    while len(session.outbound):
        sent.append((await session.outbound.get()).event)
    await session.close()
    deleted = next(i for i, e in enumerate(sent) if e["type"] == "conversation.item.deleted")
    assert not [e["type"] for e in sent[deleted + 1:]
                if e.get("item_id") == "item_gone" or (e.get("item") or {}).get("id") == "item_gone"]


async def test_an_item_deleted_and_created_again_with_its_id_keeps_both_recognitions_waited_for() -> None:
    """The client deletes an item while it is recognised and creates another with the same id: the first
    recognition still runs, so a reply still waits for it and a closing session still cancels it."""
    gate = asyncio.Event()
    heard: list[Transcript | None] = []
    transcriber = Transcriber(GatedRecognizer(["first", "second"], {0: gate}), lambda _o: None,
                              lambda _i, t, _p, _w: heard.append(t), lambda: (None, None))
    transcriber.start(Item("item_1", "user", [Part("input_audio")]), np.zeros(8000, np.float32), content_index=0)
    await _settle()
    transcriber.start(Item("item_1", "user", [Part("input_audio")]), np.zeros(8000, np.float32), content_index=0)
    await _settle()
    assert heard == [Transcript("second")]
    assert len(transcriber.tasks()) == 1, "the first recognition is still running"
    waiting = asyncio.create_task(transcriber.wait_all())
    await _settle()
    assert not waiting.done()
    gate.set()
    await waiting
    assert heard == [Transcript("second"), Transcript("first")] and transcriber.tasks() == []


async def test_a_closing_session_cancels_the_recognition_of_an_item_whose_id_was_reused() -> None:
    gate = asyncio.Event()
    transcriber = Transcriber(GatedRecognizer(["first", "second"], {0: gate, 1: gate}), lambda _o: None,
                              lambda *_args: None, lambda: (None, None))
    transcriber.start(Item("item_1", "user", [Part("input_audio")]), np.zeros(8000, np.float32), content_index=0)
    await _settle()
    transcriber.start(Item("item_1", "user", [Part("input_audio")]), np.zeros(8000, np.float32), content_index=0)
    await _settle()
    running = transcriber.tasks()
    assert len(running) == 2
    for task in running:
        task.cancel()
    await transcriber.wait_all()
    assert all(task.cancelled() for task in running) and transcriber.tasks() == []


async def test_a_session_closing_after_an_item_id_was_reused_stops_both_recognitions() -> None:
    """conversation.item.create, .delete, and .create again with the same id while the first is recognised: the
    session's close cancels both recognitions, not only the newest."""
    session = RealtimeSession(Engines(FakeVad(), FakeRecognizer(delay_s=5.0), FakeLanguageModel(), FakeSynthesizer()))
    session.start()
    pcm = (np.sin(np.arange(24000) / 10) * 8000).astype("<i2").tobytes()
    item = {"id": "item_again", "type": "message", "role": "user",
            "content": [{"type": "input_audio", "audio": base64.b64encode(pcm).decode()}]}
    await session.handle_message(json.dumps({"type": "conversation.item.create", "item": item}))
    await session.handle_message(json.dumps({"type": "conversation.item.delete", "item_id": "item_again"}))
    await session.handle_message(json.dumps({"type": "conversation.item.create", "item": item}))
    running = session.transcriber.tasks()
    assert len(running) == 2
    await asyncio.wait_for(session.close(), 2.0)
    assert all(task.done() for task in running)
