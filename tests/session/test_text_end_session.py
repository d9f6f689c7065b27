"""The session carries the language model's end-of-sentence estimate: asked with the pause's speculative reply, for
exactly that reply's prompt, and fed back to the machine, which keeps a turn whose words lead on listening."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest

from bargein.engines.base import Engines, LLMCapabilities
from bargein.engines.fakes import FakeEndOfTurn, FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.engines.health import StageHealth
from bargein.engines.resilience import ResilientLanguageModel
from bargein.engines.stage_calls import Deadlines
from bargein.session.core.endpointing import TextEndEstimate
from bargein.session.input_buffer import InputBuffer
from bargein.session.segment_tracker import SegmentTracker
from bargein.session.speculation import Speculator
from bargein.values import ChatMessage, GenerationOptions
from tests.support.session_harness import Harness
from tests.support.tones import quiet, stream, tone

# a 700 ms pause: the plain 500 ms cuts the turn there unless something says the words lead on
PAUSED = np.concatenate([quiet(0.3), tone(0.8), quiet(0.7), tone(0.8, 220.0), quiet(2.2)])


class Estimating(FakeLanguageModel):
    """A fake model with the end-of-sentence estimate, answering ``probability`` and recording what it was asked."""

    capabilities = LLMCapabilities(tools=True, prefill=True, text_end=True)

    def __init__(self, probability: float | None) -> None:
        super().__init__(filler="Sure.")
        self.probability = probability
        self.asked: list[list[ChatMessage]] = []

    async def text_end(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> float | None:
        self.asked.append(list(messages))
        return self.probability


def session(llm: FakeLanguageModel, *, text_end: bool = True) -> Harness:
    """A default (tiered) session whose recogniser hears "Can you tell me." at every pause and whose Smart Turn is
    unsure (the plain silence, as far as the sound and the words go)."""
    engines = Engines(FakeVad(), FakeRecognizer(("Can you tell me.",)), llm, FakeSynthesizer(), FakeEndOfTurn((0.5,)))
    return Harness(engines, text_end_default=text_end)


@pytest.mark.parametrize(("probability", "commits"), [(0.0004, 1), (0.6, 2), (None, 2)])
async def test_an_estimate_that_the_words_lead_on_keeps_the_turn_listening(probability: float | None,
                                                                           commits: int) -> None:
    llm = Estimating(probability)
    h = session(llm)
    await stream(h, PAUSED)
    await h.drain(until="response.done")
    assert h.types().count("input_audio_buffer.committed") == commits
    assert llm.asked, "asked at the pause"
    assert llm.asked[0] in llm.seen, "for exactly the prompt of the speculative reply, whose evaluation it shares"
    await h.session.close()


async def test_a_server_without_the_estimate_never_asks() -> None:
    llm = Estimating(0.0004)
    h = session(llm, text_end=False)
    await stream(h, PAUSED)
    await h.drain(until="response.done")
    assert h.types().count("input_audio_buffer.committed") == 2 and not llm.asked
    await h.session.close()


async def test_a_model_without_the_estimate_is_not_asked_and_the_wrapper_passes_it_on() -> None:
    assert not FakeLanguageModel().capabilities.text_end and await FakeLanguageModel().text_end([]) is None
    wrapped = ResilientLanguageModel(Estimating(0.3), StageHealth("llm"), Deadlines())
    assert wrapped.capabilities.text_end and await wrapped.text_end([ChatMessage("user", "hi")]) == 0.3


def test_the_serve_command_can_leave_the_estimate_out() -> None:
    from bargein.cli import _parser

    assert _parser().parse_args(["serve", "--no-text-end"]).text_end_estimate is False
    assert _parser().parse_args(["serve"]).text_end_estimate is None, "unset: the setting's default (on)"


class Pending(Estimating):
    """An estimate that does not come back until told (a model busy with other work)."""

    def __init__(self) -> None:
        super().__init__(0.3)
        self.answer = asyncio.Event()

    async def text_end(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> float | None:
        await self.answer.wait()
        return self.probability


async def test_a_guess_discarded_when_the_reply_starts_takes_its_estimate_with_it() -> None:
    """A reply for other messages discards the guess's prefetched reply, and its estimate with it (an urgent job of
    the model's, for a prompt nobody will read); the adopted guess's estimate runs on (the reply reuses its work)."""
    speculator = Speculator(FakeRecognizer(("hello",)), Pending())
    audio = (0.2 * np.sin(np.arange(16_000) / 3)).astype(np.float32)
    messages = [ChatMessage("user", "hello")]
    estimates = []
    for item_id in ("item_1", "item_2"):
        recognition = speculator.recognise(item_id, audio)
        assert recognition is not None
        await recognition
        estimate = speculator.prefetch(item_id, messages if item_id == "item_2" else [ChatMessage("user", "hi")],
                                       GenerationOptions(), estimate_end=True)
        assert estimate is not None
        estimates.append(estimate)
    assert speculator.take_reply(messages, GenerationOptions()) is not None
    await asyncio.sleep(0)
    assert estimates[0].cancelled(), "the discarded guess's estimate"
    assert not estimates[1].done(), "the adopted one's runs on"
    speculator.close()
    estimates[1].cancel()


class Failing(Estimating):
    """A model whose estimate fails (a worker that died mid-job)."""

    async def text_end(self, messages: Sequence[ChatMessage], options: GenerationOptions | None = None) -> float | None:
        raise RuntimeError("the worker went away")


def agreed_session(llm: FakeLanguageModel) -> Harness:
    """A default session where Smart Turn and the words agree every pause is finished (the short silence)."""
    engines = Engines(FakeVad(), FakeRecognizer(("How many calories are in a banana?",)), llm, FakeSynthesizer(),
                      FakeEndOfTurn((0.99,)))
    return Harness(engines)


@pytest.mark.parametrize(("llm", "commits"), [(Estimating(0.002), 1), (Estimating(0.9), 2), (Failing(0.9), 2),
                                              (FakeLanguageModel(filler="Sure."), 2)])
async def test_the_estimate_overrules_the_short_silence_and_a_lost_one_does_not_hold_it(
        llm: FakeLanguageModel, commits: int) -> None:
    h = agreed_session(llm)
    assert (h.session.tiers.text_end_below is not None) is llm.capabilities.text_end, "weighed where the model can"
    await stream(h, PAUSED)
    await h.drain(until="response.done")
    assert h.types().count("input_audio_buffer.committed") == commits
    await h.session.close()


async def test_an_estimate_never_started_is_reported_lost_after_the_action_that_asked() -> None:
    fed: list[object] = []
    tracker = SegmentTracker(FakeRecognizer(), InputBuffer(), Speculator(FakeRecognizer(), Estimating(0.3)),
                             feed=fed.append, emit=lambda _: None)
    tracker.follow_text_end("item_1", "Hello there.", None)
    assert not fed, "not within the action that asked"
    await asyncio.sleep(0)
    assert fed == [TextEndEstimate("item_1", "Hello there.", None)]


async def test_an_estimate_cancelled_by_the_session_closing_is_not_fed_to_the_closed_session() -> None:
    """Closing cancels the guesses' estimates; their callbacks run after the close and must not feed the machine
    (it could still end a turn and start its reply in a session that is gone)."""
    fed: list[object] = []
    speculator = Speculator(FakeRecognizer(("hello",)), Pending())
    tracker = SegmentTracker(FakeRecognizer(), InputBuffer(), speculator, feed=fed.append, emit=lambda _: None)
    recognition = speculator.recognise("item_1", (0.2 * np.sin(np.arange(16_000) / 3)).astype(np.float32))
    assert recognition is not None
    await recognition
    estimate = speculator.prefetch("item_1", [ChatMessage("user", "hello")], GenerationOptions(), estimate_end=True)
    tracker.follow_text_end("item_1", "hello", estimate)
    tracker.close()
    for _ in range(5):  # the cancelled task's last step, then its done callbacks
        await asyncio.sleep(0)
    assert estimate is not None and estimate.cancelled() and not fed
