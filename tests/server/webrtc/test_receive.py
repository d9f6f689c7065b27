"""The caller's audio on its way in: packets released in order at once, reordering waited for, loss concealed."""

from __future__ import annotations

import asyncio
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import numpy.typing as npt
import pytest

from bargein.audio.resample import LowDelayResampler
from bargein.server.webrtc import receive
from bargein.server.webrtc.receive import DECODE_RATE, MAX_CONCEALED, ConcealingDecoder, ReceiveBuffer, ReceivedAudio
from bargein.server.webrtc.reorder import CAPACITY, MAX_WAIT_S, MIN_WAIT_S, Release, Reorderer
from tests.server.webrtc.opus_packets import FRAME, opus_packets, tone


def _payloads(releases: list[Release]) -> list[bytes | None]:
    return [release.payload for release in releases]


def test_packets_in_order_leave_as_they_come() -> None:
    reorderer = Reorderer()
    for index in range(5):
        assert _payloads(reorderer.take(100 + index, index * FRAME, bytes([index]), 0.0)) == [bytes([index])]
    assert reorderer.deadline() is None and reorderer.concealed == 0


def test_the_sequence_number_wraps_in_order() -> None:
    reorderer = Reorderer()
    out = [reorderer.take(sequence, index * FRAME, bytes([index]), 0.0)
           for index, sequence in enumerate((65534, 65535, 0, 1))]
    assert [_payloads(released) for released in out] == [[b"\x00"], [b"\x01"], [b"\x02"], [b"\x03"]]


def test_a_reordered_packet_is_waited_for_and_both_leave_in_order() -> None:
    reorderer = Reorderer()
    reorderer.take(1, 0, b"a", 0.0)
    assert reorderer.take(3, 2 * FRAME, b"c", 0.010) == []  # 2 is missing: 3 waits
    assert reorderer.deadline() == 0.010 + MIN_WAIT_S
    assert _payloads(reorderer.take(2, FRAME, b"b", 0.028)) == [b"b", b"c"]
    assert reorderer.concealed == 0 and reorderer.deadline() is None
    assert reorderer.wait_s > MIN_WAIT_S  # it came 18 ms late: the next gap waits that long with a margin


def test_a_lost_packet_is_concealed_once_its_wait_runs_out_and_a_late_one_dropped() -> None:
    reorderer = Reorderer()
    reorderer.take(1, 0, b"a", 0.0)
    reorderer.take(3, 2 * FRAME, b"c", 0.020)
    assert reorderer.due(0.020 + MIN_WAIT_S / 2) == []
    released = reorderer.due(0.020 + MIN_WAIT_S)
    assert [(release.timestamp, release.payload) for release in released] == [(FRAME, None), (2 * FRAME, b"c")]
    assert reorderer.take(2, FRAME, b"b", 0.1) == [] and reorderer.late == 1
    assert MIN_WAIT_S < reorderer.wait_s <= MAX_WAIT_S


def test_a_jump_past_the_capacity_gives_the_gap_up() -> None:
    reorderer = Reorderer()
    reorderer.take(1, 0, b"a", 0.0)
    reorderer.take(3, 2 * FRAME, b"c", 0.0)
    released = reorderer.take(3 + CAPACITY, (2 + CAPACITY) * FRAME, b"z", 0.001)
    assert _payloads(released) == [b"c", b"z"] and reorderer.deadline() is None


def test_a_sender_that_starts_over_far_behind_is_followed_not_dropped() -> None:
    reorderer = Reorderer()
    for index in range(3):
        reorderer.take(5000 + index, index * FRAME, b"a", 0.0)
    assert _payloads(reorderer.take(200, 3 * FRAME, b"new", 0.02)) == [b"new"]
    assert _payloads(reorderer.take(201, 4 * FRAME, b"next", 0.04)) == [b"next"] and reorderer.late == 0


def _rms(samples: npt.NDArray[np.int16]) -> float:
    return float(np.sqrt(np.mean(samples.astype(np.float64) ** 2)))


def _decoded(decoder: ConcealingDecoder, release: Release) -> npt.NDArray[np.int16]:
    return np.concatenate([frame.to_ndarray().reshape(-1) for frame in decoder.decode(release)])


def test_a_dropped_packet_of_a_tone_is_continued_not_zeroed() -> None:
    packets = opus_packets(tone(30))
    decoder = ConcealingDecoder()
    clean = [_decoded(decoder, Release(index * FRAME, packet)) for index, packet in enumerate(packets[:20])]
    concealed = _decoded(decoder, Release(20 * FRAME, None))
    assert len(concealed) == FRAME
    assert _rms(concealed) > 0.5 * _rms(clean[-1])  # the voice goes on through the lost packet
    spectrum = np.abs(np.fft.rfft(concealed.astype(np.float64)))
    assert abs(np.argmax(spectrum) * 48_000 / FRAME - 440) <= 50  # and it is the same tone
    after = _decoded(decoder, Release(21 * FRAME, packets[21]))
    assert _rms(after) > 0.5 * _rms(clean[-1])


