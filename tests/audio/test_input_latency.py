"""The input path's hold-back: audio a client appends reaches the VAD within a few ms, at every append.

soxr's streaming filters work in blocks: at 8 kHz (G.711, telephony) its "LQ" stream held back up to 61 ms of
audio between 20 ms appends (33 ms on average), at 24 kHz up to 20 ms, and every ms held back delays the VAD's
frames and so the endpoint. The listening resampler must hold back only its filter's half length.
"""

from __future__ import annotations

import numpy as np
import pytest

from bargein.audio.codecs import AudioFormat
from bargein.audio.resample import LowDelayResampler, resample
from bargein.engines.fakes import FakeVad
from bargein.session.audio_input import AudioInput
from bargein.weights import WeightError

PCM = AudioFormat()
PCMU = AudioFormat("audio/pcmu", 8000)

MAX_HELD_MS = 5.0


@pytest.mark.parametrize("fmt", [PCM, PCMU], ids=["pcm 24 kHz", "pcmu 8 kHz"])
async def test_every_20_ms_append_is_heard_within_a_few_ms(fmt: AudioFormat) -> None:
    audio_in = AudioInput(FakeVad(), fmt)
    step = fmt.rate // 50
    rng = np.random.default_rng(3)
    worst = 0.0
    for index in range(1, 151):
        chunk = (rng.standard_normal(step) * 2000).astype(np.int16)
        await audio_in.hear(audio_in.decode(fmt.encode(chunk)))
        worst = max(worst, index * 20.0 - audio_in.stream_ms)
    assert worst <= MAX_HELD_MS, f"the input path held back up to {worst:.2f} ms"
    await audio_in.hear(audio_in.held())
    assert audio_in.buffer.end_sample == 150 * 320  # and a commit still takes every sample


@pytest.mark.parametrize(("in_rate", "out_rate"), [(24_000, 16_000), (8_000, 16_000), (24_000, 48_000),
                                                   (8_000, 48_000), (48_000, 16_000), (16_000, 16_000)])
@pytest.mark.parametrize("chunk", [1, 7, 160, 480, 48_000])
def test_the_low_delay_resampler_matches_soxr_in_place_and_in_length(in_rate: int, out_rate: int,
                                                                     chunk: int) -> None:
    """Streamed in any chunking, the output is aligned with its input (no delay), as long as the rate ratio says,
    and within a small error of soxr's high-quality one-shot conversion of the same band-limited signal."""
    rng = np.random.default_rng(5)
    seconds = 0.3 if chunk < 10 else 1.0
    t = np.arange(int(seconds * in_rate)) / in_rate
    tones = sum(0.2 * np.sin(2 * np.pi * f * t + rng.uniform(0, 6)) for f in (180.0, 700.0, 1900.0, 3100.0))
    signal = np.asarray(tones, dtype=np.float32)
    stream = LowDelayResampler(in_rate, out_rate)
    pieces = [stream.process(signal[i:i + chunk]) for i in range(0, len(signal), chunk)]
    pieces.append(stream.process(np.zeros(0, np.float32), last=True))
    streamed = np.concatenate(pieces)
    assert len(streamed) == round(len(signal) * out_rate / in_rate)
    reference = resample(signal, in_rate, out_rate)
    assert abs(len(reference) - len(streamed)) <= 1
    edge = out_rate // 100  # both treat the ends differently (zeros beyond them): compare the inside
    n = min(len(reference), len(streamed))
    error = np.max(np.abs(streamed[edge:n - edge] - reference[edge:n - edge]))
    assert error < 2e-3, error


def test_the_low_delay_resampler_starts_afresh_after_its_last_chunk() -> None:
    stream = LowDelayResampler(8_000, 16_000)
    ones = np.full(800, 0.5, np.float32)
    first = np.concatenate([stream.process(ones), stream.process(np.zeros(0, np.float32), last=True)])
    second = np.concatenate([stream.process(ones), stream.process(np.zeros(0, np.float32), last=True)])
    assert len(first) == len(second) == 1600
    assert np.allclose(first, second)


@pytest.mark.parametrize("fmt", [PCM, PCMU], ids=["pcm 24 kHz", "pcmu 8 kHz"])
async def test_with_noise_reduction_only_rnnoise_own_delay_is_held_back(fmt: AudioFormat) -> None:
    """RNNoise holds back its 20 ms and a 10 ms frame; the resamplers around it add only a few ms (soxr's blocks
    took the hold-back to 66 ms at 24 kHz and 100 ms at 8 kHz)."""
    audio_in = AudioInput(FakeVad(), fmt)
    audio_in.set_noise_reduction(True)
    step = fmt.rate // 50
    rng = np.random.default_rng(4)
    worst = 0.0
    for index in range(1, 101):
        await audio_in.hear(audio_in.decode(fmt.encode((rng.standard_normal(step) * 2000).astype(np.int16))))
        worst = max(worst, index * 20.0 - audio_in.stream_ms)
    assert worst <= 30.0 + MAX_HELD_MS, f"the denoised input path held back up to {worst:.2f} ms"
    await audio_in.hear(audio_in.held())
    assert audio_in.buffer.end_sample == 100 * 320
    audio_in.close()


async def _frames_out_per_packet(audio_in: AudioInput, rate: int | None, packet: int) -> list[int]:
    """How many VAD frames each of 16 packets of 20 ms (``packet`` samples, heard at ``rate``) made whole."""
    rng = np.random.default_rng(7)
    counts = []
    for _ in range(16):
        samples = (rng.standard_normal(packet) * 0.05).astype(np.float32)
        counts.append(len(await audio_in.hear(audio_in.listen(samples, rate))))
    return counts


async def test_audio_decoded_at_the_listening_rate_makes_each_vad_frame_whole_on_the_packet_that_ends_it() -> None:
    """A frame whose last sample ends a packet (every fifth: 512 and 320 samples meet every 2,560) comes out with that
    packet when the transport hands 16 kHz on as it is; through the input rate's resampler, one packet later."""
    direct = await _frames_out_per_packet(AudioInput(FakeVad(), PCM), 16_000, 320)
    resampled = await _frames_out_per_packet(AudioInput(FakeVad(), PCM), None, 480)
    # 16 packets are 5,120 samples: frames end at 512, 1,024, ..., and the 5th and 10th end packets 8 and 16 exactly
    assert direct == [0, 1, 0, 1, 1, 0, 1, 1, 0, 1, 0, 1, 1, 0, 1, 1]
    assert resampled == [0, 1, 0, 1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 0, 1, 0]
    assert sum(direct) == 10 and sum(resampled) == 9  # the 10th waits for the 17th packet


async def test_listening_rate_audio_is_refused_where_the_suppressor_wants_the_input_rate() -> None:
    audio_in = AudioInput(FakeVad(), PCM)
    with pytest.raises(ValueError, match="16000 Hz"):
        audio_in.listen(np.zeros(320, np.float32), 8_000)
    samples = np.linspace(-0.5, 0.5, 320, dtype=np.float32)
    assert np.array_equal(audio_in.listen(samples, 16_000), samples)  # no filter, nothing held
    try:
        audio_in.set_noise_reduction(True)
    except WeightError:  # RNNoise is optional
        pytest.skip("no RNNoise installed")
    with pytest.raises(ValueError):
        audio_in.listen(samples, 16_000)
