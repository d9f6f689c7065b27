"""Wire codecs: pcm16 framing rules, G.711 bit-exact with the reference (``audioop``), and their edges: non-finite
engine samples, empty and odd-sized payloads."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from bargein.audio.codecs import AudioFormat, AudioFormatError, decode_base64, encode_base64, float_to_int16
from bargein.audio.framing import Framer
from bargein.audio.resample import StreamResampler, resample

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop  # the reference G.711 implementation, present until Python 3.13

ALL_SAMPLES = np.arange(-32768, 32768, dtype=np.int16)


@pytest.mark.parametrize(("kind", "encode", "decode"), [
    ("audio/pcmu", audioop.lin2ulaw, audioop.ulaw2lin),
    ("audio/pcma", audioop.lin2alaw, audioop.alaw2lin),
])
def test_g711_matches_the_reference_for_every_sample_and_byte(kind: str, encode, decode) -> None:  # type: ignore[no-untyped-def]
    fmt = AudioFormat(kind, 8000)  # type: ignore[arg-type]
    assert fmt.encode(ALL_SAMPLES) == encode(ALL_SAMPLES.tobytes(), 2)
    every_byte = bytes(range(256))
    assert fmt.decode(every_byte).tobytes() == decode(every_byte, 2)


def test_pcm16_round_trips_and_refuses_half_samples() -> None:
    fmt = AudioFormat()
    samples = np.array([0, 1, -1, 32767, -32768], dtype=np.int16)
    assert np.array_equal(fmt.decode(fmt.encode(samples)), samples)
    with pytest.raises(AudioFormatError, match="odd byte count"):
        fmt.decode(b"\x00\x01\x02")


def test_base64_is_strict() -> None:
    assert decode_base64(encode_base64(b"\x00\xff")) == b"\x00\xff"
    for bad in ("abc", "@@@@", "YQ==YQ=="):
        with pytest.raises(AudioFormatError):
            decode_base64(bad)


def test_durations_follow_the_format() -> None:
    assert AudioFormat().duration_ms(48_000) == 1000.0
    assert AudioFormat("audio/pcmu", 8000).duration_ms(8000) == 1000.0


def test_streaming_resampler_matches_one_shot_resampling() -> None:
    rng = np.random.default_rng(1)
    signal = (0.3 * np.sin(2 * np.pi * 440 * np.arange(24_000) / 24_000)
              + 0.01 * rng.standard_normal(24_000)).astype(np.float32)
    stream = StreamResampler(24_000, 16_000)
    pieces = [stream.process(signal[i:i + 480]) for i in range(0, len(signal), 480)]
    pieces.append(stream.process(np.zeros(0, np.float32), last=True))
    streamed = np.concatenate(pieces)
    whole = resample(signal, 24_000, 16_000)
    assert abs(len(streamed) - len(whole)) <= 2
    n = min(len(streamed), len(whole))
    assert np.max(np.abs(streamed[:n] - whole[:n])) < 1e-3


def test_framer_returns_whole_frames_and_keeps_the_rest() -> None:
    framer = Framer(512)
    assert framer.push(np.ones(500, np.float32)) == []
    frames = framer.push(np.ones(600, np.float32))
    assert [len(f) for f in frames] == [512, 512][: len(frames)] and len(frames) == 2
    assert framer.samples_framed == 1024


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
