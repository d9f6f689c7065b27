"""Semantic endpointing in the session: a server default where the model is loaded (`--turn-detection`), refused
when none is, and a pause ends the turn or not as the end-of-turn model and the words say."""

from __future__ import annotations

import numpy as np

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeEndOfTurn, FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from tests.support.session_harness import Harness
from tests.support.tones import quiet, stream, tone


def engines(turn: FakeEndOfTurn | None, words: str = "turn off the lights") -> Engines:
    return Engines(FakeVad(), FakeRecognizer((words,)), FakeLanguageModel(), FakeSynthesizer(), turn)


async def test_the_server_can_default_to_the_semantic_endpoint_when_the_model_is_loaded() -> None:
    h = Harness(engines(FakeEndOfTurn()), semantic_default=True)
    created = (await h.drain(until="session.created"))[-1]
    assert created["session"]["audio"]["input"]["turn_detection"]["type"] == "semantic_vad"
    await h.session.close()
    # the shipped default is plain silence: Smart Turn is not yet faster on real speech
    loaded = Harness(engines(FakeEndOfTurn()))
    created = (await loaded.drain(until="session.created"))[-1]
    assert created["session"]["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    await loaded.session.close()
    plain = Harness(engines(None), semantic_default=True)
    created = (await plain.drain(until="session.created"))[-1]
    assert created["session"]["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    await plain.session.close()


async def test_semantic_vad_without_the_model_is_an_error_and_changes_nothing() -> None:
    h = Harness(engines(None))
    await h.send(type="session.update", event_id="ev1",
                 session={"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "high"}}}})
    await h.drain()
    errors = [e for e in h.events if e["type"] == "error"]
    assert errors and errors[0]["error"]["param"] == "session.audio.input.turn_detection.type"
    assert "end-of-turn model" in errors[0]["error"]["message"] and errors[0]["error"]["event_id"] == "ev1"
    assert "session.updated" not in h.types()
    assert h.session.config.audio.input.turn_detection is not None
    assert h.session.config.audio.input.turn_detection.type == "server_vad"
    await h.session.close()


async def test_a_finished_sounding_turn_ends_at_a_short_pause_and_an_unfinished_one_waits() -> None:
    # two bursts of speech 700 ms apart: one turn or two, as the end-of-turn model judges the pause
    speech = np.concatenate([quiet(0.3), tone(0.8), quiet(0.7), tone(0.8, 220.0), quiet(2.0)])
    finished = Harness(engines(FakeEndOfTurn((0.99,))), semantic_default=True)
    await stream(finished, speech)
    await finished.drain()
    assert finished.types().count("input_audio_buffer.committed") == 2
    await finished.session.close()

    unfinished = Harness(engines(FakeEndOfTurn((0.2, 0.99))), semantic_default=True)
    await stream(unfinished, speech)
    await unfinished.drain()
    assert unfinished.types().count("input_audio_buffer.committed") == 1
    await unfinished.session.close()


async def test_words_that_lead_on_keep_the_turn_open_whatever_the_sound_says() -> None:
    speech = np.concatenate([quiet(0.3), tone(0.8), quiet(0.7), tone(0.8, 220.0), quiet(2.0)])
    h = Harness(engines(FakeEndOfTurn((0.99,)), words="I want to book a table for"), semantic_default=True)
    await stream(h, speech)
    await h.drain()
    assert h.types().count("input_audio_buffer.committed") == 1
    await h.session.close()
