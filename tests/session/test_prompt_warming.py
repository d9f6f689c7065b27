"""Partial transcripts warm the LLM's prompt while the user is still speaking, and only when a reply may follow."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np

from bargein.engines.base import Engines, LLMCapabilities
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.session.speculation import Speculator
from bargein.values import ChatMessage, GenerationOptions
from tests.support.session_harness import Harness, pcm_appends, reply_playing


class PrefillingModel(FakeLanguageModel):
    """A fake model that can evaluate a prompt ahead, as the llama.cpp engine can."""

    capabilities = LLMCapabilities(tools=True, prefill=True)
    queue_depth: int | None = None  # set by a test: another session's reply being generated

    def __init__(self) -> None:
        super().__init__()
        self.prefilled: list[tuple[list[ChatMessage], GenerationOptions]] = []

    def prefill(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> None:
        self.prefilled.append((list(messages), options or GenerationOptions()))


LONG_TONE = 0.3 * np.sin(np.arange(24_000 * 3) / 4)
"""Three seconds of loud sound: speech to the fake VAD, long enough for partial transcripts."""


async def _say(h: Harness, seconds: float, then_silence_s: float) -> None:
    audio = np.concatenate([LONG_TONE[:int(24_000 * seconds)], np.zeros(int(24_000 * then_silence_s))])
    for chunk in pcm_appends(audio):
        await h.send(type="input_audio_buffer.append", audio=chunk)
        await asyncio.sleep(0)


async def test_partials_warm_exactly_the_prompt_the_reply_then_sends() -> None:
    llm = PrefillingModel()
    h = Harness(Engines(FakeVad(), FakeRecognizer(("what time is it",)), llm, FakeSynthesizer()))
    await _say(h, 2.5, 1.0)
    await h.drain(until="response.done")
    assert llm.prefilled, "partials during the turn warmed the prompt"
    warmed, _options = llm.prefilled[-1]
    assert warmed[-1] == ChatMessage("user", "what time is it")
    reply_prompt = llm.seen[-1]
    assert reply_prompt == warmed, "the warmed prompt is the one the reply sent, so its evaluation is reused"
    assert h.session.speculation.prompts_warmed == len(llm.prefilled)
    await h.session.close()


async def test_no_warming_over_a_live_reply() -> None:
    llm = PrefillingModel()
    llm.filler = " ".join(["and so on"] * 200)  # a long reply, still live while the next turn is spoken
    h = Harness(Engines(FakeVad(), FakeRecognizer(("what time is it",)), llm, FakeSynthesizer()))
    # speech does not interrupt: the reply plays on while the next turn is spoken, and its end is not known
    await h.send(type="session.update", session={"audio": {"input": {"turn_detection": {
        "type": "server_vad", "interrupt_response": False}}}})
    await h.send(type="conversation.item.create", item={"type": "message", "role": "user",
                                                        "content": [{"type": "input_text", "text": "talk"}]})
    await h.send(type="response.create")
    await h.drain(until="response.output_audio.delta")
    await _say(h, 2.5, 0.0)
    await h.drain(until="conversation.item.input_audio_transcription.delta")  # a partial of the turn came back
    assert h.session.replies.live
    assert llm.prefilled == []
    await h.session.close()


async def test_partials_over_a_paused_reply_warm_the_prompt_with_that_reply_cut_where_it_paused() -> None:
    llm = PrefillingModel()
    llm.filler = " ".join(["The old walls of the city were built long ago."] * 20)
    h = Harness(Engines(FakeVad(), FakeRecognizer(("tell me more about the old city walls please",)), llm,
                        FakeSynthesizer(ms_per_char=20.0)))
    first = await reply_playing(h)  # the client plays the reply's first words
    await _say(h, 2.5, 1.2)  # long enough for partials while the reply is paused
    await h.drain(until="response.done")
    assert h.events[-1]["response"]["id"] == first and h.events[-1]["response"]["status"] == "cancelled"
    await h.drain(until="response.output_audio.delta")
    assert llm.prefilled, "partials spoken over the paused reply warmed the prompt"
    warmed, _options = llm.prefilled[-1]
    heard = [m.content for m in warmed if m.role == "assistant"]
    assert len(heard) == 1 and heard[0] and heard[0] != llm.filler, "the paused reply, cut where it paused"
    assert llm.seen[-1] == warmed, "the answer was asked with the warmed prompt, so its evaluation is reused"
    await h.session.close()


def test_no_warming_while_the_llm_serves_another_reply() -> None:
    llm = PrefillingModel()
    llm.queue_depth = 1  # type: ignore[attr-defined]  # another session's reply is being generated
    speculator = Speculator(FakeRecognizer(), llm)
    speculator.warm([ChatMessage("user", "hi")], GenerationOptions())
    assert llm.prefilled == []
    llm.queue_depth = 0  # type: ignore[attr-defined]
    speculator.warm([ChatMessage("user", "hi")], GenerationOptions())
    assert len(llm.prefilled) == 1 and speculator.counts.prompts_warmed == 1


def test_warming_needs_a_model_that_can_prefill_and_speculation_on() -> None:
    plain: Any = FakeLanguageModel()
    Speculator(FakeRecognizer(), plain).warm([ChatMessage("user", "hi")], GenerationOptions())  # no prefill: nothing
    llm = PrefillingModel()
    off = Speculator(FakeRecognizer(), llm, enabled=False)
    off.warm([ChatMessage("user", "hi")], GenerationOptions())
    assert llm.prefilled == [] and off.counts.prompts_warmed == 0
