"""The input stage's stream clock: format and noise-reduction switches neither drop nor shift what was said, and a
client's commit takes every sample appended before it."""

from __future__ import annotations

import asyncio
import base64
import json

import numpy as np
import numpy.typing as npt
import pytest

from bargein.audio.codecs import AudioFormat, float_to_int16
from bargein.audio.resample import resample
from bargein.engines.base import Engines, VoiceActivityDetector
from bargein.engines.fakes import FakeLanguageModel, FakeRecognizer, FakeSynthesizer, FakeVad
from bargein.session.audio_input import AudioInput
from bargein.session.realtime_session import RealtimeSession
from bargein.values import Float32Audio, Transcript
from testdata.speech import librivox_clip

PCM = AudioFormat()
PCMU = AudioFormat("audio/pcmu", 8000)
PCMA = AudioFormat("audio/pcma", 8000)


def _tone(fmt: AudioFormat, seconds: float, amplitude: float) -> npt.NDArray[np.int16]:
    t = np.arange(int(seconds * fmt.rate)) / fmt.rate
    return np.round(amplitude * 32767 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)


async def _send(audio_in: AudioInput, fmt: AudioFormat, samples: npt.NDArray[np.int16]) -> None:
    """20 ms appends, as a telephony or browser client sends them."""
    step = fmt.rate // 50
    for start in range(0, len(samples), step):
        await audio_in.hear(audio_in.decode(fmt.encode(samples[start:start + step])))


async def test_a_format_switch_keeps_what_the_old_resampler_held_and_the_clock_exact() -> None:
    audio_in = AudioInput(FakeVad(), PCMU)
    await _send(audio_in, PCMU, _tone(PCMU, 1.0, 0.01))  # 1 s of quiet pcmu (soxr holds ~60 ms of it back)
    audio_in.set_format(PCM)
    loud = np.concatenate([np.zeros(12_000, np.int16), _tone(PCM, 0.5, 0.5)])  # speech from 1.5 s on
    await _send(audio_in, PCM, loud)
    audio_in.set_format(PCMA)  # flushes the pcm filter too
    await audio_in.hear(audio_in.decode(b""))
    assert audio_in.buffer.end_sample == 2 * 16_000  # every sample received, none lost at either switch
    heard = audio_in.buffer.peek(0)
    onset = int(np.argmax(np.abs(heard) > 0.25))
    assert abs(onset - 24_000) <= 16  # the loud part starts at 1.5 s on the stream clock (within 1 ms)
    quiet = heard[15_000:16_000]
    assert 0.005 < float(np.max(np.abs(quiet))) < 0.02  # the pcmu tail was heard, not replaced by silence


