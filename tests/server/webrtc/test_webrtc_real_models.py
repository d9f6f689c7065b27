"""A WebRTC call with the embedded models (Whisper, llama.cpp, Kokoro): a question spoken into the call's Opus track is
recognised and answered with speech over RTP."""

from __future__ import annotations

import subprocess
import tempfile
import wave
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bargein.audio.codecs import float_to_int16
from bargein.audio.resample import resample
from bargein.config import Settings
from bargein.engines.base import Engines
from bargein.engines.factory import load_engines
from bench.harness.phone_provider import phone_server
from bench.harness.webrtc_peer import WebRtcPeer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_engines() -> Iterator[Engines]:
    yield load_engines(Settings(llm_model="smollm2-135m"))


def spoken_pcm24k(text: str) -> bytes:
    """``text`` spoken by espeak-ng, as pcm16 at 24 kHz."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "speech.wav"
        subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(path), text], check=True, capture_output=True)
        with wave.open(str(path)) as handle:
            rate = handle.getframerate()
            samples = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
    return float_to_int16(resample(samples.astype(np.float32) / 32768.0, rate, 24_000)).tobytes()


async def test_a_spoken_question_over_webrtc_is_answered_with_speech(real_engines: Engines) -> None:
    question = spoken_pcm24k("What is the capital of France?")
    with phone_server(real_engines) as (host, _):
        async with WebRtcPeer(f"http://{host}") as peer:
            await peer.next_event("session.created")
            asked_at = await peer.say(bytes(2 * 12_000) + question + bytes(2 * 24_000 * 3))
            _, heard = await peer.next_event("conversation.item.input_audio_transcription.completed", timeout=120)
            assert "capital" in heard["transcript"].lower() or "france" in heard["transcript"].lower(), heard
            _, done = await peer.next_event("response.done", timeout=180)
            assert done["response"]["status"] == "completed"
            await peer.next_event("output_audio_buffer.stopped", timeout=60)
            assert peer.audio.voiced_ms_between(asked_at) > 500, "the answer was spoken over RTP"
