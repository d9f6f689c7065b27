"""Opus packets of a known tone, encoded with the libopus that PyAV carries (as a caller's would be)."""

from __future__ import annotations

import fractions

import av
import numpy as np
import numpy.typing as npt

RATE = 48_000
FRAME = 960
TONE_HZ = 440.0


def tone(frames: int, amplitude: float = 0.3) -> npt.NDArray[np.int16]:
    """``frames`` 20 ms frames of a 440 Hz sine at 48 kHz, pcm16 mono."""
    t = np.arange(frames * FRAME) / RATE
    return (amplitude * np.sin(2 * np.pi * TONE_HZ * t) * 32767).astype(np.int16)


def opus_packets(samples: npt.NDArray[np.int16]) -> list[bytes]:
    """One Opus packet per 20 ms of ``samples`` (48 kHz mono)."""
    encoder = av.CodecContext.create("libopus", "w")
    encoder.bit_rate, encoder.format, encoder.layout = 64_000, "s16", "mono"  # type: ignore[attr-defined]
    encoder.sample_rate, encoder.time_base = RATE, fractions.Fraction(1, RATE)  # type: ignore[attr-defined]
    packets: list[bytes] = []
    for index in range(len(samples) // FRAME):
        frame = av.AudioFrame.from_ndarray(samples[index * FRAME:(index + 1) * FRAME].reshape(1, -1).copy(),
                                           format="s16", layout="mono")
        frame.sample_rate, frame.pts = RATE, index * FRAME
        packets += [bytes(packet) for packet in encoder.encode(frame)]  # type: ignore[attr-defined]
    packets += [bytes(packet) for packet in encoder.encode(None)]  # type: ignore[attr-defined]
    return packets
