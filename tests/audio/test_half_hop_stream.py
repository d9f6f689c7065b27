"""The half-hop VAD stream: its frames end half a frame after the main grid's, carry the audio at their place in
the stream, and run on a stream of their own (its own recurrent state), opened afresh each time it starts."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from bargein.audio.codecs import AudioFormat
from bargein.session.audio_input import AudioInput
from bargein.session.core.vocabulary import OnsetProbe, VadFrame
from bargein.session.input_buffer import MS_PER_SAMPLE
from bargein.values import Float32Audio

FRAME = 512
CHUNK = 320  # 20 ms packets: the frames end at every phase of a packet


class _Stream:
    """Records its frames; its "state" is how many it has seen, which it returns as the probability."""

    def __init__(self) -> None:
        self.frames: list[npt.NDArray[np.float32]] = []
        self.closed = False

    async def probability(self, frame: Float32Audio) -> float:
        self.frames.append(frame.copy())
        return float(len(self.frames))

    def reset(self) -> None:
        self.frames.clear()

    def close(self) -> None:
        self.closed = True


class _Detector:
    frame_samples = FRAME

    def __init__(self) -> None:
        self.streams: list[_Stream] = []

    def open_stream(self) -> _Stream:
        self.streams.append(_Stream())
        return self.streams[-1]


def _ramp(first: int, count: int) -> npt.NDArray[np.float32]:
    """Each sample's stream position, scaled: a frame's content tells where it was cut from."""
    return (np.arange(first, first + count) / 1e5).astype(np.float32)


async def _feed(audio_in: AudioInput, first: int, chunks: int, *, probe: bool) -> list[VadFrame | OnsetProbe]:
    frames: list[VadFrame | OnsetProbe] = []
    for index in range(chunks):
        frames += await audio_in.hear(_ramp(first + index * CHUNK, CHUNK), onset_probe=probe)
    return frames


def _sample(ms: float) -> int:
    return round(ms / MS_PER_SAMPLE)


async def test_probe_frames_end_half_a_frame_after_the_main_ones_and_carry_their_own_audio() -> None:
    detector = _Detector()
    audio_in = AudioInput(detector, AudioFormat())  # type: ignore[arg-type]
    await _feed(audio_in, 0, 7, probe=False)  # 2240 samples: the probe starts mid-frame, off the grid
    frames = await _feed(audio_in, 7 * CHUNK, 40, probe=True)
    main_stream, probe_stream = detector.streams
    probes = [f for f in frames if isinstance(f, OnsetProbe)]
    mains = [f for f in frames if isinstance(f, VadFrame)]
    assert len(probes) >= 20 and len(mains) >= 20
    assert [f.end_ms for f in frames] == sorted(f.end_ms for f in frames), "fed to the machine in stream order"
    first_probe = _sample(probes[0].start_ms)
    assert 7 * CHUNK <= first_probe < 7 * CHUNK + FRAME, "the first grid point after the probe was switched on"
    main_ends = {_sample(f.end_ms) for f in mains}
    for probe in probes:
        end = _sample(probe.end_ms)
        assert end - _sample(probe.start_ms) == FRAME
        assert end % FRAME == FRAME // 2 and end - FRAME // 2 in main_ends | {_sample(mains[0].start_ms)}
    for probe, heard in zip(probes, probe_stream.frames, strict=True):
        start = _sample(probe.start_ms)
        np.testing.assert_allclose(heard, _ramp(start, FRAME), rtol=0, atol=1e-7)
    assert [p.probability for p in probes] == [float(n) for n in range(1, len(probes) + 1)], "its own state"
    assert len(main_stream.frames) == _sample(mains[-1].end_ms) // FRAME, "the main stream saw only its frames"


async def test_the_probe_stream_closes_when_switched_off_and_starts_afresh() -> None:
    detector = _Detector()
    audio_in = AudioInput(detector, AudioFormat())  # type: ignore[arg-type]
    await _feed(audio_in, 0, 10, probe=True)
    first = detector.streams[1]
    assert first.frames and not first.closed
    assert not [f for f in await _feed(audio_in, 10 * CHUNK, 10, probe=False) if isinstance(f, OnsetProbe)]
    assert first.closed
    again = [f for f in await _feed(audio_in, 20 * CHUNK, 10, probe=True) if isinstance(f, OnsetProbe)]
    second = detector.streams[2]
    assert again and again[0].probability == 1.0 and second is not first, "a fresh stream, from silence"
    assert _sample(again[0].end_ms) % FRAME == FRAME // 2
    audio_in.close()
    assert second.closed
