"""A ``response.create`` in the beta spelling (``voice``, ``output_audio_format``, ``modalities`` at the top of
``response``) is honoured as its GA fields, and a voice the synthesiser cannot speak is refused by name."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from bargein.engines.base import Engines, TTSCapabilities
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.engines.speak.voices import unknown_voice
from bargein.protocol.client_events import ResponseCreate, parse_client_event
from bargein.protocol.errors import ProtocolError
from bargein.values import CancelToken, SpeechChunk
from tests.support.session_harness import Harness


class Voices(FakeSynthesizer):
    """The fake tone, with voices of its own as Kokoro has them, remembering the voice of each clause."""

    voices = ("heart", "kore")
    default_voice = "heart"
    capabilities = TTSCapabilities(voices=voices, default_voice=default_voice)

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str | None] = []

    def resolve_voice(self, voice: str | None) -> str:
        key = (voice or "").strip().lower()
        return {"af_heart": "heart", "af_kore": "kore"}.get(key, key if key in self.voices else "heart")

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        self.asked.append(voice)
        async for chunk in super().synthesize(text, voice=voice, cancel=cancel, speed=speed):
            yield chunk


def harness(tts: FakeSynthesizer) -> Harness:
    return Harness(Engines(FakeVad(), FakeRecognizer(("hello",)), FakeLanguageModel(), tts))


async def reply(h: Harness, response: dict[str, Any], event_id: str = "evt_1") -> list[dict[str, Any]]:
    await h.send(type="conversation.item.create", item={"type": "message", "role": "user",
                                                        "content": [{"type": "input_text", "text": "hello"}]})
    start = len(h.events)
    await h.send(type="response.create", event_id=event_id, response=response)
    await h.drain(until="response.done")
    return h.events[start:]


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


async def test_beta_voice_and_format_are_honoured() -> None:
    # before: both were dropped as unknown fields; the reply came in the session's voice and format
    tts = Voices()
    h = harness(tts)
    events = await reply(h, {"voice": "kore", "output_audio_format": "g711_ulaw"})
    assert not of(events, "error")
    assert set(tts.asked) == {"kore"}
    assert of(events, "response.done")[0]["response"]["audio"]["output"] == {
        "format": {"type": "audio/pcmu"}, "voice": "kore"}
    await h.session.close()


async def test_beta_text_modality_gives_a_text_reply() -> None:
    h = harness(Voices())
    events = await reply(h, {"modalities": ["text"]})
    assert of(events, "response.output_text.delta") and not of(events, "response.output_audio.delta")
    assert of(events, "response.done")[0]["response"]["output_modalities"] == ["text"]
    await h.session.close()


@pytest.mark.parametrize(("beta", "ga"), [
    ({"modalities": ["audio", "text"]}, {"output_modalities": ["audio"]}),
    ({"modalities": ["text"]}, {"output_modalities": ["text"]}),
    ({"output_audio_format": "pcm16"}, {"audio": {"output": {"format": {"type": "audio/pcm", "rate": 24000}}}}),
    ({"output_audio_format": "g711_alaw"}, {"audio": {"output": {"format": {"type": "audio/pcma"}}}}),
    ({"voice": "ash"}, {"audio": {"output": {"voice": "ash"}}}),
    ({"max_response_output_tokens": 20}, {"max_output_tokens": 20}),
    ({"voice": "ash", "audio": {"output": {"voice": "ash"}}}, {"audio": {"output": {"voice": "ash"}}}),
])
def test_beta_fields_read_as_their_ga_fields(beta: dict[str, Any], ga: dict[str, Any]) -> None:
    assert _params(beta) == _params(ga)


def _params(response: dict[str, Any]) -> dict[str, Any]:
    """``response.create``'s parameters as parsed from ``response``."""
    event = parse_client_event(f'{{"type": "response.create", "response": {_json(response)}}}')
    assert isinstance(event, ResponseCreate) and event.response is not None
    return event.response.model_dump(exclude_none=True)


@pytest.mark.parametrize(("response", "named"), [
    ({"output_audio_format": "mp3"}, "output_audio_format"),
    ({"modalities": ["video"]}, "modalities"),
    ({"voice": "ash", "audio": {"output": {"voice": "echo"}}}, "voice"),
    ({"modalities": ["text"], "output_modalities": ["audio"]}, "modalities"),
])
def test_a_bad_or_contradicted_beta_field_is_refused_by_name(response: dict[str, Any], named: str) -> None:
    with pytest.raises(ProtocolError) as raised:
        parse_client_event(f'{{"type": "response.create", "response": {_json(response)}}}')
    assert raised.value.code == "invalid_value" and named in raised.value.message


@pytest.mark.parametrize("response", [{"voice": "nobody"}, {"audio": {"output": {"voice": "nobody"}}}])
async def test_an_unknown_response_voice_is_an_error_naming_the_field(response: dict[str, Any]) -> None:
    # before: the synthesiser fell back to its default voice without a word
    h = harness(Voices())
    await h.send(type="conversation.item.create", item={"type": "message", "role": "user",
                                                        "content": [{"type": "input_text", "text": "hello"}]})
    await h.send(type="response.create", event_id="evt_9", response=response)
    await h.drain()
    [error] = of(h.events, "error")
    assert not of(h.events, "response.created")
    assert error["error"]["code"] == "invalid_value" and error["error"]["param"] == "response.audio.output.voice"
    assert error["error"]["event_id"] == "evt_9" and "'nobody'" in error["error"]["message"]
    assert "heart" in error["error"]["message"] and "alloy" in error["error"]["message"]
    await h.session.close()


async def test_an_unknown_session_voice_is_refused_and_the_session_keeps_its_own() -> None:
    h = harness(Voices())
    await h.send(type="session.update", event_id="evt_2", session={"audio": {"output": {"voice": "nobody"}}})
    await h.drain()
    [error] = of(h.events, "error")
    assert error["error"]["param"] == "session.audio.output.voice" and error["error"]["event_id"] == "evt_2"
    assert not of(h.events, "session.updated") and h.session.config.audio.output.voice == "alloy"
    await h.send(type="session.update", session={"audio": {"output": {"voice": "Kore"}}})
    await h.drain(until="session.updated")
    assert h.session.config.audio.output.voice == "Kore"
    await h.session.close()


@pytest.mark.parametrize("voice", ["alloy", "marin", "heart", "KORE", "af_heart"])
def test_the_synthesisers_own_names_and_the_openai_names_are_known(voice: str) -> None:
    assert unknown_voice(voice, Voices()) is None


def test_a_synthesiser_that_cannot_tell_takes_any_voice() -> None:
    assert unknown_voice("nobody", FakeSynthesizer()) is None


def _json(value: dict[str, Any]) -> str:
    import json

    return json.dumps(value)


@pytest.mark.parametrize(("response", "ga"), [
    ({"output_audio_format": "pcm16", "audio": {"output": {"format": {"type": "audio/pcm"}}}},
     {"audio": {"output": {"format": {"type": "audio/pcm"}}}}),
    ({"modalities": ["text", "audio"], "output_modalities": ["audio"]}, {"output_modalities": ["audio"]}),
    ({"voice": "alloy", "audio": {"output": {"voice": "ALLOY"}}}, {"audio": {"output": {"voice": "ALLOY"}}}),
])
def test_both_spellings_of_the_same_setting_are_read_as_the_ga_one(response: dict[str, Any],
                                                                   ga: dict[str, Any]) -> None:
    """A compatibility shim sends the beta and the GA spelling together: the same setting said twice is read as
    its GA spelling says it, not refused."""
    assert _params(response) == _params(ga)