async def test_noise_reduction_on_and_off_keeps_the_clock_exact_and_the_audio_in_place() -> None:
    audio_in = AudioInput(FakeVad(), PCM)
    expected = 0
    for fmt, suppress in ((PCM, False), (PCM, True), (PCMU, True), (PCMU, False), (PCMA, True), (PCM, False)):
        audio_in.set_noise_reduction(suppress)
        audio_in.set_format(fmt)
        await _send(audio_in, fmt, np.zeros(fmt.rate // 2, np.int16))
        expected += 8_000
    audio_in.set_format(PCMU)
    await audio_in.hear(audio_in.decode(b""))
    assert audio_in.buffer.end_sample == expected
    audio_in.close()


async def test_denoised_speech_is_not_shifted_late_on_the_stream_clock() -> None:
    speech = librivox_clip("0870")[:3 * 16_000]
    audio_in = AudioInput(FakeVad(), PCM)
    audio_in.set_noise_reduction(True)
    await _send(audio_in, PCM, float_to_int16(resample(speech, 16_000, PCM.rate)))
    audio_in.set_noise_reduction(False)
    await audio_in.hear(audio_in.decode(b""))
    heard = audio_in.buffer.peek(0)
    assert abs(len(heard) - len(speech)) <= 1
    n = min(len(heard), len(speech))
    # each word sits where it was said (RNNoise's 20 ms delay would put it 320 samples late)
    assert np.corrcoef(speech[:n], heard[:n])[0, 1] > 0.9
    audio_in.close()


@pytest.mark.parametrize("suppress", [False, True], ids=["plain", "noise reduction"])
@pytest.mark.parametrize("fmt", [PCM, PCMU], ids=["pcm", "pcmu"])
async def test_what_the_input_path_holds_comes_out_at_a_commit_and_the_stream_goes_on(fmt: AudioFormat,
                                                                                      suppress: bool) -> None:
    """A commit takes every sample appended before it (what the resampler, and with noise reduction the
    suppressor, still holds: 6 to 81 ms); the next second of audio then lands exactly on the clock."""
    speech = librivox_clip("0870")[:2 * 16_000]
    audio_in = AudioInput(FakeVad(), fmt)
    audio_in.set_noise_reduction(suppress)
    wire = float_to_int16(resample(speech, 16_000, fmt.rate))
    await _send(audio_in, fmt, wire[:fmt.rate])
    await audio_in.hear(audio_in.held())  # what input_audio_buffer.commit does first
    assert audio_in.buffer.end_sample == 16_000
    await _send(audio_in, fmt, wire[fmt.rate:])
    await audio_in.hear(audio_in.held())
    assert audio_in.buffer.end_sample == 32_000
    heard = audio_in.buffer.peek(0)
    for second in (slice(0, 16_000), slice(16_000, 32_000)):  # each second where it was said
        assert np.corrcoef(speech[second], heard[second])[0, 1] > 0.85
    audio_in.close()


class _RecordingRecognizer(FakeRecognizer):
    """Remembers the length of every clip it is asked to transcribe."""

    def __init__(self) -> None:
        super().__init__()
        self.lengths: list[int] = []
        self.clips: list[Float32Audio] = []

    async def transcribe(self, audio: Float32Audio, *, language: str | None = None,
                         prompt: str | None = None) -> Transcript:
        """Record the clip's length, then answer as the fake does."""
        self.lengths.append(len(audio))
        self.clips.append(audio)
        return await super().transcribe(audio, language=language, prompt=prompt)


async def test_a_manual_commit_takes_all_the_audio_appended_before_it() -> None:
    recognizer = _RecordingRecognizer()
    session = RealtimeSession(Engines(FakeVad(), recognizer, FakeLanguageModel(), FakeSynthesizer()))
    session.start()
    await session.handle_message(json.dumps({"type": "session.update", "session": {"type": "realtime", "audio": {
        "input": {"format": {"type": "audio/pcmu"}, "turn_detection": None}}}}))
    tone = PCMU.encode(_tone(PCMU, 1.0, 0.3))
    for start in range(0, len(tone), 160):
        await session.handle_message(json.dumps({"type": "input_audio_buffer.append",
                                                 "audio": base64.b64encode(tone[start:start + 160]).decode()}))
    await session.handle_message(json.dumps({"type": "input_audio_buffer.commit"}))
    for _ in range(100):
        if recognizer.lengths:
            break
        await asyncio.sleep(0.01)
    assert recognizer.lengths and abs(recognizer.lengths[-1] - 16_000) <= 16  # the whole second, to within 1 ms


class _VadFailingAt(VoiceActivityDetector):
    """A VAD whose streams fail on the ``at``-th frame they are asked about (counting every stream's frames)."""

    frame_samples = 512

    def __init__(self, at: int) -> None:
        self.at = at
        self.asked = 0

    def open_stream(self) -> _VadFailingAt:
        return self

    async def probability(self, frame: Float32Audio) -> float:
        self.asked += 1
        if self.asked >= self.at:
            raise RuntimeError("the VAD died")
        return 0.02

    def reset(self) -> None:
        """Stateless."""

    def close(self) -> None:
        """Stateless."""


async def test_audio_after_the_vad_fails_mid_append_is_still_buffered() -> None:
    """The VAD fails partway into a 25 s append (heard 10 s at a time): the session goes on with manual turns, and
    every second of that append is in the buffer for the commit, not only the slices heard before the failure."""
    session = RealtimeSession(Engines(_VadFailingAt(400), FakeRecognizer(), FakeLanguageModel(), FakeSynthesizer()))
    session.start()
    pcm = _tone(PCM, 25.0, 0.3).tobytes()
    await session.handle_message(json.dumps({"type": "input_audio_buffer.append",
                                             "audio": base64.b64encode(pcm).decode()}))
    assert not session.audio_in.vad_running
    assert abs(session.audio_in.buffer.duration_ms - 25_000) <= 10
    await session.close()


async def test_a_clear_takes_what_the_input_path_held_with_it() -> None:
    """Speech, a clear, then silence and a commit: the committed turn holds only silence (the resampler's tail of
    the cleared speech, 60 ms at 8 kHz, used to open the next buffer)."""
    recognizer = _RecordingRecognizer()
    session = RealtimeSession(Engines(FakeVad(), recognizer, FakeLanguageModel(), FakeSynthesizer()))
    session.start()
    await session.handle_message(json.dumps({"type": "session.update", "session": {"type": "realtime", "audio": {
        "input": {"format": {"type": "audio/pcmu"}, "turn_detection": None}}}}))
    for part, then in ((_tone(PCMU, 1.0, 0.3), "input_audio_buffer.clear"),
                       (np.zeros(4_000, np.int16), "input_audio_buffer.commit")):
        wire = PCMU.encode(part)
        for start in range(0, len(wire), 160):
            await session.handle_message(json.dumps({"type": "input_audio_buffer.append",
                                                     "audio": base64.b64encode(wire[start:start + 160]).decode()}))
        await session.handle_message(json.dumps({"type": then}))
    for _ in range(100):
        if recognizer.clips:
            break
        await asyncio.sleep(0.01)
    assert recognizer.clips and abs(len(recognizer.clips[-1]) - 8_000) <= 16
    assert float(np.max(np.abs(recognizer.clips[-1]))) < 0.01, "nothing of the cleared speech"
    await session.close()
