"""The flite fallback synthesiser, with the real flite program."""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import numpy as np
import pytest

from bargein.audio.crossfade import Crossfader
from bargein.engines.base import SpeechSynthesizer
from bargein.engines.speak.flite_tts import FliteNotFound, FliteSynthesizer, decode_wav, split_sentences
from bargein.values import CancelToken, SpeechChunk

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("flite") is None, reason="flite is not installed (apt-get install flite)"),
]

TEXT = "Hello there. This is the fallback voice speaking. It is fast, if a little robotic!"


async def _collect(tts: FliteSynthesizer, text: str, voice: str | None = None,
                   cancel: CancelToken | None = None) -> list[SpeechChunk]:
    return [c async for c in tts.synthesize(text, voice=voice, cancel=cancel or CancelToken())]


def _rms(audio: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(audio, dtype=np.float64))))


def test_sentences_are_split_for_streaming() -> None:
    assert split_sentences(TEXT) == ["Hello there.", "This is the fallback voice speaking.",
                                     "It is fast, if a little robotic!"]
    assert split_sentences("no punctuation at all") == ["no punctuation at all"]
    assert split_sentences("  ") == []


async def test_speaks_24khz_one_chunk_per_sentence() -> None:
    tts = FliteSynthesizer()
    assert isinstance(tts, SpeechSynthesizer)
    chunks = await _collect(tts, TEXT)
    assert len(chunks) == 3
    for chunk, sentence in zip(chunks, split_sentences(TEXT), strict=True):
        assert chunk.sample_rate == 24_000 and chunk.audio.dtype == np.float32 and chunk.audio.ndim == 1
        assert _rms(chunk.audio) > 0.01 and np.max(np.abs(chunk.audio)) <= 1.0
        words = sentence.split()
        seconds = len(chunk.audio) / 24_000
        assert len(words) / 5.0 < seconds < len(words) / 1.0 + 0.5
        assert [w.word for w in chunk.words] == words
        duration_ms = seconds * 1000
        assert all(0 <= w.start_ms < w.end_ms <= duration_ms for w in chunk.words)
        # Proportional to characters: a longer word takes longer.
        longest = max(chunk.words, key=lambda w: len(w.word))
        shortest = min(chunk.words, key=lambda w: len(w.word))
        assert longest.end_ms - longest.start_ms >= shortest.end_ms - shortest.start_ms


def _flite_directly(tts: FliteSynthesizer, sentence: str) -> bytes:
    command = [tts.binary, "-voice", tts.default_voice, "-t", sentence, "-o", "/dev/stdout"]
    return subprocess.run(command, capture_output=True, check=True).stdout


async def test_resampling_keeps_the_duration() -> None:
    tts = FliteSynthesizer()
    sentence = "The duration must not change when the rate does."
    raw = await asyncio.to_thread(_flite_directly, tts, sentence)
    native, rate = decode_wav(raw)
    (chunk,) = await _collect(tts, sentence)
    assert rate != 24_000  # flite's voices are 8 or 16 kHz, so this path resamples
    # Same sound after the leading silence (trimmed to 100 ms), same length to within a sample or two.
    onset = int(np.flatnonzero(np.abs(native) > 0.01)[0]) / rate
    trimmed = onset - int(np.flatnonzero(np.abs(chunk.audio) > 0.01)[0]) / 24_000
    assert 0.0 <= trimmed <= onset
    assert abs(len(chunk.audio) / 24_000 + trimmed - len(native) / rate) < 0.002
    assert np.max(np.abs(chunk.audio)) == pytest.approx(np.max(np.abs(native)), rel=0.05)


async def test_cancel_stops_within_one_chunk() -> None:
    tts = FliteSynthesizer()
    cancel = CancelToken()
    received = []
    async for chunk in tts.synthesize(TEXT, voice=None, cancel=cancel):
        received.append(chunk)
        cancel.cancel()
    assert len(received) == 1

    # Cancelled while the first flite process runs: it is killed and nothing arrives.
    cancel = CancelToken()
    stream = tts.synthesize(" ".join([TEXT] * 5), voice=None, cancel=cancel)
    first = asyncio.ensure_future(anext(stream, None))
    await asyncio.sleep(0.005)
    cancel.cancel()
    assert await first is None
    assert len(await _collect(tts, "Still working.")) == 1


async def test_voices_and_odd_text() -> None:
    tts = FliteSynthesizer()
    for name in (None, "", "alloy", "echo", "rms", "no-such-voice"):
        assert tts.resolve_voice(name) in tts.voices
    assert tts.resolve_voice("echo") in {"rms", "awb"}
    chunks = await _collect(tts, "-dash first, then words.", voice="no-such-voice")
    assert len(chunks) == 1 and _rms(chunks[0].audio) > 0.01
    assert await _collect(tts, "  ") == []


async def test_chunks_join_without_clicks() -> None:
    chunks = await _collect(FliteSynthesizer(), TEXT)
    inside = max(float(np.max(np.abs(np.diff(c.audio)))) for c in chunks)
    fader = Crossfader(24_000)
    joined = np.concatenate([*(fader.push(c).audio for c in chunks), fader.flush().audio])
    assert float(np.max(np.abs(np.diff(joined)))) <= inside


def test_missing_binary_names_the_fix() -> None:
    with pytest.raises(FliteNotFound, match="apt-get install flite"):
        FliteSynthesizer(binary="no-such-flite-binary")
