"""Per-response settings of ``response.create``: the reply's output format and voice, and what
``response.created`` / ``response.done`` report of it (conversation, token limit). Fake engines, no socket;
every emitted event is validated against the openai package's models by the harness."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from openai.types.realtime import ResponseCreateEvent

from bargein.audio.codecs import AudioFormat
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.values import CancelToken, SpeechChunk
from tests.support.session_harness import Harness

PCM = {"type": "audio/pcm", "rate": 24000}
PCMU = {"type": "audio/pcmu"}
PCMA = {"type": "audio/pcma"}
CODECS = {"audio/pcm": AudioFormat("audio/pcm", 24_000), "audio/pcmu": AudioFormat("audio/pcmu", 8_000),
          "audio/pcma": AudioFormat("audio/pcma", 8_000)}
TONE_RMS = 0.2 / np.sqrt(2) * 32767
"""The RMS of the fake synthesiser's 220 Hz tone (amplitude 0.2) in int16 units."""


class VoiceRecorder(FakeSynthesizer):
    """The fake tone, remembering the voice each clause was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.voices: list[str | None] = []

    async def synthesize(self, text: str, *, voice: str | None, cancel: CancelToken,
                         speed: float = 1.0) -> AsyncIterator[SpeechChunk]:
        self.voices.append(voice)
        async for chunk in super().synthesize(text, voice=voice, cancel=cancel, speed=speed):
            yield chunk


def _harness(tts: FakeSynthesizer | None = None) -> Harness:
    return Harness(Engines(FakeVad(), FakeRecognizer(("hello",)), FakeLanguageModel(), tts or FakeSynthesizer()))


async def _reply(h: Harness, response: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Ask for a reply to a typed "hello" (with ``response`` as its parameters); the reply's events."""
    await h.send(type="conversation.item.create", item={"type": "message", "role": "user",
                                                        "content": [{"type": "input_text", "text": "hello"}]})
    create: dict[str, Any] = {"type": "response.create"}
    if response is not None:
        create["response"] = response
    ResponseCreateEvent.model_validate(create)  # what the test sends is a valid GA client event
    start = len(h.events)
    await h.send(**create)
    await h.drain(until="response.done")
    return h.events[start:]


def _of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def _audio(events: list[dict[str, Any]]) -> bytes:
    return b"".join(base64.b64decode(e["delta"]) for e in _of(events, "response.output_audio.delta"))


def _reported_format(events: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    created = _of(events, "response.created")[0]["response"]["audio"]["output"]["format"]
    done = _of(events, "response.done")[0]["response"]["audio"]["output"]["format"]
    return created, done


@pytest.mark.parametrize(("session_format", "response_format"),
                         [(PCM, PCMU), (PCM, PCMA), (PCMU, PCM), (PCMA, PCMU)])
async def test_a_response_output_format_encodes_that_reply_only(session_format: dict[str, Any],
                                                               response_format: dict[str, Any]) -> None:
    h = _harness()
    await h.send(type="session.update", session={"audio": {"output": {"format": session_format}}})
    await h.drain(until="session.updated")
    own = await _reply(h, {"audio": {"output": {"format": response_format}}})
    assert _reported_format(own) == (response_format, response_format)
    plain = await _reply(h)
    assert _reported_format(plain) == (session_format, session_format), "the next reply is in the session's format"
    # the same words, so the same speech: encoded in each reply's own format
    own_codec, session_codec = CODECS[response_format["type"]], CODECS[session_format["type"]]
    own_samples, plain_samples = own_codec.decode(_audio(own)), session_codec.decode(_audio(plain))
    assert abs(len(own_samples) / own_codec.rate - len(plain_samples) / session_codec.rate) < 0.005
    for samples in (own_samples, plain_samples):  # decoded in the wrong codec the tone would be noise
        rms = float(np.sqrt(np.mean(samples.astype(np.float64) ** 2)))
        assert abs(rms - TONE_RMS) < 0.1 * TONE_RMS, rms
    await h.session.close()


async def test_a_response_voice_is_spoken_and_reported_for_that_reply_only() -> None:
    tts = VoiceRecorder()
    h = _harness(tts)
    own = await _reply(h, {"audio": {"output": {"voice": "echo"}}})
    assert set(tts.voices) == {"echo"}
    for kind in ("response.created", "response.done"):
        assert _of(own, kind)[0]["response"]["audio"]["output"] == {"format": PCM, "voice": "echo"}
    tts.voices.clear()
    plain = await _reply(h)
    assert set(tts.voices) == {"alloy"}
    assert _of(plain, "response.done")[0]["response"]["audio"]["output"]["voice"] == "alloy"
    await h.session.close()


@pytest.mark.parametrize(("output", "param"), [
    ({"voice": {"id": "voice_1234"}}, "response.audio.output.voice"),
    ({"format": {"type": "audio/pcm", "rate": 16000}}, "response.audio.output.format.audio/pcm.rate"),
    ({"format": {"type": "audio/opus"}}, "response.audio.output.format"),
    ({"speed": 1.2}, "response.audio.output.speed"),
])
async def test_a_response_output_it_cannot_honour_is_refused(output: dict[str, Any], param: str) -> None:
    h = _harness()
    await h.send(type="conversation.item.create", item={"type": "message", "role": "user",
                                                        "content": [{"type": "input_text", "text": "hello"}]})
    await h.send(type="response.create", event_id="evt_1", response={"audio": {"output": output}})
    await h.drain()
    errors = _of(h.events, "error")
    assert len(errors) == 1 and not _of(h.events, "response.created")
    error = errors[0]["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_value"
    assert error["param"] == param and error["event_id"] == "evt_1"
    assert "response.audio.output" in error["message"]
    await h.session.close()


async def test_an_out_of_band_response_belongs_to_no_conversation() -> None:
    h = _harness()
    out_of_band = await _reply(h, {"conversation": "none", "output_modalities": ["text"]})
    for kind in ("response.created", "response.done"):
        assert _of(out_of_band, kind)[0]["response"]["conversation_id"] is None
    assert not [e for e in _of(out_of_band, "conversation.item.added") if e["item"]["role"] == "assistant"]
    in_band = await _reply(h, {"conversation": "auto"})
    for kind in ("response.created", "response.done"):
        assert _of(in_band, kind)[0]["response"]["conversation_id"] == "conv_default"
    await h.session.close()


async def test_max_output_tokens_reports_the_limit_the_response_used() -> None:
    h = _harness()

    def reported(events: list[dict[str, Any]]) -> list[Any]:
        return [_of(events, kind)[0]["response"]["max_output_tokens"]
                for kind in ("response.created", "response.done")]

    assert reported(await _reply(h)) == ["inf", "inf"]
    assert reported(await _reply(h, {"max_output_tokens": 20})) == [20, 20]
    await h.send(type="session.update", session={"max_output_tokens": 50})
    await h.drain(until="session.updated")
    assert reported(await _reply(h)) == [50, 50]
    assert reported(await _reply(h, {"max_output_tokens": 20})) == [20, 20]
    assert reported(await _reply(h, {"max_output_tokens": "inf"})) == ["inf", "inf"]
    await h.session.close()
