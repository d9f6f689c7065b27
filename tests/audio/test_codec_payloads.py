"""Edges of the audio codecs: non-finite engine samples, empty and odd-sized payloads."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from bargein.audio.codecs import AudioFormat, AudioFormatError, float_to_int16
from bargein.audio.framing import Framer

PCM = AudioFormat("audio/pcm", 24_000)
PCMU = AudioFormat("audio/pcmu", 8_000)
PCMA = AudioFormat("audio/pcma", 8_000)


def test_non_finite_samples_become_silence_or_full_scale_without_an_undefined_cast() -> None:
    """NaN has no int16 value (numpy's cast is undefined and warns); it is silence, and infinities clip."""
    samples = np.array([np.nan, np.inf, -np.inf, 0.5, 2.0, -2.0], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "invalid value encountered in cast" would raise here
        out = float_to_int16(samples)
    assert out.tolist() == [0, 32767, -32768, 16384, 32767, -32768]


@pytest.mark.parametrize("fmt", [PCMU, PCMA], ids=["pcmu", "pcma"])
def test_g711_takes_any_byte_count_and_keeps_its_length(fmt: AudioFormat) -> None:
    """One byte a sample: an odd or empty payload is whole samples, and encoding gives the same bytes back."""
    assert len(fmt.decode(b"")) == 0
    payload = bytes(range(0, 255, 2))  # 128 codes, then one more for an odd count
    payload += b"\x33"
    samples = fmt.decode(payload)
    assert len(samples) == len(payload)
    assert fmt.encode(samples) == fmt.encode(fmt.decode(fmt.encode(samples)))  # a decoded code is a fixed point
    assert fmt.duration_ms(len(payload)) == pytest.approx(1000.0 * len(payload) / 8_000)


def test_pcm16_refuses_a_split_sample_and_takes_an_empty_payload() -> None:
    """An odd pcm16 byte count is an error the client is told about, never a silent shift of every sample."""
    assert len(PCM.decode(b"")) == 0
    with pytest.raises(AudioFormatError):
        PCM.decode(b"\x00\x01\x02")


def test_a_framer_reset_keeps_the_next_frames_on_the_stream_clock() -> None:
    """Dropping a partial frame skips its samples: the next frame starts where its first sample sits in the stream,
    not that many samples early (every later VAD frame, and so every onset and end, would be misplaced)."""
    framer = Framer(512)
    framer.push(np.zeros(700, np.float32))  # one frame out, 188 samples held
    framer.reset()
    assert framer.push(np.ones(512, np.float32))
    assert framer.samples_framed == 700 + 512
