"""``audio.input.noise_reduction``: RNNoise takes the noise out and leaves the speech, and sessions switch it."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from bargein.audio.noise_suppression import NoiseSuppressor
from bargein.audio.resample import resample
from bargein.engines.base import Engines
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.session import audio_input
from bargein.session.realtime_session import RealtimeSession
from bargein.weights import WeightError
from testdata.noise_sources import pink
from testdata.speech import librivox_clip
from tests.support.realtime_client import validate_server_event

SETTLE = 8000
"""Skip the first 0.5 s at 16 kHz: RNNoise needs a moment to learn the noise floor."""


def _rms_db(audio: npt.NDArray[np.float32]) -> float:
    return 10.0 * float(np.log10(np.mean(np.square(audio.astype(np.float64))) + 1e-12))


def _denoise_24k(audio24k: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    suppressor = NoiseSuppressor(24_000, 16_000)
    try:
        pieces = [suppressor.process(audio24k[i:i + 480]) for i in range(0, len(audio24k), 480)]
        return np.concatenate([*pieces, suppressor.flush()])
    finally:
        suppressor.close()


def test_noise_alone_is_suppressed() -> None:
    noise = 0.05 * pink(np.random.default_rng(7), 3.0)
    denoised = _denoise_24k(noise)
    assert _rms_db(denoised[SETTLE:]) < _rms_db(resample(noise, 24_000, 16_000)[SETTLE:]) - 20.0


def test_clean_speech_is_kept() -> None:
    speech = librivox_clip("0870")
    denoised = _denoise_24k(resample(speech, 16_000, 24_000))
    assert abs(len(denoised) - len(speech)) <= 1  # flushed, nothing is held back
    assert abs(_rms_db(denoised) - _rms_db(speech)) < 3.0
    # the same waveform comes out in the same place: RNNoise's own 20 ms delay is not added to the stream
    n = min(len(speech), len(denoised))
    assert np.corrcoef(speech[:n], denoised[:n])[0, 1] > 0.9


async def _exchange(session: RealtimeSession, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for message in messages:
        await session.handle_message(json.dumps(message))
    events: list[dict[str, Any]] = []
    while True:
        try:
            item = await asyncio.wait_for(session.outbound.get(), 0.5)
        except TimeoutError:
            return events
        session.on_sent(item)
        validate_server_event(item.event)
        events.append(item.event)


def _session() -> RealtimeSession:
    session = RealtimeSession(Engines(FakeVad(), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer()))
    session.start()
    return session


def _update(noise_reduction: object) -> dict[str, Any]:
    return {"type": "session.update", "session": {"type": "realtime",
                                                  "audio": {"input": {"noise_reduction": noise_reduction}}}}


def _append(seconds: float) -> dict[str, Any]:
    noise = 0.05 * pink(np.random.default_rng(1), seconds)
    pcm = (noise * 32767).astype("<i2").tobytes()
    return {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()}


async def test_session_turns_suppression_on_echoes_it_and_off_again() -> None:
    session = _session()
    try:
        events = await _exchange(session, [_update({"type": "far_field"}), _append(0.1), _append(0.5)])
        updated = [e for e in events if e["type"] == "session.updated"]
        assert updated and updated[0]["session"]["audio"]["input"]["noise_reduction"]["type"] == "far_field"
        assert not [e for e in events if e["type"] == "error"]
        assert session.audio_in.noise_reduction
        assert 500 < session.stream_ms <= 600  # both appends went through the suppressor, some still held
        await _exchange(session, [_update(None), _append(0.1)])
        assert not session.audio_in.noise_reduction
        # what the suppressor held is heard when it is turned off: only the plain filter's few ms are missing
        assert 690 < session.stream_ms <= 700
    finally:
        await session.close()


async def test_an_unknown_type_is_an_error_and_the_session_goes_on() -> None:
    session = _session()
    try:
        events = await _exchange(session, [_update({"type": "underwater"})])
        errors = [e for e in events if e["type"] == "error"]
        assert errors and "noise_reduction" in errors[0]["error"]["param"]
        assert not session.audio_in.noise_reduction
        events = await _exchange(session, [_update({"type": "near_field"})])
        assert [e for e in events if e["type"] == "session.updated"]
        assert session.audio_in.noise_reduction
    finally:
        await session.close()


async def test_a_server_without_rnnoise_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(in_rate: int, out_rate: int) -> NoiseSuppressor:
        raise WeightError("package 'pyrnnoise==0.4.5' is not installed; fix: pip install pyrnnoise==0.4.5")

    monkeypatch.setattr(audio_input, "NoiseSuppressor", missing)
    session = _session()
    try:
        events = await _exchange(session, [_update({"type": "near_field"})])
        errors = [e for e in events if e["type"] == "error"]
        assert errors and "pip install pyrnnoise" in errors[0]["error"]["message"]
        assert not [e for e in events if e["type"] == "session.updated"]
    finally:
        await session.close()


def test_closing_during_a_long_chunk_neither_waits_nor_frees_the_state_under_it() -> None:
    import threading
    import time

    suppressor = NoiseSuppressor(24_000, 16_000)
    long_chunk = 0.05 * pink(np.random.default_rng(5), 20.0)
    result: list[int] = []
    worker = threading.Thread(target=lambda: result.append(len(suppressor.process(long_chunk))))
    worker.start()
    while not suppressor._lock.locked():  # wait until the worker is inside RNNoise (20 s of audio: ~0.5 s)
        time.sleep(0.001)
    suppressor.close()  # returns at once; the worker frees the state when its chunk is done
    worker.join()
    assert result and result[0] > 300_000
    with pytest.raises(RuntimeError, match="closed"):
        suppressor.process(long_chunk[:480])


@pytest.mark.slow  # a real server, the official client and the real Silero VAD
async def test_official_client_turn_in_noise_with_suppression() -> None:
    from bargein.audio.codecs import float_to_int16
    from bargein.engines.listen.silero_vad import SileroVad
    from tests.support.realtime_client import EventLog, collect, openai_client, stream_realtime
    from tests.support.server import running_server

    speech = resample(librivox_clip("0880"), 16_000, 24_000)
    audio = np.concatenate([np.zeros(12_000, np.float32), speech, np.zeros(36_000, np.float32)])
    noise = pink(np.random.default_rng(11), len(audio) / 24_000)[:len(audio)]
    audio = audio + noise * np.sqrt(np.mean(speech ** 2) / np.mean(noise ** 2)) * 10 ** (-10 / 20)  # 10 dB SNR
    engines = Engines(SileroVad(), FakeRecognizer(("he was not an ill disposed young man",)), FakeLanguageModel(),
                      FakeSynthesizer())
    with running_server(engines) as host:
        async with openai_client(host).realtime.connect(model="bargein-test") as connection:
            log = EventLog()
            reader = asyncio.create_task(collect(connection, log))
            await log.wait_for(lambda e: e["type"] == "session.created")
            await connection.session.update(session={"type": "realtime",
                                                     "audio": {"input": {"noise_reduction": {"type": "far_field"}}}})
            updated = await log.wait_for(lambda e: e["type"] == "session.updated")
            await stream_realtime(connection, float_to_int16(audio.astype(np.float32)).tobytes())
            done = await log.wait_for(lambda e: e["type"] == "response.done", timeout=30)
            reader.cancel()

    for received in log.events:
        validate_server_event(received.event)
    assert updated["session"]["audio"]["input"]["noise_reduction"]["type"] == "far_field"
    assert len(log.of("input_audio_buffer.speech_started")) == 1, "one utterance in noise must give one turn"
    assert not log.of("error")
    assert done["response"]["status"] == "completed"
