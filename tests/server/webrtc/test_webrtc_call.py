"""A WebRTC call against a real uvicorn server on loopback, with the fast fake engines: the offer is answered, the
events travel both ways on ``oai-events``, a spoken turn is answered with audio over RTP."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bench.harness import phone_provider
from bench.harness.webrtc_peer import WebRtcPeer

RATE = 24_000


def tone_pcm(seconds: float, hz: float = 300.0, level: float = 0.3) -> bytes:
    """A steady tone the fake VAD hears as speech (pcm16 at 24 kHz)."""
    t = np.arange(int(seconds * RATE)) / RATE
    return (level * 32767 * np.sin(2 * np.pi * hz * t)).astype("<i2").tobytes()


def silence_pcm(seconds: float) -> bytes:
    return bytes(2 * int(seconds * RATE))


def engines() -> Engines:
    return Engines(FakeVad(), FakeRecognizer(("hello can you hear me",)), FakeLanguageModel(), FakeSynthesizer())


async def test_a_call_is_answered_and_a_spoken_turn_gets_a_reply_with_audio_over_rtp() -> None:
    with phone_provider.phone_server(engines()) as (host, state):
        async with WebRtcPeer(f"http://{host}") as peer:
            assert peer.location is not None and peer.location.startswith("/v1/realtime/calls/rtc_")
            assert "a=candidate:" in peer.answer_sdp and "m=audio" in peer.answer_sdp
            assert "useinbandfec=1" in peer.answer_sdp  # the caller is asked for Opus in-band FEC
            await peer.next_event("session.created")
            peer.send({"type": "session.update", "session": {"instructions": "Be brief."}})
            _, updated = await peer.next_event("session.updated")
            assert updated["session"]["instructions"] == "Be brief."
            spoken_at = await peer.say(tone_pcm(0.8) + silence_pcm(1.0))
            _, done = await peer.next_event("response.done", timeout=20)
            assert done["response"]["status"] == "completed"
            await peer.next_event("output_audio_buffer.started")
            await peer.next_event("output_audio_buffer.stopped", timeout=20)
            assert "response.output_audio.delta" not in peer.types(), "reply audio travels as RTP, not as events"
            voiced = peer.audio.voiced_times()
            assert voiced and voiced[0] > spoken_at
            assert peer.audio.voiced_ms_between(spoken_at) > 300, "the reply's audio arrived over RTP"
            (session,) = state.registry.live
            assert any(item.role == "user" for item in session.conversation)


async def test_a_multipart_offer_brings_its_session_config_as_session_update_would() -> None:
    with phone_provider.phone_server(engines()) as (host, _):
        async with WebRtcPeer(f"http://{host}", session={"instructions": "Speak like a pirate."}) as peer:
            created, _ = await peer.next_event("session.created")
            _, updated = await peer.next_event("session.updated", after=created)
            assert updated["session"]["instructions"] == "Speak like a pirate."
        refused = {"audio": {"input": {"format": {"type": "audio/mp3"}}}}
        async with WebRtcPeer(f"http://{host}", session=refused) as peer:
            _, error = await peer.next_event("error")
            assert "format" in str(error["error"]), error


async def test_the_callers_audio_keeps_the_callers_clock_through_noise_reduction_on_and_off() -> None:
    """Decoded at 16 kHz, the caller's audio goes to the listen path as it is; with noise reduction on it is
    resampled to the input rate for the suppressor. Switching either way loses and repeats nothing: the session's
    stream stays within the few ms a path holds back of the caller's own clock (its RTP timestamps)."""
    from bargein.audio.noise_suppression import NoiseSuppressor
    from bargein.weights import WeightError

    try:
        NoiseSuppressor(24_000, 16_000).close()
    except WeightError:  # RNNoise is optional
        pytest.skip("no RNNoise installed")
    with phone_provider.phone_server(engines()) as (host, state):
        async with WebRtcPeer(f"http://{host}") as peer:
            await peer.next_event("session.created")
            (session,) = state.registry.live
            after = 0
            for reduction in ({"type": "near_field"}, None, {"type": "far_field"}, None):
                peer.send({"type": "session.update", "session": {"audio": {"input": {"noise_reduction": reduction}}}})
                after, _ = await peer.next_event("session.updated", after=after + 1)
                await asyncio.sleep(0.6)
            await peer.say(tone_pcm(0.8) + silence_pcm(0.6))
            await peer.next_event("input_audio_buffer.speech_started", timeout=10)
            await asyncio.sleep(0.5)
            sent_ms = peer.microphone.sent_pts / 48.0
            assert abs(session.audio_in.stream_ms - sent_ms) <= 60.0, (session.audio_in.stream_ms, sent_ms)