def test_a_long_gap_fades_then_turns_to_silence() -> None:
    packets = opus_packets(tone(30))
    decoder = ConcealingDecoder()
    for index, packet in enumerate(packets[:20]):
        decoder.decode(Release(index * FRAME, packet))
    gap = [_decoded(decoder, Release((20 + index) * FRAME, None)) for index in range(MAX_CONCEALED + 3)]
    assert _rms(gap[0]) > 0
    assert all(len(frame) == FRAME for frame in gap)
    assert all(not frame.any() for frame in gap[MAX_CONCEALED:])  # bounded: silence after a few frames


def test_an_empty_payload_is_concealed_and_the_decoder_goes_on() -> None:
    packets = opus_packets(tone(10))
    decoder = ConcealingDecoder()
    for index, packet in enumerate(packets[:4]):
        decoder.decode(Release(index * FRAME, packet))
    assert len(_decoded(decoder, Release(4 * FRAME, b""))) == FRAME
    assert _rms(_decoded(decoder, Release(5 * FRAME, packets[5]))) > 1000  # not ended by an empty packet


async def test_the_buffer_conceals_a_lost_packet_on_its_own_timer() -> None:
    packets = opus_packets(tone(10))
    out = ReceivedAudio()
    buffer = ReceiveBuffer(out)
    for index, packet in enumerate(packets[:10]):
        if index != 4:  # packet 4 is lost
            buffer.add(SimpleNamespace(sequence_number=500 + index, timestamp=7_000 + index * FRAME, _data=packet))
    frames = [await asyncio.wait_for(out.recv(), 1.0) for _ in range(4)]  # the ones before the gap, at once
    frames += [await asyncio.wait_for(out.recv(), 1.0) for _ in range(6)]  # the concealment, then the rest
    assert [frame.pts for frame in frames] == [index * FRAME for index in range(10)]
    assert frames[4].to_ndarray().any() and buffer.reorderer.concealed == 1
    buffer.close()


def test_without_libopus_to_call_pyav_decodes_and_conceals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(receive, "load_libopus", lambda: None)
    packets = opus_packets(tone(30))
    decoder = ConcealingDecoder()
    assert decoder.codec is not None  # PyAV's libopus decoder, with concealment only
    clean = [_decoded(decoder, Release(index * FRAME, packet)) for index, packet in enumerate(packets[:20])]
    concealed = _decoded(decoder, Release(20 * FRAME, None, packets[21]))
    assert len(concealed) == FRAME and _rms(concealed) > 0.5 * _rms(clean[-1]) and decoder.recovered == 0


def test_at_the_listening_rate_frames_and_their_clock_are_in_its_samples() -> None:
    packets = opus_packets(tone(30))
    decoder = ConcealingDecoder(DECODE_RATE)
    half = FRAME * DECODE_RATE // 48_000
    frames = [frame for index, packet in enumerate(packets[:20]) for frame in decoder.decode(Release(index * FRAME,
                                                                                                      packet))]
    assert [(frame.sample_rate, frame.samples) for frame in frames] == [(DECODE_RATE, half)] * 20
    assert [frame.pts for frame in frames] == [index * half for index in range(20)]  # the 48 kHz RTP clock, scaled
    assert frames[0].time_base == Fraction(1, DECODE_RATE)
    spectrum = np.abs(np.fft.rfft(frames[-1].to_ndarray().reshape(-1).astype(np.float64)))
    assert abs(np.argmax(spectrum) * DECODE_RATE / half - 440) <= 50  # the same tone
    concealed = decoder.decode(Release(20 * FRAME, None))
    assert [(frame.pts, frame.samples) for frame in concealed] == [(20 * half, half)]
    assert _rms(concealed[0].to_ndarray().reshape(-1)) > 0.5 * _rms(frames[-1].to_ndarray().reshape(-1))


def test_decoded_at_the_listening_rate_no_resampler_holds_back_the_end_of_a_packet() -> None:
    """Decoded at 48 kHz, the listen path's two resampling steps held back 42 samples of each packet at 16 kHz (one
    step from 24 kHz, 25); at 16 kHz there is no step, and nothing is held."""
    packets = opus_packets(tone(10))
    ways = {48_000: [LowDelayResampler(48_000, 24_000), LowDelayResampler(24_000, 16_000)],
            24_000: [LowDelayResampler(24_000, 16_000)], DECODE_RATE: []}
    held = {}
    for rate, steps in ways.items():
        decoder, out = ConcealingDecoder(rate), 0
        for index, packet in enumerate(packets[:10]):
            for frame in decoder.decode(Release(index * FRAME, packet)):
                audio = frame.to_ndarray().reshape(-1).astype(np.float32) / 32768.0
                for step in steps:
                    audio = step.process(audio)
                out += len(audio)
        held[rate] = 10 * 320 - out
    assert held == {48_000: 42, 24_000: 25, DECODE_RATE: 0}


def test_without_libopus_frames_come_at_48_khz_whatever_rate_was_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(receive, "load_libopus", lambda: None)
    decoder = ConcealingDecoder(DECODE_RATE)
    (frame,) = decoder.decode(Release(3 * FRAME, opus_packets(tone(4))[0]))
    assert (decoder.rate, frame.sample_rate, frame.samples, frame.pts) == (48_000, 48_000, FRAME, 3 * FRAME)
