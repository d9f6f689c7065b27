"""Asked to read what the camera shows, the agent quotes the note's writing; other questions, and sessions with
instructions of their own, get the model's answer."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.see.quoting import NO_WRITING, asks_to_read, reading_answer
from bargein.see.scene import SceneNote
from bargein.see.shared import Seeing
from bargein.see.vision import VisionSettings
from bargein.session.realtime_session import RealtimeSession

SIGN = SceneNote(("PLATFORM 4", "Zurich 14:32"), 0, "even light", (), None, 0.0)
BLANK = SceneNote((), 0, "even light", (), None, 0.0)


@pytest.mark.parametrize("question", [
    "what does this say?", "Can you read me the sign?", "what's written there?", "read that for me please",
    "what does the label say?", "is there any writing here?", "could you please read it", "What is on the screen?",
    "Please read this.", "what do the words on the door say",
])
def test_requests_to_read_are_recognised(question: str) -> None:
    assert asks_to_read(question)


@pytest.mark.parametrize("question", [
    "what did you say?", "is the light on?", "what colour is it?", "how many people are there?",
    "I read that book last year", "what do you think about it?", "tell me a joke",
])
def test_other_questions_are_left_to_the_model(question: str) -> None:
    assert not asks_to_read(question)


def test_the_answer_quotes_every_line_or_says_there_is_no_writing() -> None:
    assert reading_answer(SIGN, "what does it say?") == 'It says: "PLATFORM 4 Zurich 14:32".'
    assert reading_answer(BLANK, "can you read this for me?") == NO_WRITING
    assert reading_answer(SIGN, "is the light on?") is None
    assert reading_answer(None, "what does it say?") is None


async def reply_to(question: str, *, instructions: str | None = None,
                   settings: VisionSettings | None = None) -> tuple[str, FakeLanguageModel]:
    llm = FakeLanguageModel()
    engines = Engines(FakeVad(), FakeRecognizer(("hello",)), llm, FakeSynthesizer(),
                      see=Seeing(settings or VisionSettings("notes")))
    session = RealtimeSession(engines)
    session.eyes.note = SIGN
    session.eyes.note_seen_s = session.eyes._clock()
    session.start()
    patch: dict[str, Any] = {"output_modalities": ["text"]}
    if instructions is not None:
        patch["instructions"] = instructions
    await session.handle_message(json.dumps({"type": "session.update", "session": patch}))
    await session.handle_message(json.dumps({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": question}]}}))
    await session.handle_message(json.dumps({"type": "response.create"}))

    async def done() -> dict[str, Any]:
        while True:
            item = await session.outbound.get()
            session.on_sent(item)
            if item.event["type"] == "response.done":
                return item.event
    event = await asyncio.wait_for(done(), 10)
    text = "".join(part.get("text", "") for item in event["response"]["output"] for part in item.get("content", []))
    await session.close()
    return text, llm


async def test_a_request_to_read_is_answered_with_the_writing_without_the_model() -> None:
    text, llm = await reply_to("can you read me the sign?")
    assert text == 'It says: "PLATFORM 4 Zurich 14:32".' and not llm.seen


async def test_other_questions_and_own_instructions_and_native_mode_go_to_the_model() -> None:
    for kwargs in ({"question": "is the light on?"},
                   {"question": "what does this say?", "instructions": "You are a pirate."},
                   {"question": "what does this say?", "settings": VisionSettings("native")}):
        question = str(kwargs.pop("question"))
        _, llm = await reply_to(question, **kwargs)  # type: ignore[arg-type]
        assert len(llm.seen) == 1 and llm.seen[0][-1].content == question
